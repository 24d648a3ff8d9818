"""pymtp.train.evaluate_head's teacher-forced counts, on the tiny bundled model (fast)."""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from pymtp import default_model
from pymtp.train import data, evaluate_head


@pytest.fixture(scope="module")
def tiny():
    m = pymtp.Model(default_model.TINY)
    yield m
    m.close()


def _toks(model):
    _, held = data.split_files()
    return model.tokenize(data.read_text(held[0]), add_special=False)[:200]


def test_counts_follow_the_draft_vocabulary(tiny):
    toks = _toks(tiny)
    every = np.arange(tiny.n_vocab)
    tf = evaluate_head.TeacherForced(tiny, every, every[::2])
    tf.add("code", toks, 1)
    # the head's argmax and the trunk's, recomputed here from one decode of each context
    with pymtp.TargetContext(tiny, n_ctx=512) as t:
        t.decode(toks, 0)
        trunk = t.logits().argmax(1)
        h = t.hidden().copy()
        with pymtp.DraftContext(t) as d:
            d.decode(toks[1:], 0, h[0], h[1:-1])
            lg = d.logits().copy()
    head = lg.argmax(1)
    even = 2 * lg[:, ::2].argmax(1)
    p = np.arange(0, len(toks) - 1)
    tf.close()
    fig = tf.figures()["code"]
    assert fig["positions"] == len(p)
    assert fig["accept"] == fig["accept_full_vocab"] == round((head[p] == trunk[p + 1]).mean(), 4)
    assert fig["accept_corpus_vocab"] == round((even[p] == trunk[p + 1]).mean(), 4)
    assert 0.05 < fig["accept"]  # the tiny model's head drafts for real


def test_the_prompt_is_not_counted_and_the_old_interface_stays(tiny):
    toks = _toks(tiny)
    tf = evaluate_head.TeacherForced(tiny, np.arange(tiny.n_vocab))
    tf.add("chat", toks, 50)
    tf.close()
    assert tf.figures()["chat"]["positions"] == len(toks) - 1 - 48  # predictions of x(50) onwards
    agree, n = evaluate_head.teacher_forced(tiny, [(toks, 1)])
    assert n == len(toks) - 1 and 0 < agree < n


def test_a_shared_trunk_pass_counts_as_its_own(tiny):
    toks = _toks(tiny)
    every = np.arange(tiny.n_vocab)
    own, shared = evaluate_head.TeacherForced(tiny, every), evaluate_head.TeacherForced(tiny, every)
    own.add("code", toks, 1)
    shared.add("code", toks, 1, own.trunk(toks[: evaluate_head.WINDOW]))
    own.close()
    shared.close()
    assert own.figures() == shared.figures()


def test_held_out_windows_and_code_prompts_spread_over_files(tiny):
    docs = evaluate_head.held_out_documents(tiny, None, per_domain=0, human_tokens=20_000, per_file=2)
    code = [d["id"].rsplit(":", 1)[0] for d in docs if d["domain"] == "code"]
    assert code and max(code.count(f) for f in set(code)) <= 2
    assert all(d["held_out"] for d in docs)
    prompts = evaluate_head.prompts_for(tiny, None, 4, per_file=1)
    before = evaluate_head.prompts_for(tiny, None, 4)
    assert len(prompts) == len(before) == 4 and prompts != before  # 4 files, not one file's 4 windows
    assert all(len(p) == 64 for p in prompts)


def test_a_wider_trunk_text_set_keeps_the_usual_one_apart(tiny, tmp_path):
    """--per-domain-wide: the first per_domain held-out texts of a domain keep their domain
    (trunk_written is the same set as without it); the next ones count under DOMAIN_more, and
    trunk_written_wide adds them up."""
    import json

    toks = _toks(tiny)
    text = tmp_path / "trunk-text.jsonl"
    with open(text, "w") as f:
        for dom in ("chat", "codegen"):
            for i in range(6):
                held, temp = i != 2, 0.7 if i == 4 else 0.0  # a training text and a sampled one: never measured
                t = {"id": f"{dom}:{i}", "domain": dom, "held_out": held, "temperature": temp}
                f.write(json.dumps(t | {"prompt": toks[: 10 + i], "completion": toks[10 + i : 40 + 5 * i]}) + "\n")
    usual = evaluate_head.held_out_documents(tiny, text, per_domain=2, human_tokens=0)
    wide = evaluate_head.held_out_documents(tiny, text, per_domain=2, human_tokens=0, per_domain_wide=4)
    assert [d["id"] for d in usual] == ["chat:0", "chat:1", "codegen:0", "codegen:1"]
    assert [(d["id"], d["domain"]) for d in wide if d["id"] not in {u["id"] for u in usual}] == [
        ("chat:3", "chat_more"),
        ("chat:5", "chat_more"),
        ("codegen:3", "codegen_more"),
        ("codegen:5", "codegen_more"),
    ]

    tf = evaluate_head.TeacherForced(tiny, np.arange(tiny.n_vocab))
    for d in wide:
        tf.add(d["domain"], d["tokens"], d["first"])
    tf.close()
    fig = tf.figures()
    n = {k: fig[k]["positions"] for k in fig}
    assert n["trunk_written"] == n["chat"] + n["codegen"] == n["all"]  # the usual figures: the usual set
    assert n["trunk_written_wide"] == n["trunk_written"] + n["chat_more"] + n["codegen_more"]
    assert n["chat_wide"] == n["chat"] + n["chat_more"] and n["chat_more"] == (55 - 13 + 1) + (
        65 - 15 + 1
    )  # x(first) onwards, texts 3 and 5
    agree = round((fig["chat"]["accept"] * n["chat"] + fig["chat_more"]["accept"] * n["chat_more"]) / n["chat_wide"], 3)
    assert round(fig["chat_wide"]["accept"], 3) == agree
