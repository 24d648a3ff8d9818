"""pymtp.train.teacher: extraction of the trunk's rows and top-k into resumable shards, on the
tiny bundled model (fast), and the corpus' held-out splits (pymtp.train.teacher_text)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pymtp
from pymtp import default_model
from pymtp.train import teacher, teacher_text


@pytest.fixture(scope="module")
def tiny():
    m = pymtp.Model(default_model.TINY)
    yield m
    m.close()


def _docs(model):
    from pymtp.train import data

    train, held = data.split_files()
    docs = []
    for i, rel in enumerate(train[:5] + held[:2]):
        toks = model.tokenize(data.read_text(rel), add_special=False)[: 20 + 9 * i]
        docs.append({"id": f"code:{rel}", "domain": "code", "held_out": rel in held, "tokens": toks, "first": 1})
    return docs


def test_top_k_logprobs_are_the_largest_in_order():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 300)).astype(np.float32) * 3
    ids, logp = teacher.top_k_logprobs(logits, 8)
    full = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    want = np.argsort(-logits, axis=1)[:, :8]
    assert (ids == want).all()
    assert np.abs(logp.astype(np.float32) - np.take_along_axis(full, want, 1)).max() < 2e-3


def _top_k_before(logits, k):
    """The selection extraction used before the blocked one (argpartition over whole rows)."""
    idx = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    top = np.take_along_axis(logits, idx, axis=1)
    order = np.argsort(-top, axis=1, kind="stable")
    idx, top = np.take_along_axis(idx, order, axis=1), np.take_along_axis(top, order, axis=1)
    m = logits.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True, dtype=np.float64)).astype(np.float32)
    return idx.astype(np.uint16), (top - lse).astype(np.float16)


@pytest.mark.parametrize("shape,block", [((64, 49152), 64), ((40, 300), 10), ((40, 300), 7)])
def test_blocked_top_k_equals_the_whole_row_selection(shape, block):
    rng = np.random.default_rng(1)
    # a peaked distribution like a trunk's, plus rows whose top values tie (the same logit on
    # several ids, inside one block and across blocks)
    logits = (rng.standard_normal(shape) * 2 + rng.gumbel(size=shape) * 2).astype(np.float32)
    logits[::3, 5:9] = logits[::3].max(axis=1, keepdims=True)
    logits[1::3, [2, 40, 200]] = logits[1::3].max(axis=1, keepdims=True) - 0.5
    k = 32 if shape[1] > 1000 else 8
    ids, logp = teacher.top_k_logprobs(logits, k, block=block)
    want_ids, want_logp = _top_k_before(logits, k)
    assert ids.dtype == np.uint16 and logp.dtype == np.float16 and ids.shape == (shape[0], k)
    assert (logp == want_logp).all()  # the same log-probs, bit for bit
    vals = np.take_along_axis(logits, ids.astype(np.int64), 1)
    assert (vals == np.take_along_axis(logits, want_ids.astype(np.int64), 1)).all()
    assert (np.diff(vals, axis=1) <= 0).all()
    # the same ids where the values differ; tied values in ascending id order
    tie = np.zeros_like(vals, bool)
    tie[:, 1:] |= vals[:, 1:] == vals[:, :-1]
    tie[:, :-1] |= vals[:, 1:] == vals[:, :-1]
    assert tie.any() and (ids[~tie] == want_ids[~tie]).all()
    same = vals[:, 1:] == vals[:, :-1]
    assert (ids[:, 1:][same] > ids[:, :-1][same]).all()
    for r in range(shape[0]):  # ties cut at the k-th place: a largest value never left out
        assert (logits[r] > vals[r, -1]).sum() <= k - 1
    # the whole-row form (the tiny model's path) gives the same ids, ties included
    w_ids, w_logp = teacher.top_k_logprobs_whole_rows(logits, k)
    assert (w_logp == logp).all() and ((w_ids == ids) | tie).all()


def test_extraction_matches_one_decode_per_document_and_resumes(tiny, tmp_path):
    docs = _docs(tiny)
    out = tmp_path / "teacher"
    man = teacher.extract(tiny.path, docs[:3], out, top_k=16, shard_tokens=40, n_batch=128, n_seq=4)
    assert man["docs_done"] == 3 and len(man["shards"]) == 1
    man = teacher.extract(tiny.path, docs, out, top_k=16, shard_tokens=40, n_batch=128, n_seq=4)
    assert man["docs_done"] == len(docs) and len(man["shards"]) >= 3  # the 4 new ones, in new shards
    assert man["tokens"] == sum(len(d["tokens"]) for d in docs)
    assert json.loads((out / teacher.MANIFEST).read_text()) == man
    again = teacher.extract(tiny.path, docs, out, top_k=16, n_batch=256)
    assert again == man  # nothing left to do
    tr, he = teacher.load(out, False), teacher.load(out, True)
    assert len(tr.offsets) - 1 == 5 and len(he.offsets) - 1 == 2
    # the packed multi-sequence decodes give what one decode of each document gives
    with pymtp.TargetContext(tiny, n_ctx=512) as ctx:
        for i, d in enumerate([d for d in docs if not d["held_out"]]):
            ctx.seq_rm(0)
            ctx.decode(d["tokens"], 0)
            s, e = tr.offsets[i], tr.offsets[i + 1]
            assert (tr.tokens[s:e] == d["tokens"]).all()
            h = ctx.hidden()
            assert np.abs(tr.hidden[s:e].astype(np.float32) - h).max() <= 2e-3 * max(1.0, np.abs(h).max())
            ids, logp = teacher.top_k_logprobs(ctx.logits(), 16)
            assert (tr.topk_ids[s:e, 0] == ids[:, 0]).mean() >= 0.98
            assert np.abs(tr.topk_logp[s:e, 0].astype(np.float32) - logp[:, 0].astype(np.float32)).max() < 0.05


def test_another_teacher_is_refused(tiny, tmp_path):
    docs = _docs(tiny)[:1]
    teacher.extract(tiny.path, docs, tmp_path, top_k=16, n_batch=256)
    with pytest.raises(ValueError, match="another teacher or top_k"):
        teacher.extract(tiny.path, docs, tmp_path, top_k=8, n_batch=256)


def test_a_document_longer_than_a_decode_is_refused(tiny, tmp_path):
    d = {"id": "x", "domain": "code", "held_out": False, "tokens": [1] * 300, "first": 1}
    with pytest.raises(ValueError, match="a decode holds 256"):
        teacher.extract(tiny.path, [d], tmp_path, top_k=4, n_batch=256)


def test_human_documents_keep_sources_apart(tiny):
    docs = teacher_text.human_documents(tiny, code_tokens=4000, docs_tokens=4000, seed=0)
    assert {d["domain"] for d in docs} == {"code", "docs"}
    for dom in ("code", "docs"):
        src = lambda held, dom=dom: {
            d["id"].rsplit(":", 1)[0] for d in docs if d["domain"] == dom and d["held_out"] == held
        }
        assert src(True) and src(False) and not src(True) & src(False)
    held_only = teacher_text.human_documents(tiny, code_tokens=4000, docs_tokens=4000, seed=0, splits=(True,))
    assert held_only == [d for d in docs if d["held_out"]]
    assert all(len(d["tokens"]) <= teacher_text.WINDOW for d in docs)


def test_a_per_source_cap_spreads_held_out_windows_over_more_files(tiny):
    def files(docs):
        return [d["id"].rsplit(":", 1)[0] for d in docs if d["domain"] == "code"]

    kw = dict(code_tokens=200_000, docs_tokens=0, seed=0, splits=(True,))
    uncapped = files(teacher_text.human_documents(tiny, **kw))
    capped = teacher_text.human_documents(tiny, **kw, per_source=1)
    one = files(capped)
    assert len(one) == len(set(one))  # one window per file
    assert len(set(one)) > len(set(uncapped)) > 0  # the same budget reaches more files
    assert all(d["id"].endswith(":0") for d in capped)  # each file's first window
    two = files(teacher_text.human_documents(tiny, **kw, per_source=2))
    assert max(two.count(f) for f in set(two)) == 2


def test_generation_jobs_cap_held_out_text_and_keep_every_training_prompt(tiny, monkeypatch):
    from pymtp.train import corpus

    # the tiny model has no chat template: the instructions as plain text
    monkeypatch.setattr(corpus, "prompt_tokens", lambda model, kind, src: model.tokenize(src, add_special=False))
    full = teacher_text.generation_jobs(tiny, n_code=40, seed=0, held_per_domain=10_000)
    capped = teacher_text.generation_jobs(tiny, n_code=40, seed=0, held_per_domain=3)
    held = [j for j in capped if j["held_out"]]
    assert {j["domain"] for j in held} == {"chat", "prose", "codegen"}
    assert all(sum(j["domain"] == d for j in held) == 3 for d in ("chat", "prose", "codegen"))
    assert capped[: len(held)] == held  # held-out first
    assert len([j for j in full if j["held_out"]]) > len(held)
    train_ids = lambda jobs: sorted(j["id"] for j in jobs if not j["held_out"])
    assert train_ids(capped) == train_ids(full)


def test_trunk_text_resumes_and_cuts_a_partial_line(tmp_path):
    out = tmp_path / "t.jsonl"
    out.write_text(
        json.dumps({"id": "a", "domain": "chat", "held_out": False, "prompt": [1, 2], "completion": list(range(3, 20))})
        + "\n"
        + '{"id": "b", "dom'
    )
    assert [d["id"] for d in teacher_text.read_jsonl(out)] == ["a"]
    teacher_text._drop_partial_line(out)
    assert out.read_text().endswith("\n") and len(out.read_text().splitlines()) == 1
    docs = teacher_text.trunk_documents(out)
    assert docs[0]["first"] == 2 and docs[0]["tokens"] == list(range(1, 20))
