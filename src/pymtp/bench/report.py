"""The bench's results as people read them: a summary row per model, temperature,
prompt set and variant, a table of those rows and a plot."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import log
from .runners import Variant


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def _sampling(r: dict[str, Any]) -> str:
    return r.get("sampling") or f"T={r['temperature']:g}"  # runs from before --sampling


def summarize(
    runs: list[dict[str, Any]], variants: list[Variant], step_costs: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One row per (model, sampling setting, prompt set, variant): medians and ratios; the
    rows over all prompts also get the variant's step costs (sampling and Python per step)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    settings_order: dict[str, int] = {}
    for r in runs:
        if r.get("ok") and not r.get("warmup"):
            settings_order.setdefault(_sampling(r), len(settings_order))
            for kind in (r["kind"], "all"):
                groups[(r["model"], _sampling(r), kind, r["variant"])].append(r)
    order = {v.name: i for i, v in enumerate(variants)}
    vmap = {v.name: v for v in variants}
    costs = {(c["model"], c["sampling"], c["variant"]): c for c in step_costs or ()}
    med = {key: _median([r["tps"] for r in rs]) for key, rs in groups.items()}
    # prefill included (pymtp's runs): the ratio of whole generate() calls
    med_wall = {
        key: _median([r["tps_wall"] for r in rs]) for key, rs in groups.items() if all("tps_wall" in r for r in rs)
    }
    rows = []
    for key in sorted(groups, key=lambda k: (k[0], settings_order[k[1]], k[2] != "all", k[2], order.get(k[3], 99))):
        model, samp, kind, name = key
        rs = groups[key]
        v = vmap.get(name)
        tps = [r["tps"] for r in rs]
        row: dict[str, Any] = {
            "model": model,
            "temperature": rs[0]["temperature"],
            "sampling": samp,
            "prompts": kind,
            "variant": name,
            "engine": rs[0]["engine"],
            "n_draft": rs[0]["n_draft"],
            "adaptive": rs[0]["adaptive"],
            "n_runs": len(rs),
            "tps_median": med[key],
            "tps_min": min(tps),
            "tps_max": max(tps),
            "n_tokens_median": _median([r["n_tokens"] for r in rs]),
        }
        plain = med.get((model, samp, kind, "plain"))
        row["vs_plain"] = row["tps_median"] / plain if plain else None
        if key in med_wall:
            row["tps_wall_median"] = med_wall[key]
            plain_wall = med_wall.get((model, samp, kind, "plain"))
            row["vs_plain_wall"] = med_wall[key] / plain_wall if plain_wall else None
        if v is not None and v.policy == "auto":
            # auto against the best fixed draft length of the same run (targets: >= 0.97 of both)
            fixed = {
                n: m
                for (mo, sa, ki, n), m in med.items()
                if (mo, sa, ki) == (model, samp, kind)
                and n in vmap
                and vmap[n].engine == "pymtp"
                and vmap[n].speculative
                and vmap[n].policy == "fixed"
            }
            if fixed:
                best = max(fixed, key=fixed.__getitem__)
                row["vs_best_fixed"], row["best_fixed"] = row["tps_median"] / fixed[best], best
        ref = None
        if v is not None and v.speculative:
            ref = f"llama-mtp-{v.n_draft}"
        elif v is not None:
            ref = "llama-plain"
        lm = med.get((model, samp, kind, ref)) if ref else None
        row["vs_llama"] = row["tps_median"] / lm if lm else None
        row["vs_llama_ref"] = ref if lm else None
        if v is not None and v.speculative:
            n_steps = sum(r.get("n_steps", 0) for r in rs)
            n_acc = sum(r.get("n_accepted", 0) for r in rs)
            n_drafted = sum(r.get("n_drafted", 0) for r in rs)
            row["mean_accepted"] = n_acc / n_steps if n_steps else 0.0
            row["tokens_per_step"] = 1 + row["mean_accepted"] if n_steps else 0.0
            row["acceptance_rate"] = n_acc / n_drafted if n_drafted else 0.0
            if v.engine == "pymtp":
                L = max((len(r["drafted_at"]) for r in rs), default=0)
                d = [sum(r["drafted_at"][i] for r in rs if i < len(r["drafted_at"])) for i in range(L)]
                a = [sum(r["accepted_at"][i] for r in rs if i < len(r["accepted_at"])) for i in range(L)]
                row["acceptance_by_position"] = [ai / di if di else 0.0 for ai, di in zip(a, d)]
                # llama.cpp's definition: accepted at position i per drafting step
                row["accepted_per_step_by_position"] = [ai / d[0] if d and d[0] else 0.0 for ai in a]
                tot = sum(r["t_total"] for r in rs)
                row["time_split"] = {
                    k: sum(r[f"t_{k}"] for r in rs) / tot if tot else 0.0 for k in ("draft", "verify", "python")
                }
            else:
                # llama.cpp prints, per position, accepted tokens per accept call
                w = [(r.get("acc_rate_pos") or [], r.get("n_steps", 0)) for r in rs]
                L = max((len(p) for p, _ in w), default=0)
                tot = sum(n for _, n in w)
                row["accepted_per_step_by_position"] = [
                    sum(p[i] * n for p, n in w if i < len(p)) / tot if tot else 0.0 for i in range(L)
                ]
        elif v is not None and v.engine == "pymtp":
            tot = sum(r["t_total"] for r in rs)
            row["time_split"] = {
                k: sum(r[f"t_{k}"] for r in rs) / tot if tot else 0.0 for k in ("draft", "verify", "python")
            }
        c = costs.get((model, samp, name)) if kind == "all" else None
        if c is not None:
            row["step_costs"] = {
                k: c[k]
                for k in (
                    "step_ms",
                    "sampling_ms_per_step",
                    "python_ms_per_step",
                    "sampling_python_fraction",
                    "sampler_calls_per_step",
                )
            }
        rows.append(row)
    return rows


def _fmt_ratio(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


def format_table(summary: list[dict[str, Any]], *, kinds: Sequence[str] = ("all",)) -> str:
    hdr = [
        "model",
        "sampling",
        "set",
        "variant",
        "tok/s",
        "min-max",
        "x plain",
        "x llama",
        "tok/step",
        "acc/pos",
        "draft/verify/py %",
        "step ms",
        "samp ms",
        "py ms",
        "samp+py %",
    ]
    lines = []
    for r in summary:
        if r["prompts"] not in kinds:
            continue
        accp = r.get("accepted_per_step_by_position")
        split = r.get("time_split")
        c = r.get("step_costs")
        lines.append(
            [
                r["model"][:34],
                r.get("sampling") or f"T={r['temperature']:g}",
                r["prompts"],
                r["variant"],
                f"{r['tps_median']:.1f}",
                f"{r['tps_min']:.0f}-{r['tps_max']:.0f}",
                _fmt_ratio(r.get("vs_plain")),
                _fmt_ratio(r.get("vs_llama")),
                f"{r['tokens_per_step']:.2f}" if r.get("tokens_per_step") else "-",
                " ".join(f"{x:.2f}" for x in accp) if accp else "-",
                "/".join(f"{100 * split[k]:.0f}" for k in ("draft", "verify", "python")) if split else "-",
                *(
                    (
                        f"{c['step_ms']:.2f}",
                        f"{c['sampling_ms_per_step']:.3f}",
                        f"{c['python_ms_per_step']:.3f}",
                        f"{100 * c['sampling_python_fraction']:.1f}",
                    )
                    if c
                    else ("-",) * 4
                ),
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h) for i, h in enumerate(hdr)]
    out = ["  ".join(h.ljust(w) for h, w in zip(hdr, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in lines]
    return "\n".join(out)


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Bars of median tok/s per variant (one panel per model x temperature) and acceptance
    per position. Returns None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("bench: matplotlib is missing (pip install 'pymtp-llm[plot]'): no plot")
        return None
    rows = [r for r in result["summary"] if r["prompts"] == "all"]
    panels = list(dict.fromkeys((r["model"], r.get("sampling") or f"T={r['temperature']:g}") for r in rows))
    if not panels:
        return None
    fig, axes = plt.subplots(2, len(panels), figsize=(max(6, 5 * len(panels)), 8), squeeze=False)
    for j, (m, t) in enumerate(panels):
        rs = [r for r in rows if r["model"] == m and (r.get("sampling") or f"T={r['temperature']:g}") == t]
        ax = axes[0][j]
        colors = [
            "tab:gray"
            if r["engine"] == "pymtp" and r["n_draft"] is None
            else "tab:blue"
            if r["engine"] == "pymtp"
            else "tab:olive"
            if r["n_draft"] is None
            else "tab:orange"
            for r in rs
        ]
        ax.bar(
            range(len(rs)),
            [r["tps_median"] for r in rs],
            color=colors,
            yerr=[[r["tps_median"] - r["tps_min"] for r in rs], [r["tps_max"] - r["tps_median"] for r in rs]],
            capsize=2,
        )
        ax.set_xticks(range(len(rs)), [r["variant"] for r in rs], rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("tokens/s (median)")
        ax.set_title(f"{m[:40]}\n{t}", fontsize=9)
        ax2 = axes[1][j]
        for r in rs:
            acc = r.get("accepted_per_step_by_position")
            if acc:
                ax2.plot(
                    range(1, len(acc) + 1),
                    acc,
                    marker="o",
                    ls="-" if r["engine"] == "pymtp" else "--",
                    label=r["variant"],
                )
        ax2.set_xlabel("draft position")
        ax2.set_ylabel("accepted per drafting step")
        ax2.set_ylim(0, 1.05)
        ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
