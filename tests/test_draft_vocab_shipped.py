"""The draft vocabulary's ranking: the default model's tokenizer ranks by the shipped list
(models/smollm2-135m-draft-vocab.npz), every other model by the standard-library counts; any N
works, end-of-generation tokens are always in the set."""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from pymtp import default_model, draft_vocab


@pytest.fixture(scope="module")
def default():
    m = pymtp.Model(default_model.default_model_path(), mtp=False)
    yield m
    m.close()


def _shipped_ids() -> np.ndarray:
    with np.load(draft_vocab.SHIPPED) as z:
        return z["ids"].astype(np.int64)


def _valid(model, ids: np.ndarray, n: int) -> None:
    assert ids.dtype == np.int32
    assert np.all(np.diff(ids) > 0)  # ascending, so unique
    assert ids.min() >= 0 and ids.max() < model.n_vocab
    eog = [t for t in (model.eos, model.eot) if t is not None]
    assert set(eog) <= set(ids.tolist())
    assert n <= len(ids) <= n + len(eog)


def test_the_shipped_list_is_small_and_well_formed(default):
    assert draft_vocab.SHIPPED.stat().st_size <= 64 * 1024
    ids = _shipped_ids()
    assert len(ids) == draft_vocab.SHIPPED_LEN
    assert np.unique(ids).size == ids.size and ids.min() >= 0 and ids.max() < default.n_vocab


@pytest.mark.parametrize("n", [64, 4096, draft_vocab.SHIPPED_LEN, 20_000])
def test_the_default_model_ranks_by_the_shipped_list(default, n):
    got = draft_vocab.frequent_tokens(default, n)
    _valid(default, got, n)
    ranking = draft_vocab.ranking(default)
    assert np.array_equal(np.sort(ranking), np.arange(default.n_vocab))  # every id once
    shipped = _shipped_ids()
    np.testing.assert_array_equal(ranking[: len(shipped)], shipped)
    expected = set(shipped[:n].tolist())
    if n > len(shipped):  # past the list: the stdlib counts' order, without repeats
        by_counts = np.argsort(-draft_vocab.token_counts(default), kind="stable")
        expected |= set(by_counts[~np.isin(by_counts, shipped)][: n - len(shipped)].tolist())
    assert expected <= set(got.tolist())
    # the shipped set is not the stdlib one (else shipping it would change nothing)
    stdlib = set(np.argsort(-draft_vocab.token_counts(default), kind="stable")[:n].tolist())
    if n < draft_vocab.SHIPPED_LEN:
        assert stdlib != set(shipped[:n].tolist())


def test_another_model_ranks_by_the_stdlib_counts(models):
    m = models("glm4moe").model
    assert draft_vocab.shipped_ranking(m) is None
    for n in (16, 100):
        got = draft_vocab.frequent_tokens(m, n)
        _valid(m, got, n)
        top = np.argsort(-draft_vocab.token_counts(m), kind="stable")[:n]
        assert set(top.tolist()) <= set(got.tolist())


def test_the_whole_vocabulary_past_n_vocab(default):
    np.testing.assert_array_equal(draft_vocab.frequent_tokens(default, default.n_vocab), np.arange(default.n_vocab))


def test_a_list_for_another_tokenizer_is_not_used(default, tmp_path, monkeypatch):
    path = tmp_path / "other.npz"
    np.savez_compressed(path, ids=np.arange(10, dtype=np.int32), vocab_hash=np.asarray("0" * 32), mix=np.asarray(1.0))
    monkeypatch.setattr(draft_vocab, "SHIPPED", path)
    assert draft_vocab.shipped_ranking(default) is None


def test_a_corrupt_list_is_an_error(default, tmp_path, monkeypatch):
    path = draft_vocab.write_shipped(default, np.asarray([1, 2, 2, 3]), mix=1.0, path=tmp_path / "bad.npz")
    monkeypatch.setattr(draft_vocab, "SHIPPED", path)
    with pytest.raises(ValueError, match="corrupt"):
        draft_vocab.frequent_tokens(default, 8)


def _no_token_reads(monkeypatch) -> None:
    def refuse(model):
        raise AssertionError("read the model's tokens")

    monkeypatch.setattr(draft_vocab, "vocabulary_hash", refuse)
    monkeypatch.setattr(draft_vocab, "probe_hash", refuse)


def test_the_shipped_list_names_the_default_tokenizer_cheaply(default):
    with np.load(draft_vocab.SHIPPED) as z:
        assert int(z["n_vocab"]) == default.n_vocab
        assert str(z["probe_hash"]) == draft_vocab.probe_hash(default)
        assert str(z["vocab_hash"]) == draft_vocab.vocabulary_hash(default)


def test_a_model_of_another_vocabulary_size_reads_none_of_its_tokens(models, monkeypatch):
    m = models("glm4moe").model
    with np.load(draft_vocab.SHIPPED) as z:
        assert int(z["n_vocab"]) != m.n_vocab
    _no_token_reads(monkeypatch)
    assert draft_vocab.shipped_ranking(m) is None


class _OtherTokens:
    """The default model's vocabulary size with other token bytes (another tokenizer)."""

    def __init__(self, model):
        self.n_vocab, self.path = model.n_vocab, model.path
        self._model = model

    def token_bytes(self, token: int, *, render_special: bool = False) -> bytes:
        return self._model.token_bytes(token, render_special=render_special) + b"#"


def test_another_tokenizer_of_the_same_size_is_ruled_out_by_the_probe(default, monkeypatch):
    other = _OtherTokens(default)
    assert draft_vocab.probe_hash(other) != draft_vocab.probe_hash(default)
    monkeypatch.setattr(draft_vocab, "vocabulary_hash", lambda model: pytest.fail("hashed every token"))
    assert draft_vocab.shipped_ranking(other) is None


def test_a_same_size_tokenizer_is_matched_by_its_full_hash(default, monkeypatch):
    # n_vocab and the probe agree; the whole vocabulary's hash still decides
    assert draft_vocab.shipped_ranking(default) is not None
    monkeypatch.setattr(draft_vocab, "vocabulary_hash", lambda model: "0" * 32)
    assert draft_vocab.shipped_ranking(default) is None


def test_a_list_without_the_cheap_fields_is_matched_by_the_full_hash(default, tmp_path, monkeypatch):
    path = tmp_path / "old.npz"
    ids = np.arange(5, 15, dtype=np.int32)
    np.savez_compressed(path, ids=ids, vocab_hash=np.asarray(draft_vocab.vocabulary_hash(default)), mix=np.asarray(1.0))
    monkeypatch.setattr(draft_vocab, "SHIPPED", path)
    np.testing.assert_array_equal(draft_vocab.shipped_ranking(default), ids)
