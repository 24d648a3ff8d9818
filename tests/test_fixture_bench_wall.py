"""The bench's prefill-included figures (tps_wall, vs_plain_wall): its tok/s leaves the prefill
out, where a variant's own start work would hide (with a prompt run before, cached, an MTP start
re-decoded one position of it to hand the head its hidden row, a trunk decode plain decoding does
not make: MTPDrafter.keep_row_at now keeps that row). The whole call is what a caller of
generate() waits for, so the bench reports that ratio as well."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import TargetContext
from pymtp.bench.report import summarize
from pymtp.bench.runners import Variant, make_variants, run_pymtp
from pymtp.bench.sampling import from_temperature

PROMPT = "def f(x):\n    return x + 1\n\ndef g(y):\n"


def _run(variant: str, tps: float, tps_wall: float | None) -> dict:
    r = {
        "ok": True,
        "warmup": False,
        "kind": "code",
        "model": "m",
        "sampling": "T=0",
        "temperature": 0.0,
        "variant": variant,
        "engine": "pymtp",
        "n_draft": None if variant == "plain" else 3,
        "adaptive": False,
        "tps": tps,
        "n_tokens": 8,
        "t_total": 1.0,
        "t_draft": 0.1,
        "t_verify": 0.8,
        "t_python": 0.1,
        "n_steps": 4,
        "n_accepted": 4,
        "n_drafted": 8,
        "drafted_at": [4, 4],
        "accepted_at": [3, 1],
    }
    if tps_wall is not None:
        r["tps_wall"] = tps_wall
    return r


def test_the_summary_gives_the_prefill_included_ratio():
    variants = [Variant("plain", "pymtp", None), Variant("mtp-3", "pymtp", 3)]
    runs = [_run("plain", 30, 29), _run("plain", 34, 33), _run("mtp-3", 60, 50), _run("mtp-3", 62, 56)]
    rows = {(r["prompts"], r["variant"]): r for r in summarize(runs, variants)}
    m, p = rows[("all", "mtp-3")], rows[("all", "plain")]
    assert m["vs_plain"] == pytest.approx(61 / 32)
    assert m["tps_wall_median"] == pytest.approx(53) and p["vs_plain_wall"] == pytest.approx(1.0)
    assert m["vs_plain_wall"] == pytest.approx(53 / 31)
    # runs without the figure (older files, llama.cpp's tools) get no such row fields
    old = summarize([{k: v for k, v in r.items() if k != "tps_wall"} for r in runs], variants)
    assert all("vs_plain_wall" not in r for r in old)


def test_a_run_times_the_whole_call_and_a_cached_start_decodes_nothing(gguf, monkeypatch):
    decodes: list[int] = []
    decode = TargetContext.decode

    def counting(self, tokens, *a, **k):
        decodes.append(len(tokens))
        return decode(self, tokens, *a, **k)

    setting = from_temperature(0.0)
    plain, mtp = (v for v in make_variants([3], False) if v.name in ("plain", "mtp-3"))
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as s:
        for v in (plain, mtp, plain, mtp):  # the second of each kind finds its text cached
            r = run_pymtp(s, v, PROMPT, setting, 0, 8)
            assert r["tps_wall"] == pytest.approx(r["n_tokens"] / r["wall_s"]) and r["tps_wall"] < r["tps"]
        monkeypatch.setattr(TargetContext, "decode", counting)
        for v in (plain, mtp):  # plain and MTP alike: the prompt is all in the cache
            decodes.clear()
            s.speculator(None, None if v is plain else pymtp.SpecConfig(n_draft=3)).start(s.tokenize(PROMPT))
            assert decodes == []
