"""pymtp.bench.deep: the deep/wide glm4moe variant predicts exactly what its source predicts."""

from __future__ import annotations

import math

import gguf as gguf_lib
import numpy as np
import pytest

import pymtp
from pymtp.bench.deep import deep_variant_path, main, make_deep

PROMPTS = ("def f(x):", "import os\nimport sys\n", "the quick brown fox")
TOKENS = "def f(x):\n    return x * 2 + 1  # the fox"
N_NEW = 32

# n_embd 64 -> 256: the width ratio 4 makes sqrt(d/D) = 1/2 exact, so the scaled norm
# weights and eps round exactly as the source's: the trunk is bitwise equal in practice.
WIDE, EXTRA = 256, 3
TOL_EXACT = 1e-4  # max abs logit difference, power-of-4 width ratio (measured <= ~2e-6)
TOL_ROUNDED = 2e-3  # ratio 2 (64 -> 128): sqrt(1/2) rounds; measured ~2e-4 on logits of scale ~20


@pytest.fixture(scope="module")
def src(gguf):
    return gguf("glm4moe")


@pytest.fixture(scope="module")
def deep(src, tmp_path_factory):
    return make_deep(src, tmp_path_factory.mktemp("deep") / "deep.gguf", n_embd=WIDE, n_extra_layers=EXTRA)


@pytest.fixture(scope="module")
def pair(src, deep):
    a, b = pymtp.load(src, n_ctx=512), pymtp.load(deep, n_ctx=512)
    yield a, b
    a.close()
    b.close()


def _fields(path):
    r = gguf_lib.GGUFReader(str(path))
    return r, {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


def _run(model, tokens):
    """Trunk logits and hidden rows of a prompt, then the MTP head's over the same rows."""
    t = pymtp.TargetContext(model, n_ctx=256)
    t.decode(tokens, 0)
    logits, hidden = t.logits().copy(), t.hidden().copy()
    d = pymtp.DraftContext(t)
    d.decode(tokens[1:], 1, hidden[0], np.ascontiguousarray(hidden[1:-1]))
    out = logits, hidden, d.logits().copy(), d.hidden().copy()
    d.close()
    t.close()
    return out


def test_metadata_and_tensors(src, deep):
    rs, fs = _fields(src)
    rd, fd = _fields(deep)
    k = lambda s: f"glm4moe.{s}"  # noqa: E731
    d = fs[k("embedding_length")]
    n_trunk = fs[k("block_count")] - 1
    assert fd[k("embedding_length")] == WIDE
    assert fd[k("block_count")] == fs[k("block_count")] + EXTRA
    assert fd[k("nextn_predict_layers")] == 1
    assert fd[k("leading_dense_block_count")] == n_trunk + EXTRA
    # head dim kept, heads and KV heads scaled with the GQA ratio kept
    assert fd[k("attention.key_length")] == fs[k("attention.key_length")]
    assert fd[k("attention.head_count")] == fs[k("attention.head_count")] * WIDE // d
    assert (
        fd[k("attention.head_count")] // fd[k("attention.head_count_kv")]
        == fs[k("attention.head_count")] // fs[k("attention.head_count_kv")]
    )
    assert fd[k("feed_forward_length")] == fs[k("feed_forward_length")] * WIDE // d
    assert fd[k("expert_feed_forward_length")] == fs[k("expert_feed_forward_length")] * WIDE // d
    assert math.isclose(
        fd[k("attention.layer_norm_rms_epsilon")], fs[k("attention.layer_norm_rms_epsilon")] * d / WIDE, rel_tol=1e-6
    )
    # every other key copied with its value (tokenizer arrays included)
    changed = {
        k(s)
        for s in (
            "embedding_length",
            "block_count",
            "leading_dense_block_count",
            "attention.head_count",
            "attention.head_count_kv",
            "feed_forward_length",
            "expert_feed_forward_length",
            "attention.layer_norm_rms_epsilon",
        )
    } | {"general.name"}
    for key, v in fs.items():
        if key not in changed:
            assert fd[key] == v, key
            assert [t for t in rd.fields[key].types] == [t for t in rs.fields[key].types], key
    assert len(fd["tokenizer.ggml.tokens"]) == len(fs["tokenizer.ggml.tokens"])

    td = {t.name: t for t in rd.tensors}
    nextn = n_trunk + EXTRA
    assert f"blk.{nextn}.nextn.eh_proj.weight" in td and f"blk.{n_trunk}.nextn.eh_proj.weight" not in td
    assert [int(x) for x in td[f"blk.{nextn}.nextn.eh_proj.weight"].shape] == [2 * WIDE, WIDE]
    assert [int(x) for x in td["token_embd.weight"].shape][0] == WIDE
    for i in range(n_trunk, n_trunk + EXTRA):  # the extra blocks add exactly zero
        for name in ("attn_output.weight", "ffn_down.weight"):
            assert not np.any(td[f"blk.{i}.{name}"].data)
        assert np.any(td[f"blk.{i}.attn_q.weight"].data)
    # a padded source tensor holds the original in its corner and zeros elsewhere
    ts = {t.name: t for t in rs.tensors}
    a, b = np.asarray(ts["blk.0.ffn_up.weight"].data), np.asarray(td["blk.0.ffn_up.weight"].data)
    assert np.array_equal(b[: a.shape[0], : a.shape[1]], a)
    assert not np.any(b[a.shape[0] :]) and not np.any(b[:, a.shape[1] :])


def test_trunk_and_mtp_logits_match(pair):
    a, b = pair
    toks = a.tokenize(TOKENS)
    assert toks == b.tokenize(TOKENS)
    la, ha, dla, dha = _run(a, toks)
    lb, hb, dlb, dhb = _run(b, toks)
    d = a.n_embd
    assert b.n_embd == WIDE and hb.shape == (len(toks), WIDE)
    np.testing.assert_allclose(lb, la, rtol=0, atol=TOL_EXACT)
    np.testing.assert_allclose(hb[:, :d], ha, rtol=0, atol=TOL_EXACT)
    assert not np.any(hb[:, d:])  # hidden rows: [h, 0]
    np.testing.assert_allclose(dlb, dla, rtol=0, atol=TOL_EXACT)
    np.testing.assert_allclose(dhb[:, :d], dha, rtol=0, atol=TOL_EXACT)
    assert not np.any(dhb[:, d:])


def test_greedy_and_acceptance_match(pair, same_greedy):
    a, b = pair
    for text in PROMPTS:
        plain_a = pymtp.generate(text, a, max_tokens=N_NEW, speculative=False, ignore_eos=True)
        plain_b = pymtp.generate(text, b, max_tokens=N_NEW, speculative=False, ignore_eos=True)
        assert plain_b.tokens == plain_a.tokens, text
        spec = pymtp.SpecConfig(n_draft=3)
        sa = pymtp.generate(text, a, max_tokens=N_NEW, speculative=spec, ignore_eos=True)
        sb = pymtp.generate(text, b, max_tokens=N_NEW, speculative=spec, ignore_eos=True)
        # plain vs speculative: other batches, other rounding (conftest.GreedyComparison);
        # source vs deep variant on the same path: equal (the trunk is bitwise equal in practice)
        same_greedy(a, plain_a.prompt_tokens, sa.tokens, plain_a.tokens)
        assert sb.tokens == sa.tokens, text
        assert (sb.stats.n_steps, sb.stats.n_drafted, sb.stats.n_accepted) == (
            sa.stats.n_steps,
            sa.stats.n_drafted,
            sa.stats.n_accepted,
        ), text
        assert sb.stats.accepted_at == sa.stats.accepted_at, text


def test_non_power_of_4_width_matches_within_rounding(src, tmp_path):
    """64 -> 128 (sqrt(1/2) rounds in the norm weights): still equal to float tolerance."""
    path = make_deep(src, tmp_path / "w128.gguf", n_embd=128, n_extra_layers=1)
    with pymtp.load(src, n_ctx=256) as a, pymtp.load(path, n_ctx=256) as b:
        toks = a.tokenize(TOKENS)
        la, ha, dla, _ = _run(a, toks)
        lb, hb, dlb, _ = _run(b, toks)
        np.testing.assert_allclose(lb, la, rtol=0, atol=TOL_ROUNDED)
        np.testing.assert_allclose(dlb, dla, rtol=0, atol=TOL_ROUNDED)
        assert not np.any(hb[:, a.n_embd :])


def test_deep_variant_path_caches(src, tmp_path):
    p1 = deep_variant_path(src, cache_dir=tmp_path, n_embd=128, n_extra_layers=1)
    assert p1.is_file() and p1.parent == tmp_path
    mtime = p1.stat().st_mtime_ns
    assert deep_variant_path(src, cache_dir=tmp_path, n_embd=128, n_extra_layers=1) == p1
    assert p1.stat().st_mtime_ns == mtime  # reused, not rewritten
    p2 = deep_variant_path(src, cache_dir=tmp_path, n_embd=128, n_extra_layers=2)
    assert p2 != p1 and p2.is_file()
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(TypeError):
        deep_variant_path(src, cache_dir=tmp_path, n_layers=3)


def test_cli(src, tmp_path, capsys):
    out = tmp_path / "cli.gguf"
    assert main(["--src", str(src), "--out", str(out), "--n-embd", "128", "--extra-layers", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(out) and out.is_file()
    assert "n_embd 128" in lines[1] and "4 trunk blocks" in lines[1]


def test_rejects_other_architectures_and_narrowing(gguf, src, tmp_path):
    with pytest.raises(ValueError, match="glm4moe"):
        make_deep(gguf("qwen35"), tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="smaller"):
        make_deep(src, tmp_path / "y.gguf", n_embd=32)


def test_the_tiny_models_bench_variant_predicts_the_same(tmp_path):
    """The benchmark shape of the tiny trained model: identical greedy output and acceptance."""
    from pymtp.bench.deep import BENCH_SHAPE, deep_variant_path

    path = deep_variant_path(cache_dir=tmp_path)
    small, deep = pymtp.load("tiny", n_ctx=512), pymtp.load(path, n_ctx=512)
    assert deep.n_embd == BENCH_SHAPE["n_embd"] and deep.n_layer == small.n_layer + BENCH_SHAPE["n_extra_layers"]
    for prompt in ("def fibonacci(n):\n", "import os\n\n\nclass Walker:\n"):
        for spec in (False, pymtp.SpecConfig(n_draft=3, adaptive=False)):
            a = pymtp.generate(prompt, small, max_tokens=24, speculative=spec, ignore_eos=True)
            b = pymtp.generate(prompt, deep, max_tokens=24, speculative=spec, ignore_eos=True)
            assert a.tokens == b.tokens
            assert a.stats.accepted_at == b.stats.accepted_at
    small.close()
    deep.close()
