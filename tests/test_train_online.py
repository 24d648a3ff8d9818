"""pymtp.train.online and trunk_torch: the GPU training run's trunk (PyTorch) against
llama.cpp on the real default model, crops gathered on the device against the host's, and a
whole ``run`` (text, teacher rows, training, head) on the CPU at toy size."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pymtp  # noqa: E402
from pymtp import trunk  # noqa: E402
from pymtp.train import online, teacher  # noqa: E402
from pymtp.train.crops import Crops, DeviceCrops  # noqa: E402
from pymtp.train.head import HeadConfig, read_head_gguf  # noqa: E402
from pymtp.train.trunk_torch import Trunk, generate, teacher_rows  # noqa: E402

ROW_RTOL = 4e-3  # llama.cpp multiplies F16 activations; the PyTorch trunk float32 (measured ~1.5e-3)


@pytest.fixture(scope="module")
def torch_trunk():
    torch.set_num_threads(2)
    return Trunk.from_gguf(trunk.trunk_path())


@pytest.fixture(scope="module")
def default():
    m = pymtp.load(n_ctx=1024)
    yield m
    m.close()


def _text(model, n):
    from pymtp.train import data

    _, held = data.split_files()
    return model.tokenize(data.read_text(held[0]) or "", add_special=False)[:n]


def test_torch_trunk_rows_are_llama_cpps(torch_trunk, default):
    docs = [_text(default, 96), default.tokenize("The history of tea begins in", add_special=False)]
    order, hidden, ids, logp = teacher_rows(torch_trunk, docs, top_k=8, device="cpu", max_tokens=64)
    assert order == [1, 0] and hidden.shape == (sum(map(len, docs)), 576) and ids.shape == (hidden.shape[0], 8)
    at = 0
    for i in order:
        with pymtp.TargetContext(default, n_ctx=512) as t:
            t.decode(docs[i], 0)
            want_h, want_logits = t.hidden().copy(), t.logits().copy()
        got = hidden[at : at + len(docs[i])].float().numpy()
        rel = np.linalg.norm(got - want_h, axis=1) / np.linalg.norm(want_h, axis=1)
        assert rel.max() < ROW_RTOL
        top = ids[at : at + len(docs[i]), 0].numpy()
        assert np.mean(top == want_logits.argmax(1)) >= 0.95  # equal but at near-ties
        lse = np.log(np.exp(want_logits - want_logits.max(1, keepdims=True)).sum(1)) + want_logits.max(1)
        want_lp = want_logits[np.arange(len(top)), top] - lse
        assert np.abs(logp[at : at + len(docs[i]), 0].float().numpy() - want_lp).max() < 0.05
        at += len(docs[i])


def test_torch_trunk_writes_llama_cpps_greedy_text(torch_trunk, default):
    prompts = [
        default.tokenize(
            default.apply_chat_template([{"role": "user", "content": "What is a list?"}]), parse_special=True
        ),
        default.tokenize("def add(a, b):", add_special=False),
    ]
    got = generate(torch_trunk, prompts, [0.0, 0.0], max_tokens=16)
    # left padding and the shared cache change nothing: each prompt alone gives the same text
    assert got[1] == generate(torch_trunk, prompts[1:], [0.0], max_tokens=16)[0]
    for p, g in zip(prompts, got):
        want = pymtp.generate(p, default, max_tokens=16, speculative=False, temperature=0.0).tokens
        assert g == list(want)[: len(g)] and len(g) >= 8


def _docs(lens, device=None):
    rng = np.random.default_rng(0)
    n = sum(lens)
    d = teacher.Documents(
        tokens=rng.integers(0, 100, n).astype(np.int32),
        hidden=rng.normal(size=(n, 6)).astype(np.float16),
        topk_ids=rng.integers(0, 100, (n, 4)).astype(np.uint16),
        topk_logp=rng.normal(size=(n, 4)).astype(np.float16),
        offsets=np.concatenate([[0], np.cumsum(lens)]),
        first=np.ones(len(lens), np.int64),
        domain=np.asarray(["code", "chat"] * (len(lens) // 2) + ["chat"] * (len(lens) % 2)),
    )
    if device is not None:  # what online.device_documents keeps on the device
        d.tokens = torch.as_tensor(d.tokens.astype(np.int64), device=device)  # type: ignore[assignment]
        d.hidden = torch.as_tensor(d.hidden, device=device)  # type: ignore[assignment]
        d.topk_ids = torch.as_tensor(d.topk_ids.astype(np.int32), device=device)  # type: ignore[assignment]
        d.topk_logp = torch.as_tensor(d.topk_logp, device=device)  # type: ignore[assignment]
    return d


@pytest.mark.parametrize("packed", [False, True])
def test_device_crops_are_the_host_crops(packed):
    lens = [40, 25, 60, 100, 12]
    host, dev = Crops(_docs(lens), 32, {"code": 2.0}), DeviceCrops(_docs(lens, "cpu"), 32, {"code": 2.0})
    for seed in range(3):
        a = (host.packed if packed else host.batch)(np.random.default_rng(seed), 4, "cpu")
        b = (dev.packed if packed else dev.batch)(np.random.default_rng(seed), 4, "cpu")
        assert len(a) == len(b) == (6 if packed else 5)
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and torch.equal(x, y)


def test_a_toy_run_writes_text_teacher_rows_and_a_head(torch_trunk, default, tmp_path, monkeypatch):
    pack = tmp_path / "pack"
    pack.mkdir()
    chat = default.tokenize(
        default.apply_chat_template([{"role": "user", "content": "Write a long story about a dragon."}]),
        parse_special=True,
    )
    jobs = [
        {"id": "chat:a", "domain": "chat", "held_out": False, "prompt": chat, "temperature": 0.7},
        {"id": "code:b", "domain": "codegen", "held_out": False, "prompt": _text(default, 20), "temperature": 0.0},
    ]
    (pack / "jobs.json").write_text(json.dumps(jobs))
    docs = [_text(default, 60), _text(default, 120)[60:], _text(default, 40)]
    lens = [len(d) for d in docs]
    np.savez(
        pack / "docs.npz",
        tokens=np.concatenate(docs).astype(np.uint16),
        offsets=np.concatenate([[0], np.cumsum(lens)]),
        first=np.ones(3, np.int32),
        domain=np.asarray(["code", "code", "code"]),
        held_out=np.asarray([False, True, False]),
        doc_id=np.asarray(["a", "b", "c"]),
    )
    np.save(pack / "vocab.npy", np.arange(0, 3000, dtype=np.int32))
    # the module's trunk is already loaded: the run reads the same file
    monkeypatch.setattr(Trunk, "from_gguf", classmethod(lambda cls, path, device="cpu": torch_trunk))
    args = online.parser().parse_args(
        ["run", str(pack), "--trunk", "unused.gguf", "--out", str(tmp_path / "out"), "--samples", "2"]
        + ["--gen-tokens", "10", "--gen-batch", "4", "--steps", "2", "--batch", "2", "--seq", "32", "--pack"]
        + ["--eval-every", "1", "--eval-batches", "1", "--eval-code-batches", "1", "--threads", "2"]
    )
    rec = online.run(args, log=lambda *a: None)
    gen, ext = rec["generation"], rec["extraction"]
    assert gen["texts"] == 3 and 8 * 3 <= gen["new_tokens"] <= 10 * 3  # the sampled job twice, the greedy once
    assert ext["tokens"] == sum(lens) + gen["new_tokens"] + 2 * len(chat) + len(jobs[1]["prompt"])
    assert ext["tokens_by_domain"]["code-held"] == lens[1]
    head = tmp_path / "out" / "run" / "smollm2-135m-nextn.gguf"
    assert rec["train"]["steps"] == 2 and head.exists()
    assert json.loads(head.with_suffix(".train.json").read_text())["generation"] == gen
    read_head_gguf(head, HeadConfig())  # reads back
