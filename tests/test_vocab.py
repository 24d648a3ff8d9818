"""pymtp.bench.vocab: a padded-vocabulary variant predicts what its source does."""

from __future__ import annotations

import gguf as gguf_pkg
import numpy as np
import pytest

import pymtp
from pymtp.bench import resolve_model
from pymtp.bench.vocab import TOKEN_TYPE_UNUSED, _pad_rows, make_padded
from pymtp.config import SpecConfig

N_VOCAB = 4096
PROMPTS = ("def f(x):\n    return", "The weather today", "import os\n")


@pytest.fixture(scope="module")
def padded(gguf, tmp_path_factory):
    src = gguf("glm4moe")
    return src, make_padded(src, tmp_path_factory.mktemp("vocab") / "padded.gguf", N_VOCAB)


def test_padded_file_has_the_vocabulary(padded):
    src, dst = padded
    n_old = len(gguf_pkg.GGUFReader(str(src)).fields["tokenizer.ggml.tokens"].data)
    r = gguf_pkg.GGUFReader(str(dst))
    assert len(r.fields["tokenizer.ggml.tokens"].data) == N_VOCAB
    types = r.fields["tokenizer.ggml.token_type"].contents()
    assert len(types) == N_VOCAB and set(types[n_old:]) == {TOKEN_TYPE_UNUSED}
    assert r.fields["glm4moe.vocab_size"].contents() == N_VOCAB
    assert r.fields["pymtp.vocab.source_n_vocab"].contents() == n_old
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert shapes["token_embd.weight"][1] == N_VOCAB and shapes["output.weight"][1] == N_VOCAB
    with pymtp.load(dst, n_ctx=256) as s:
        assert s.model.n_vocab == N_VOCAB


def test_padded_greedy_output_and_logits_equal_the_source(padded):
    src, dst = padded
    with pymtp.load(src, n_ctx=256) as a, pymtp.load(dst, n_ctx=256) as b:
        n_old = a.model.n_vocab
        for prompt in PROMPTS:
            for spec in (False, SpecConfig(n_draft=3, adaptive=False)):
                ga = pymtp.generate(prompt, a, max_tokens=24, ignore_eos=True, speculative=spec)
                gb = pymtp.generate(prompt, b, max_tokens=24, ignore_eos=True, speculative=spec)
                assert gb.tokens == ga.tokens, (prompt, spec)
                if spec:
                    assert gb.stats.n_accepted == ga.stats.n_accepted
            seq = a.model.tokenize(prompt) + ga.tokens
            rows = []
            for m in (a.model, b.model):
                with pymtp.TargetContext(m, n_ctx=len(seq) + 1, n_batch=len(seq)) as t:
                    t.decode(seq, 0)
                    rows.append(np.array(t.logits()))
            np.testing.assert_allclose(rows[1][:, :n_old], rows[0], rtol=0, atol=1e-4)
            assert (rows[1][:, n_old:].max(axis=1) < rows[1][:, :n_old].max(axis=1) - 5).all()


def test_calibrated_rows_are_negative_multiples_of_one_row():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    base = np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float32)
    out = _pad_rows(a, 5, base, seed=0)
    assert out.shape == (8, 4) and (out[:3] == a).all()
    s = -out[3:, 0] / base[0]
    assert ((s >= 3) & (s <= 5)).all() and len(set(s.tolist())) == 5
    np.testing.assert_allclose(out[3:], -s[:, None] * base[None, :], rtol=1e-6)
    assert not _pad_rows(a, 5, None, seed=0)[3:].any()


def test_bench_resolves_padded_models(tmp_path, monkeypatch, gguf):
    src = gguf("glm4moe")
    monkeypatch.setenv("PYMTP_CACHE_DIR", str(tmp_path))
    path = resolve_model(f"vocab:{N_VOCAB}:{src}")
    assert path.is_file() and f"v{N_VOCAB}" in path.name and path.parent == tmp_path / "vocab"
    r = gguf_pkg.GGUFReader(str(path))
    assert r.fields["glm4moe.vocab_size"].contents() == N_VOCAB
