"""Constrained decoding under speculation on one model: tokens/s and acceptance with a JSON
schema against the same prompts unconstrained, and the mask's own cost per row.

    python tools/measure_structured.py [--model default] [--repeats 3] [--n-draft 3]

Per prompt and repeat, interleaved: speculative unconstrained, speculative constrained (the
mask on the head's q and the target's p), plain constrained. Greedy, max_tokens each. tok/s is
generated tokens over generation time, prefill excluded; medians over prompts x repeats.
Mask cost: the time in the constraint's fill_mask / accept / rollback per verify row.
"""

from __future__ import annotations

import argparse
import statistics
import time

import pymtp
from pymtp.chat import chat_prompt, chat_prompt_tokens
from pymtp.grammar import Constraint

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30}},
            "required": ["city", "country"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "skills", "address"],
    "additionalProperties": False,
}
PROMPTS = [
    "Describe a software engineer as a JSON object.",
    "Describe a famous painter as a JSON object.",
    "Describe a chef from Italy as a JSON object.",
]


class Timed:
    """Wraps a matcher and counts the seconds spent in it."""

    def __init__(self, inner) -> None:
        self.inner, self.seconds, self.rows = inner, 0.0, 0

    def _t(self, name, *a):
        t0 = time.perf_counter()
        try:
            return getattr(self.inner, name)(*a)
        finally:
            self.seconds += time.perf_counter() - t0

    def fill_mask(self, out):
        self.rows += 1
        return self._t("fill_mask", out)

    def accept(self, token):
        return self._t("accept", token)

    def rollback(self, n):
        return self._t("rollback", n)

    def is_terminated(self):
        return self.inner.is_terminated()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-draft", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    out = {k: {"tps": [], "acc": [0, 0]} for k in ("spec", "spec+schema", "plain+schema")}
    mask_ms, mask_rows = 0.0, 0
    with pymtp.load(args.model, n_threads=args.threads) as s:
        c = Constraint(s.model, json_schema=SCHEMA)
        prompts = [chat_prompt_tokens(s, chat_prompt(s.model, [{"role": "user", "content": p}])) for p in PROMPTS]
        spec = {"n_draft": args.n_draft}
        for _ in range(args.repeats):
            for p in prompts:
                for kind in out:
                    m = Timed(c.matcher()) if "schema" in kind else None
                    t0 = time.perf_counter()
                    r = pymtp.generate(
                        p,
                        s,
                        max_tokens=args.max_tokens,
                        constraint=m,
                        speculative=spec if kind.startswith("spec") else False,
                    )
                    dt = time.perf_counter() - t0 - r.stats.t_prefill
                    out[kind]["tps"].append(len(r.tokens) / dt)
                    out[kind]["acc"][0] += r.stats.n_accepted
                    out[kind]["acc"][1] += r.stats.n_drafted
                    if m is not None and kind.startswith("spec"):
                        mask_ms += m.seconds * 1e3
                        mask_rows += m.rows
        print(
            f"model {s.model.path.name}, n_draft {args.n_draft}, {args.threads} threads, greedy, "
            f"{args.max_tokens} tokens, {len(prompts)} prompts x {args.repeats}"
        )
        base = statistics.median(out["spec"]["tps"])
        print(f"{'variant':<14} | {'tok/s':>7} | {'x spec':>6} | acceptance")
        for kind, v in out.items():
            tps = statistics.median(v["tps"])
            acc = v["acc"][0] / v["acc"][1] if v["acc"][1] else float("nan")
            print(f"{kind:<14} | {tps:7.1f} | {tps / base:6.2f} | {acc:.3f}")
        print(f"constraint cost (fill_mask + accept + rollback): {mask_ms / max(1, mask_rows):.3f} ms per masked row")


if __name__ == "__main__":
    main()
