"""pymtp.display: HTML of results and stats, and the matplotlib plot."""

from __future__ import annotations

import pytest

import pymtp
from pymtp.display import comparison_html, plot_stats, result_html, stats_dict, stats_html, stats_line
from pymtp.stats import SpecStats


def fake_stats() -> SpecStats:
    return SpecStats(
        n_steps=10,
        n_drafted=25,
        n_accepted=15,
        n_emitted=25,
        drafted_at=[10, 9, 6],
        accepted_at=[8, 5, 2],
        n_prompt=7,
        t_prefill=0.01,
        t_draft=0.02,
        t_verify=0.05,
        t_total=0.1,
    )


def test_stats_html_and_line():
    s = fake_stats()
    h = stats_html(s)
    assert h.startswith("<table") and h.endswith("</table>")
    for needle in ("60.0%", "1.50", "250.0", "80.0%", "draft position 3", "verify"):
        assert needle in h
    line = stats_line(s, "length")
    assert "25 tokens" in line and "250.0 tok/s" in line and "acceptance 60.0%" in line
    assert "mean accepted 1.50" in line and "finish: length" in line
    d = stats_dict(s)
    assert d["acceptance_by_position"] == [0.8, 5 / 9, 2 / 6] and d["t_python"] == pytest.approx(0.03)


def test_plain_stats():
    s = SpecStats(n_steps=4, n_emitted=4, t_total=0.01)
    assert "plain decoding" in stats_html(s) and "plain decoding" in stats_line(s)


def test_result_html_escapes(models):
    r = pymtp.generate("<b>&", models("glm4moe"), max_tokens=6)
    r.text = "<script>x</script> & more"
    h = result_html(r)
    assert "<pre" in h and "&lt;script&gt;" in h and "<script>" not in h and "<table" in h
    c = comparison_html({"plain": r, "spec": r})
    assert "1.00x" in c and c.count("<tr>") >= 8


def test_plot_stats():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = fake_stats()
    fig = plot_stats(s)
    acc, tim = fig.axes[:2]
    assert [round(p.get_height(), 3) for p in acc.patches] == [0.8, 0.556, 0.333]
    assert len(tim.patches) == 3
    plt.close(fig)
    fig, ax = plt.subplots()
    assert plot_stats(s, ax=ax) is fig and len(ax.patches) == 3
    plt.close(fig)
    fig, axes = plt.subplots(1, 2)
    assert plot_stats(SpecStats(), ax=axes) is fig
    plt.close(fig)


def test_plot_without_matplotlib(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pymtp-llm\[plot\]"):
        plot_stats(fake_stats())


def test_jupyter_renders_results_and_stats(models):
    """pymtp registers its HTML with IPython's formatter (the data classes know nothing of it)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    s = fake_stats()
    assert pymtp.display.register_jupyter(shell)
    assert shell.display_formatter.format(s)[0]["text/html"] == stats_html(s)
    r = pymtp.generate("x", models("glm4moe"), max_tokens=3)
    assert shell.display_formatter.format(r)[0]["text/html"] == result_html(r)


def test_no_jupyter_no_registration(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert pymtp.display.register_jupyter() is False
