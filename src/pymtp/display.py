"""Rich display of results and speculation stats in Jupyter (HTML tables, matplotlib plots).

The data classes (pymtp.stats) know nothing of this module: ``register_jupyter()``,
called when pymtp is imported inside IPython, tells IPython's HTML formatter how to
draw a GenerationResult and a SpecStats, so a result or its ``.stats`` renders as a
table by itself. ``plot_stats`` needs matplotlib (``pip install 'pymtp-llm[plot]'``).
"""

from __future__ import annotations

import html
import sys
from collections.abc import Mapping
from typing import Any

from .stats import GenerationResult, SpecStats

__all__ = [
    "comparison_html",
    "plot_policy",
    "plot_stats",
    "register_jupyter",
    "result_html",
    "stats_html",
    "stats_line",
    "stats_dict",
]

_TABLE = "border-collapse:collapse;font-family:monospace;font-size:12px;margin:4px 0"
_TD = "padding:2px 10px;text-align:left;border-bottom:1px solid #ddd"
_TDR = "padding:2px 10px;text-align:right;border-bottom:1px solid #ddd"
_BAR = "display:inline-block;height:10px;background:#4c72b0;vertical-align:middle"


def _secs(t: float) -> str:
    return f"{t * 1000:.1f} ms" if t < 1 else f"{t:.2f} s"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def stats_dict(stats: SpecStats) -> dict[str, Any]:
    """The stats as a flat dict of plain numbers (counters, derived rates and times)."""
    return {
        "n_prompt": stats.n_prompt,
        "n_emitted": stats.n_emitted,
        "n_steps": stats.n_steps,
        "n_drafted": stats.n_drafted,
        "n_accepted": stats.n_accepted,
        "acceptance_rate": stats.acceptance_rate,
        "acceptance_by_position": list(stats.acceptance_by_position),
        "mean_accepted": stats.mean_accepted,
        "tokens_per_step": stats.tokens_per_step,
        "tokens_per_second": stats.tokens_per_second,
        "cooldown_steps": stats.cooldown_steps,
        "t_prefill": stats.t_prefill,
        "t_draft": stats.t_draft,
        "t_verify": stats.t_verify,
        "t_python": stats.t_python,
        "t_total": stats.t_total,
    }


def stats_line(stats: SpecStats, finish_reason: str | None = None) -> str:
    """One line of text: tokens, tok/s, acceptance, mean accepted length (the CLI's stats line)."""
    parts = [
        f"{stats.n_emitted} tokens in {stats.t_total:.2f} s ({stats.tokens_per_second:.1f} tok/s)",
        f"prompt {stats.n_prompt} tokens, prefill {_secs(stats.t_prefill)}",
    ]
    if stats.n_drafted:
        by_pos = " ".join(f"{a:.2f}" for a in stats.acceptance_by_position)
        parts.append(f"acceptance {_pct(stats.acceptance_rate)} (by position {by_pos})")
        parts.append(f"mean accepted {stats.mean_accepted:.2f}/step, {stats.tokens_per_step:.2f} tokens/step")
    else:
        parts.append("no speculation (plain decoding)")
    if finish_reason:
        parts.append(f"finish: {finish_reason}")
    return " | ".join(parts)


def _rows_html(rows: list[tuple[str, str]]) -> str:
    return "".join(f"<tr><td style='{_TD}'>{html.escape(k)}</td><td style='{_TDR}'>{v}</td></tr>" for k, v in rows)


def stats_html(stats: SpecStats) -> str:
    """An HTML table of the stats: throughput, acceptance (with per-position bars), time split."""
    spec = stats.n_drafted > 0
    rows: list[tuple[str, str]] = [
        ("generated tokens", f"{stats.n_emitted}"),
        ("prompt tokens", f"{stats.n_prompt}"),
        ("tokens / second", f"{stats.tokens_per_second:.1f}"),
        ("steps (target decodes)", f"{stats.n_steps}"),
        ("tokens / step", f"{stats.tokens_per_step:.2f}"),
    ]
    if spec:
        rows += [
            ("drafted / accepted", f"{stats.n_drafted} / {stats.n_accepted}"),
            ("acceptance rate", _pct(stats.acceptance_rate)),
            ("mean accepted / step", f"{stats.mean_accepted:.2f}"),
        ]
        for i, (a, d) in enumerate(zip(stats.acceptance_by_position, stats.drafted_at)):
            bar = f"<span style='{_BAR};width:{max(1, round(80 * a))}px'></span>"
            rows.append((f"  accepted at draft position {i + 1}", f"{bar} {_pct(a)} <small>of {d}</small>"))
        if stats.cooldown_steps:
            rows.append(("cooldown steps", f"{stats.cooldown_steps}"))
    if stats.k_chosen:
        ks = stats.k_chosen
        pred = sum(stats.tps_predicted) / len(stats.tps_predicted)
        meas = sum(stats.tps_measured) / len(stats.tps_measured)
        rows.append(
            ("auto policy: draft length", f"mean {sum(ks) / len(ks):.2f}, plain steps {_pct(ks.count(0) / len(ks))}")
        )
        rows.append(("  predicted / measured tok/s", f"{pred:.1f} / {meas:.1f} (per step, mean)"))
    else:
        rows.append(("speculation", "off (plain decoding)"))
    total = stats.t_total or 1.0
    rows += [
        ("time: prefill", _secs(stats.t_prefill)),
        ("time: steps", _secs(stats.t_total)),
        ("  draft (MTP head)", f"{_secs(stats.t_draft)} ({_pct(stats.t_draft / total)})"),
        ("  verify (target)", f"{_secs(stats.t_verify)} ({_pct(stats.t_verify / total)})"),
        ("  python", f"{_secs(stats.t_python)} ({_pct(stats.t_python / total)})"),
    ]
    return (
        f"<table class='pymtp-stats' style='{_TABLE}'><thead><tr><th style='{_TD}' colspan='2'>"
        f"pymtp stats</th></tr></thead><tbody>{_rows_html(rows)}</tbody></table>"
    )


def result_html(result: GenerationResult) -> str:
    """HTML of a GenerationResult: the text in a <pre>, then the stats table."""
    text = html.escape(result.text)
    head = (
        f"<div style='font-family:monospace;font-size:12px;color:#555'>{len(result.tokens)} tokens, "
        f"finish: {html.escape(str(result.finish_reason))}</div>"
    )
    pre = (
        "<pre class='pymtp-text' style='white-space:pre-wrap;word-break:break-word;background:#f7f7f7;"
        f"padding:6px;border-radius:3px;margin:4px 0'>{text}</pre>"
    )
    return f"<div class='pymtp-result'>{pre}{head}{stats_html(result.stats)}</div>"


def comparison_html(results: Mapping[str, GenerationResult]) -> str:
    """An HTML table comparing generations side by side ({"plain": r1, "speculative": r2})."""
    names = list(results)
    if not names:
        return "<table></table>"
    base = results[names[0]].stats.tokens_per_second

    def row(label: str, fn) -> str:
        cells = "".join(f"<td style='{_TDR}'>{fn(results[n])}</td>" for n in names)
        return f"<tr><td style='{_TD}'>{html.escape(label)}</td>{cells}</tr>"

    head = "".join(f"<th style='{_TDR}'>{html.escape(n)}</th>" for n in names)
    body = "".join(
        [
            row("generated tokens", lambda r: f"{len(r.tokens)}"),
            row("tokens / second", lambda r: f"{r.stats.tokens_per_second:.1f}"),
            row(f"speed-up vs {names[0]}", lambda r: f"{r.stats.tokens_per_second / base:.2f}x" if base > 0 else "-"),
            row("steps", lambda r: f"{r.stats.n_steps}"),
            row("tokens / step", lambda r: f"{r.stats.tokens_per_step:.2f}"),
            row("acceptance rate", lambda r: _pct(r.stats.acceptance_rate) if r.stats.n_drafted else "-"),
            row("step time", lambda r: _secs(r.stats.t_total)),
            row("same text as first", lambda r: "yes" if r.text == results[names[0]].text else "no"),
        ]
    )
    return (
        f"<table class='pymtp-compare' style='{_TABLE}'><thead><tr><th style='{_TD}'></th>{head}</tr>"
        f"</thead><tbody>{body}</tbody></table>"
    )


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError(
            "plotting pymtp stats needs matplotlib, which is not installed: pip install 'pymtp-llm[plot]' "
            "(or pip install matplotlib)"
        ) from e
    return plt


def plot_stats(stats: SpecStats, ax=None):
    """Plot per-position acceptance (bars) and the step-time split draft / verify / python.

    ax: None (a new figure with two axes), a pair of matplotlib Axes, or one Axes
    (acceptance bars only; the time split goes in its title). Returns the Figure.
    In a notebook end the line with ';' (or assign the figure) to show it once."""
    if ax is None:
        plt = _pyplot()
        fig, (ax_acc, ax_time) = plt.subplots(1, 2, figsize=(10, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    elif isinstance(ax, (list, tuple)) or (hasattr(ax, "__len__") and hasattr(ax, "shape")):
        _pyplot()
        axes = list(getattr(ax, "flat", ax))
        if len(axes) != 2:
            raise ValueError(f"ax must be one Axes or a pair of Axes, got {len(axes)}")
        ax_acc, ax_time = axes
        fig = ax_acc.figure
    else:
        _pyplot()
        ax_acc, ax_time, fig = ax, None, ax.figure

    rates = list(stats.acceptance_by_position)
    if rates:
        pos = list(range(1, len(rates) + 1))
        bars = ax_acc.bar(pos, rates, color="#4c72b0")
        for b, r, d in zip(bars, rates, stats.drafted_at):
            ax_acc.annotate(
                f"{100 * r:.0f}%\n(n={d})",
                (b.get_x() + b.get_width() / 2, r),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
        ax_acc.set_xticks(pos)
    else:
        ax_acc.text(0.5, 0.5, "nothing drafted (plain decoding)", ha="center", va="center", transform=ax_acc.transAxes)
    ax_acc.set_ylim(0, 1.15)
    ax_acc.set_xlabel("draft position")
    ax_acc.set_ylabel("P(accepted | drafted)")
    title = (
        f"acceptance {100 * stats.acceptance_rate:.0f}%, mean accepted {stats.mean_accepted:.2f}/step, "
        f"{stats.tokens_per_second:.0f} tok/s"
    )

    parts = [
        ("draft", stats.t_draft, "#dd8452"),
        ("verify", stats.t_verify, "#4c72b0"),
        ("python", stats.t_python, "#55a868"),
    ]
    if ax_time is not None:
        left = 0.0
        total = stats.t_total or 1.0
        for name, t, color in parts:
            ax_time.barh(
                [0],
                [t * 1000],
                left=[left * 1000],
                color=color,
                label=f"{name} {t * 1000:.1f} ms ({100 * t / total:.0f}%)",
            )
            left += t
        ax_time.set_yticks([])
        ax_time.set_xlabel("step time (ms)")
        ax_time.set_title(f"time split ({stats.n_steps} steps; prefill {stats.t_prefill * 1000:.1f} ms)", fontsize=10)
        ax_time.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=1, fontsize=8, frameon=False)
        ax_acc.set_title(title, fontsize=10)
    else:
        split = ", ".join(f"{n} {t * 1000:.0f} ms" for n, t, _ in parts)
        ax_acc.set_title(f"{title}\n{split}", fontsize=9)
    try:
        fig.tight_layout()
    except Exception:  # pragma: no cover - layout is cosmetic
        pass
    return fig


def plot_policy(stats: SpecStats, ax=None):
    """The auto policy step by step: the draft length it chose (steps) and its predicted against
    the measured tokens per second of each step (right axis). ax: None (a new figure) or an Axes.
    Returns the Figure."""
    if ax is None:
        fig, ax = _pyplot().subplots(figsize=(10, 3.2))
    else:
        _pyplot()
        fig = ax.figure
    steps = list(range(1, len(stats.k_chosen) + 1))
    if not steps:
        ax.text(
            0.5,
            0.5,
            "no auto-policy steps (fixed policy or plain decoding)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return fig
    ax.step(steps, stats.k_chosen, where="mid", color="#4c72b0", label="draft length k")
    ax.set_xlabel("step")
    ax.set_ylabel("draft length k")
    ax.set_ylim(-0.2, max(stats.k_chosen) + 0.5)
    rate = ax.twinx()
    rate.plot(steps, stats.tps_predicted, color="#dd8452", lw=1, label="predicted tok/s")
    rate.plot(steps, stats.tps_measured, color="#55a868", lw=1, alpha=0.7, label="measured tok/s")
    rate.set_ylabel("tokens / second")
    rate.set_ylim(bottom=0)
    lines = ax.get_lines() + rate.get_lines()
    ax.legend(lines, [x.get_label() for x in lines], loc="upper right", fontsize=8, frameon=False)
    ax.set_title(
        f"auto policy: mean k {sum(stats.k_chosen) / len(steps):.2f}, {stats.tokens_per_second:.0f} tok/s", fontsize=10
    )
    return fig


def register_jupyter(shell=None) -> bool:
    """Teach IPython's HTML formatter to draw results and stats (the running shell, or
    the one given). False when there is no IPython shell; pymtp calls this on import."""
    if shell is None:
        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    html_formatter = shell.display_formatter.formatters["text/html"]
    html_formatter.for_type(GenerationResult, result_html)
    html_formatter.for_type(SpecStats, stats_html)
    return True
