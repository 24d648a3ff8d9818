"""Timings and acceptance from the logs of llama.cpp's ``llama-speculative-simple`` and
``llama-completion`` (``-lv 4``)."""

from __future__ import annotations

import re
from typing import Any

_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf)"
_RE = {
    "encoded": re.compile(rf"encoded\s+(\d+) tokens in\s+{_NUM} seconds, speed:\s+{_NUM} t/s"),
    "decoded": re.compile(rf"decoded\s+(\d+) tokens in\s+{_NUM} seconds, speed:\s+{_NUM} t/s"),
    "n_draft": re.compile(r"\bn_draft\s+=\s+(\d+)"),
    "n_predict": re.compile(r"\bn_predict\s+=\s+(\d+)"),
    "n_drafted": re.compile(r"\bn_drafted\s+=\s+(\d+)"),
    "n_accept": re.compile(r"\bn_accept\s+=\s+(\d+)"),
    "accept": re.compile(rf"(?<![\w])accept\s+=\s+{_NUM}%"),
    "stats": re.compile(
        r"statistics\s+(\S+):\s+#calls\(b,g,a\)\s+=\s+(\d+)\s+(\d+)\s+(\d+),\s+#gen drafts\s+=\s+(\d+),"
        r"\s+#acc drafts\s+=\s+(\d+),\s+#gen tokens\s+=\s+(\d+),\s+#acc tokens\s+=\s+(\d+)(.*)"
    ),
    "stats_dur": re.compile(rf"dur\(b,g,a\)\s+=\s+{_NUM},\s+{_NUM},\s+{_NUM} ms"),
    "stats_acc": re.compile(rf"#mean acc len\s+=\s+{_NUM},\s+#acc rate/pos\s+=\s+\(([^)]*)\)"),
    "sampling": re.compile(rf"sampling time\s+=\s+{_NUM} ms"),
    "p_eval": re.compile(rf"prompt eval time\s+=\s+{_NUM} ms /\s+(\d+) tokens"),
    "eval": re.compile(rf"(?<!prompt )eval time\s+=\s+{_NUM} ms /\s+(\d+) runs"),
    "load": re.compile(rf"\bload time\s+=\s+{_NUM} ms"),
}


def parse_llama_output(text: str) -> dict[str, Any]:
    """Timings and acceptance from the log of llama-speculative-simple or llama-completion.

    Keys present only when found: encoded / decoded ({n, s, tps}), n_draft, n_predict,
    n_drafted, n_accept, accept_pct, spec ({type, calls_begin/draft/accept, gen_drafts,
    acc_drafts, gen_tokens, acc_tokens, mean_acc_len, acc_rate_pos[, dur_ms]}),
    sampling_ms, prompt_eval ({ms, n}), eval ({ms, n, tps}), load_ms. For
    llama-speculative-simple the ``target`` perf block comes last; the last match wins."""
    out: dict[str, Any] = {}

    def last(key):
        ms = list(_RE[key].finditer(text))
        return ms[-1] if ms else None

    for key in ("encoded", "decoded"):
        m = last(key)
        if m:
            out[key] = {"n": int(m.group(1)), "s": float(m.group(2)), "tps": float(m.group(3))}
    for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        m = last(key)
        if m:
            out[key] = int(m.group(1))
    m = last("accept")
    if m:
        out["accept_pct"] = float(m.group(1))
    m = last("stats")
    if m:
        g = m.groups()
        spec = {
            "type": g[0],
            "calls_begin": int(g[1]),
            "calls_draft": int(g[2]),
            "calls_accept": int(g[3]),
            "gen_drafts": int(g[4]),
            "acc_drafts": int(g[5]),
            "gen_tokens": int(g[6]),
            "acc_tokens": int(g[7]),
        }
        rest = g[8]  # the optional parts, in either order
        d = _RE["stats_dur"].search(rest)
        if d:
            spec["dur_ms"] = {"begin": float(d.group(1)), "draft": float(d.group(2)), "accept": float(d.group(3))}
        a = _RE["stats_acc"].search(rest)
        if a:
            spec["mean_acc_len"] = float(a.group(1))
            spec["acc_rate_pos"] = [float(x) for x in a.group(2).split(",") if x.strip()]
        out["spec"] = spec
    m = last("sampling")
    if m:
        out["sampling_ms"] = float(m.group(1))
    m = last("p_eval")
    if m:
        out["prompt_eval"] = {"ms": float(m.group(1)), "n": int(m.group(2))}
    m = last("eval")
    if m:
        ms, n = float(m.group(1)), int(m.group(2))
        out["eval"] = {"ms": ms, "n": n, "tps": n / (ms / 1e3) if ms > 0 else 0.0}
    m = last("load")
    if m:
        out["load_ms"] = float(m.group(1))
    return out
