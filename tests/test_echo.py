"""pymtp.bench.echo: fixtures whose greedy text is known and whose head agrees a chosen fraction."""

from __future__ import annotations

import gguf as gguf_lib
import numpy as np
import pytest

import pymtp
from pymtp.bench.base import BenchError
from pymtp.bench.echo import SMALL_SHAPE, EchoMaps, EchoShape, echo_path, main, make_echo, parse_name, shape_for_params
from pymtp.bench.models import resolve_model
from pymtp_testing.fixtures import fixture_path

PROMPTS = ("def f(x):", "the quick brown fox", "import os\nimport sys\n")
N_TOK = 400
# Acceptance at draft length 1 over the 3 prompts (~700 steps at agree 0.7): the agreeing tokens
# are a random exact share of the cycle, so a step is accepted with probability `agree`, std
# sqrt(0.21 / 700) ~ 0.017; 0.06 is 3.5 of those.
TOL_K1 = 0.06
# Later positions (draft length 3, fewer steps reach them) and sampled acceptance: std ~0.025.
TOL_LATER = 0.09


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """agree -> (path, loaded session, maps) for agree 1.0 and 0.7, SMALL_SHAPE, F16."""
    d = tmp_path_factory.mktemp("echo")
    out = {}
    for a in (1.0, 0.7):
        path = make_echo(d / f"echo-{a}.gguf", a)
        out[a] = (path, pymtp.load(path, n_ctx=1024), EchoMaps.read(path))
    yield out
    for _, s, _ in out.values():
        s.close()


def _spec(k: int) -> pymtp.SpecConfig:
    return pymtp.SpecConfig(n_draft=k)


def test_metadata_tensors_and_cycle(echo):
    path, sess, maps = echo[0.7]
    s = SMALL_SHAPE
    r = gguf_lib.GGUFReader(str(path))
    assert len(r.fields["tokenizer.ggml.tokens"].data) == s.n_vocab == len(maps.next)
    assert sess.model.n_mtp_layers == 1
    # pi is one cycle through every hot token but the two control tokens; padding has none
    hot = np.arange(s.n_hot)
    on = maps.next >= 0
    assert not on[s.n_hot :].any() and on[: s.n_hot].all()
    assert maps.next[maps.next[hot]].min() >= 0  # the text never leaves the hot set
    seen, x = set(), int(maps.next[0])
    for _ in range(s.n_hot - 2):
        seen.add(x)
        x = int(maps.next[x])
    assert len(seen) == s.n_hot - 2 and x == int(maps.next[0])  # back where it started
    n = len(seen)
    assert abs(maps.cycle_agreement * (n + 2) - round(0.7 * n) - 2) < 1e-6  # an exact share (+ the controls)
    assert echo[1.0][2].cycle_agreement == 1.0
    t = {x.name: np.asarray(x.data) for x in r.tensors}
    last = s.n_layer
    for name in (
        "blk.0.attn_output.weight",
        "blk.0.ffn_down.weight",
        f"blk.{last}.ffn_down_exps.weight",
        f"blk.{last}.ffn_down_shexp.weight",
        f"blk.{last}.attn_output.weight",
    ):
        assert not t[name].any(), name  # every block adds exactly zero
    for name in ("blk.0.attn_q.weight", "blk.1.ffn_up.weight", f"blk.{last}.ffn_gate_exps.weight"):
        assert np.count_nonzero(t[name]) > 0.99 * t[name].size, name  # ... at the cost of real weights
    assert sum(x.n_elements for x in r.tensors) == s.n_params


def test_plain_greedy_follows_pi(echo):
    for a, (_, sess, maps) in echo.items():
        for text in PROMPTS:
            r = pymtp.generate(text, sess, max_tokens=N_TOK, speculative=False, ignore_eos=True)
            assert r.tokens == maps.greedy(r.prompt_tokens[-1], N_TOK), (a, text)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_speculative_equals_plain_and_the_prediction(echo, k):
    """Greedy speculation writes plain greedy's tokens (no tie allowance: the successor leads by
    ~1.7 logits) and its counters are those EchoMaps.simulate predicts."""
    for a, (_, sess, maps) in echo.items():
        for text in PROMPTS:
            r = pymtp.generate(text, sess, max_tokens=N_TOK, speculative=_spec(k), ignore_eos=True)
            sim = maps.simulate(r.prompt_tokens[-1], k, N_TOK)
            assert r.tokens == sim["tokens"] == maps.greedy(r.prompt_tokens[-1], N_TOK), (a, text)
            st = r.stats
            assert (st.n_steps, st.drafted_at, st.accepted_at) == (
                sim["n_steps"],
                sim["drafted_at"],
                sim["accepted_at"],
            ), (a, text)


def _pooled(sess, k: int, **kw) -> tuple[np.ndarray, np.ndarray]:
    drafted, accepted = np.zeros(k), np.zeros(k)
    for text in PROMPTS:
        st = pymtp.generate(text, sess, max_tokens=N_TOK, speculative=_spec(k), ignore_eos=True, **kw).stats
        drafted += st.drafted_at
        accepted += st.accepted_at
    return drafted, accepted


def test_acceptance_at_draft_length_1(echo):
    d, a = _pooled(echo[1.0][1], 1)
    assert a[0] == d[0] > 500
    d, a = _pooled(echo[0.7][1], 1)
    assert d[0] > 500 and abs(a[0] / d[0] - 0.7) <= TOL_K1, a[0] / d[0]


def test_later_positions_agree_about_as_often(echo):
    """Each draft position is accepted, given the one before, about `agree` of the time."""
    d, a = _pooled(echo[0.7][1], 3)
    conditional = [a[0] / d[0], a[1] / a[0], a[2] / a[1]]
    assert all(abs(c - 0.7) <= TOL_LATER for c in conditional), conditional


def test_sampling_is_peaked_not_one_hot_and_acceptance_stays_near_agree(echo):
    _, sess, maps = echo[0.7]
    t = pymtp.TargetContext(sess.model, n_ctx=256)
    toks = sess.tokenize(PROMPTS[0] + " return x")
    t.decode(toks, 0)
    logits = np.array(t.logits(), dtype=np.float64)[1:]
    t.close()
    for temp, want in ((0.7, 0.9), (1.0, 0.78)):
        p = np.exp((logits - logits.max(axis=1, keepdims=True)) / temp)
        p /= p.sum(axis=1, keepdims=True)
        assert np.argmax(p, axis=1).tolist() == maps.next[toks[1:]].tolist()
        assert abs(p.max(axis=1).mean() - want) < 0.01, temp
    d, a = _pooled(echo[1.0][1], 1, temperature=0.7, seed=3)
    assert a[0] / d[0] >= 0.97
    d, a = _pooled(sess, 1, temperature=0.7, seed=3)
    assert abs(a[0] / d[0] - 0.7) <= TOL_LATER, a[0] / d[0]


def test_quantized_q4_k_m_keeps_the_text_and_the_maps(tmp_path):
    """Q4_K_M (K-quant rows: a 512-wide shape) changes no prediction; the maps survive quantization."""
    shape = shape_for_params(2e7)
    path = make_echo(tmp_path / "q.gguf", 0.8, shape=shape, type="Q4_K_M")
    types = {t.name: t.tensor_type.name for t in gguf_lib.GGUFReader(str(path)).tensors}
    assert types["blk.0.ffn_up.weight"] == "Q4_K" and types["output.weight"] == "Q6_K"
    maps = EchoMaps.read(path)
    assert abs(maps.cycle_agreement - 0.8) < 0.01
    with pymtp.load(path, n_ctx=512) as sess:
        for text in PROMPTS[:2]:
            r = pymtp.generate(text, sess, max_tokens=200, speculative=_spec(2), ignore_eos=True)
            sim = maps.simulate(r.prompt_tokens[-1], 2, 200)
            assert r.tokens == sim["tokens"]
            assert r.stats.accepted_at == sim["accepted_at"]


def test_a_head_that_never_agrees(tmp_path):
    """agree 0 (a losing fixture): nothing is accepted, the text is still plain greedy's."""
    path = make_echo(tmp_path / "never.gguf", 0.0, type="F32")
    maps = EchoMaps.read(path)
    with pymtp.load(path, n_ctx=512) as sess:
        r = pymtp.generate(PROMPTS[0], sess, max_tokens=100, speculative=_spec(3), ignore_eos=True)
    assert r.tokens == maps.greedy(r.prompt_tokens[-1], 100)
    assert r.stats.n_drafted > 90 and r.stats.n_accepted == 0
    sim = maps.simulate(r.prompt_tokens[-1], 3, 100)
    assert (r.stats.drafted_at, r.stats.accepted_at) == (sim["drafted_at"], sim["accepted_at"]) == ([99, 98, 97], [])


def test_shape_for_params():
    s = shape_for_params(1.5e9)
    assert abs(s.n_params / 1.5e9 - 1) <= 0.05
    assert (s.n_embd, s.n_vocab, s.n_hot) == (2048, 32768, 2047)
    assert s.n_embd % 256 == s.n_ff % 256 == s.n_ff_exp % 256 == 0  # K-quant rows
    assert s.n_head * s.head_dim == s.n_embd and s.n_layer >= 20
    for p in (2e7, 1e8, 5e8, 3e9, 7e9, 3e10):
        assert abs(shape_for_params(p).n_params / p - 1) <= 0.05, p
    assert shape_for_params(1e8, n_vocab=4096).n_vocab == 4096


def test_bad_input(tmp_path):
    with pytest.raises(ValueError, match="agree"):
        make_echo(tmp_path / "x.gguf", 1.5)
    with pytest.raises(ValueError, match="320"):
        EchoShape(n_embd=256, n_layer=1, n_head=4, n_head_kv=1, head_dim=64, n_ff=512, n_vocab=512)
    with pytest.raises(ValueError, match="type"):
        make_echo(tmp_path / "x.gguf", 0.5, type="Q9_X")
    with pytest.raises(ValueError, match="peak"):
        make_echo(tmp_path / "x.gguf", 0.5, peak=0.2)
    with pytest.raises(ValueError, match="not an echo fixture"):
        EchoMaps.read(fixture_path("glm4moe", cache_dir=tmp_path))
    assert not list(tmp_path.glob("x.gguf"))


def test_names_and_the_bench(tmp_path, monkeypatch):
    assert parse_name("echo-100") == {"agree": 1.0}
    assert parse_name("echo-80-1.5b") == {"agree": 0.8, "params": 1.5e9}
    assert parse_name("echo-70-100m-q8_0") == {"agree": 0.7, "params": 1e8, "type": "Q8_0"}
    assert parse_name("echo-70-F16") == {"agree": 0.7, "type": "F16"}
    assert parse_name("echoes") is None and parse_name("echo-x") is None
    with pytest.raises(ValueError, match="percentage"):
        parse_name("echo-101")
    with pytest.raises(ValueError, match="weight type"):
        parse_name("echo-70-q9_x")
    monkeypatch.setenv("PYMTP_CACHE_DIR", str(tmp_path))
    path = resolve_model("echo-70-20m")
    assert path.parent == tmp_path / "echo" and path.name.startswith("echo-a70-20m-f16-")
    mtime = path.stat().st_mtime_ns
    assert resolve_model("echo-70-20m") == path and path.stat().st_mtime_ns == mtime  # cached
    assert EchoMaps.read(path).agree == pytest.approx(0.7)
    assert echo_path(0.7, params=2e7) == path
    for bad in ("echo-101", "echo-70-q9_x", "echo-seventy"):
        with pytest.raises(BenchError):
            resolve_model(bad)


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli.gguf"
    assert main(["--agree", "0.5", "--params", "2e7", "--out", str(out)]) == 0
    assert "head agrees on 0.50" in capsys.readouterr().out
    maps = EchoMaps.read(out)
    assert maps.agree == 0.5 and abs(maps.cycle_agreement - 0.5) < 0.01
