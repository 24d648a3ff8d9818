"""The random-weight fixture models (pymtp_testing.fixtures) load and exercise every MTP path."""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from pymtp_testing.fixtures import (  # noqa: E402
    FAMILIES,
    FIXTURE_VERSION,
    PLAIN_FAMILIES,
    byte_vocab,
    fixture_path,
    make_fixture,
)

# family -> (llama.cpp architecture, MTP blocks)
EXPECTED = {
    "glm4moe": ("glm4moe", 1),
    "qwen35": ("qwen35", 1),
    "step35": ("step35", 3),
    "qwen35moe": ("qwen35moe", 1),
    "qwen3next": ("qwen3next", 1),
    "deepseek2": ("deepseek2", 1),
    "mimo2": ("mimo2", 3),
}

TEXT = "def f(x):\n    return x + 1\n\nThe quick brown fox jumps over the lazy dog. " * 3 + "héllo wörld ✓ 你好 🙂\ttab"


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def paths(fixture_dir):
    return {fam: fixture_path(fam, cache_dir=fixture_dir) for fam in FAMILIES + PLAIN_FAMILIES}


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    return request.param


@pytest.fixture(scope="module")
def model(family, paths):
    m = pymtp.Model(paths[family])
    yield m
    m.close()


def _target(m):
    return pymtp.TargetContext(m, n_ctx=512, n_batch=256, n_rs_seq=4 if m.supports_rollback else 0)


@pytest.fixture(scope="module")
def decoded(model):
    """Target logits / hidden rows for TEXT."""
    toks = model.tokenize(TEXT)
    with _target(model) as t:
        t.decode(toks, 0)
        return toks, t.logits().copy(), t.hidden().copy()


def test_families_covered():
    assert {"glm4moe", "qwen35", "step35"} <= set(FAMILIES)
    assert set(FAMILIES) <= set(EXPECTED)
    assert "glm4moe-nomtp" in PLAIN_FAMILIES


def test_loads(family, model):
    arch, n_mtp = EXPECTED[family]
    assert model.architecture == arch
    assert model.n_mtp_layers == n_mtp
    assert model.mtp_loaded
    assert model.n_embd == 64
    assert model.n_vocab == len(byte_vocab()[0])
    assert model.bos is not None and model.eos is not None


def test_round_trip(model):
    toks = model.tokenize(TEXT)
    assert toks[0] == model.bos
    assert len(toks) < len(TEXT.encode())  # some merges applied
    assert model.detokenize(toks) == TEXT
    assert model.detokenize_bytes(toks) == TEXT.encode()
    for text in ("", " ", "  x", "\n\n", "a" * 50, "\x00\x01\xff", "日本語のテキスト"):
        assert model.detokenize(model.tokenize(text, add_special=False)) == text


def test_target_decode(model, decoded):
    toks, logits, hidden = decoded
    assert logits.shape == (len(toks), model.n_vocab)
    assert hidden.shape == (len(toks), model.n_embd)
    assert np.isfinite(logits).all() and np.isfinite(hidden).all()
    # peaked but not degenerate: greedy tokens vary along the text
    assert logits.std(axis=1).mean() > 2.0
    assert len(set(logits.argmax(axis=1).tolist())) > 10


@pytest.mark.parametrize("fam,granted", [("qwen35", 4), ("qwen35moe", 4), ("qwen3next", 0)])
def test_recurrent_snapshots(paths, fam, granted):
    """Hybrid families get n_rs_seq snapshots where llama.cpp supports rollback (qwen3next does not)."""
    with pymtp.Model(paths[fam]) as m:
        assert m.is_recurrent and m.supports_rollback == bool(granted)
        with pymtp.TargetContext(m, n_ctx=256, n_rs_seq=4) as t:
            assert t.n_rs_seq == granted


def test_draft_decode_each_head(model, decoded):
    toks, _, hidden = decoded
    with _target(model) as t:
        t.decode(toks, 0)
        with pymtp.DraftContext(t) as d:
            for head in range(model.n_mtp_layers):
                if model.n_mtp_layers > 1:
                    d.set_head(head)
                d.seq_rm(0)
                # token p (p >= 1) pairs with the hidden row of p - 1
                d.decode(toks[1:], 0, hidden[0], hidden[1:-1])
                dl, dh = d.logits(), d.hidden()
                assert dl.shape == (len(toks) - 1, model.n_vocab)
                assert dh.shape[1] == model.n_embd and dh.shape[0] >= 1
                assert np.isfinite(dl).all() and np.isfinite(dh).all()


def test_agreement_between_bounds(model, decoded):
    """The MTP head agrees with the trunk's next greedy token sometimes, not always."""
    toks, logits, hidden = decoded
    with _target(model) as t:
        t.decode(toks, 0)
        with pymtp.DraftContext(t) as d:
            d.decode(toks[1:], 0, hidden[0], hidden[1:-1])
            rate = float((d.logits().argmax(axis=1) == logits[1:].argmax(axis=1)).mean())
    assert 0.05 < rate < 0.95, rate


def _agreement(path) -> float:
    with pymtp.Model(path) as m, _target(m) as t:
        toks = m.tokenize(TEXT)
        t.decode(toks, 0)
        logits, hidden = t.logits().copy(), t.hidden().copy()
        with pymtp.DraftContext(t) as d:
            d.decode(toks[1:], 0, hidden[0], hidden[1:-1])
            return float((d.logits().argmax(axis=1) == logits[1:].argmax(axis=1)).mean())


def test_noise_controls_agreement(tmp_path):
    low = _agreement(make_fixture("glm4moe", tmp_path / "low.gguf", noise=0.02))
    high = _agreement(make_fixture("glm4moe", tmp_path / "high.gguf", noise=1.0))
    assert low > 0.8 > 0.3 > high


def test_plain_model_cannot_draft(paths):
    with pymtp.Model(paths["glm4moe-nomtp"]) as m:
        assert m.architecture == "glm4moe"
        assert m.n_mtp_layers == 0 and not m.mtp_loaded
        with _target(m) as t:
            toks = m.tokenize("hello")
            t.decode(toks, 0)
            assert np.isfinite(t.logits()).all()
            with pytest.raises(pymtp.UnsupportedError, match="MTP"):
                pymtp.DraftContext(t)


def test_deterministic_and_seeded(tmp_path):
    a = make_fixture("qwen35", tmp_path / "a.gguf", seed=1).read_bytes()
    b = make_fixture("qwen35", tmp_path / "b.gguf", seed=1).read_bytes()
    c = make_fixture("qwen35", tmp_path / "c.gguf", seed=2).read_bytes()
    assert a == b and a != c


def test_fixture_path_cache(tmp_path):
    p = fixture_path("glm4moe", seed=5, cache_dir=tmp_path)
    assert p.is_file() and p.parent == tmp_path and f"v{FIXTURE_VERSION}" in p.name
    mtime = p.stat().st_mtime_ns
    assert fixture_path("glm4moe", seed=5, cache_dir=tmp_path) == p
    assert p.stat().st_mtime_ns == mtime
    q = fixture_path("glm4moe", seed=5, cache_dir=tmp_path, noise=0.1)
    assert q != p and q.is_file()
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([p.name, q.name])  # no temp files left


def test_fixture_path_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PYMTP_CACHE_DIR", str(tmp_path))
    assert fixture_path("step35").parent == tmp_path / "fixtures"


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown fixture family"):
        make_fixture("gpt-j", tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="unknown fixture family"):
        fixture_path("nope", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown fixture option"):
        make_fixture("glm4moe", tmp_path / "x.gguf", n_embed=32)
    assert not (tmp_path / "x.gguf").exists()


def test_byte_vocab():
    tokens, merges, types = byte_vocab()
    assert len(tokens) == len(types) == len(set(tokens))
    assert len(merges) >= 1 and all(len(m.split(" ")) == 2 for m in merges)
    assert types.count(3) == 2 and 250 < len(tokens) < 400
    with pytest.raises(ValueError):
        byte_vocab(merges=[("ab", "c")])
