"""pymtp.train.selfdistill's training stage on synthetic teacher shards (no llama.cpp needed):
a run stopped and resumed ends with the same head as one run straight through; the head, its
curve and record are written, and the head file reads back."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pymtp.train import selfdistill, teacher  # noqa: E402
from pymtp.train.head import HeadConfig, read_head_gguf  # noqa: E402


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A work folder as prepare() leaves it: embeddings, draft vocabulary, shards + manifest."""
    w = tmp_path_factory.mktemp("work")
    cfg = HeadConfig()
    rng = np.random.default_rng(0)
    np.save(w / "embed.npy", (rng.normal(size=(cfg.n_vocab, cfg.n_embd)) * 0.05).astype(np.float16))
    np.save(w / "vocab.npy", np.arange(0, 2000, dtype=np.int32))
    out = w / "teacher"
    out.mkdir()
    man = {
        "version": teacher.VERSION,
        "teacher": "synthetic",
        "top_k": 8,
        "shards": [],
        "docs_done": 0,
        "tokens": 0,
        "seconds": 0.0,
    }
    for held in (False, True):
        lens = [40, 25, 60]
        n = sum(lens)
        buf = {
            "tokens": [rng.integers(0, 2000, n).astype(np.int32)],
            "hidden": [rng.normal(size=(n, cfg.n_embd)).astype(np.float16)],
            "ids": [rng.integers(0, 3000, (n, 8)).astype(np.uint16)],
            "logp": [np.log(rng.dirichlet(np.ones(8), n)).astype(np.float16)],
        }
        buf["tokens"] = [buf["tokens"][0][a:b] for a, b in zip([0, 40, 65], [40, 65, 125])]
        buf["hidden"] = [buf["hidden"][0][a:b] for a, b in zip([0, 40, 65], [40, 65, 125])]
        buf["ids"] = [buf["ids"][0][a:b] for a, b in zip([0, 40, 65], [40, 65, 125])]
        buf["logp"] = [buf["logp"][0][a:b] for a, b in zip([0, 40, 65], [40, 65, 125])]
        # held out: human code and two trunk-written domains (the curve measures each group alone)
        domains = ("code", "chat", "codegen") if held else ("code",) * 3
        meta = [{"id": f"{held}:{i}", "domain": domains[i], "held_out": held, "first": 1} for i in range(3)]
        teacher._write_shard(out, man, buf, meta, 1.0)
    return w


ARGS = [
    "--skip-prepare",
    "--steps",
    "3",
    "--batch",
    "2",
    "--seq",
    "16",
    "--eval-every",
    "2",
    "--eval-batches",
    "1",
    "--ckpt-every",
    "1",
    "--threads",
    "2",
]


def _state(path):
    return {k: v.clone() for k, v in read_head_gguf(path, HeadConfig()).state_dict().items()}


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(work, capsys):
    selfdistill.main(["--work", str(work), "--run", "straight", *ARGS])
    selfdistill.main(["--work", str(work), "--run", "resumed", *ARGS, "--stop-at", "2"])
    assert (work / "resumed" / "ckpt.pt").exists() and not (work / "resumed" / selfdistill.HEAD_FILE).exists()
    selfdistill.main(["--work", str(work), "--run", "resumed", *ARGS])
    assert "resumed at step 2" in capsys.readouterr().out
    a, b = _state(work / "straight" / selfdistill.HEAD_FILE), _state(work / "resumed" / selfdistill.HEAD_FILE)
    assert all(torch.equal(a[k], b[k]) for k in a)
    shipped = _state(selfdistill.SHIPPED)
    assert any(not torch.equal(a[k], shipped[k]) for k in a if k != "ffn.exp_probs_b")  # it trained

    head = work / "straight" / selfdistill.HEAD_FILE
    rec = json.loads(head.with_suffix(".train.json").read_text())
    assert rec["train"]["steps"] == 3 and rec["train"]["tokens_seen"] == 3 * 2 * 16
    assert rec["manifest"]["tokens"] == 250
    curve = head.with_suffix(".loss.csv").read_text().splitlines()
    assert curve[0].startswith("step,seconds") and "held_chain3" in curve[0]
    assert head.stat().st_size < 25 * 1024 * 1024


def test_a_resumed_run_keeps_its_draft_vocabulary(work, capsys):
    """prepare() may rewrite vocab.npy while a run is stopped: the run goes on with its own."""
    selfdistill.main(["--work", str(work), "--run", "vocab-straight", *ARGS])
    selfdistill.main(["--work", str(work), "--run", "vocab-resumed", *ARGS, "--stop-at", "2"])
    before = np.load(work / "vocab.npy")
    try:
        np.save(work / "vocab.npy", np.arange(1000, 3000, dtype=np.int32))
        selfdistill.main(["--work", str(work), "--run", "vocab-resumed", *ARGS])
    finally:
        np.save(work / "vocab.npy", before)
    assert "keeping the run's (2000 ids)" in capsys.readouterr().out
    a = _state(work / "vocab-straight" / selfdistill.HEAD_FILE)
    b = _state(work / "vocab-resumed" / selfdistill.HEAD_FILE)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_exports_the_head_it_holds(work, capsys):
    selfdistill.main(["--work", str(work), "--run", "export-mid", *ARGS, "--stop-at", "2"])
    selfdistill.main(["--work", str(work), "--run", "export-mid", "--export-checkpoint"])
    out = work / "export-mid" / "export-mid-step2.gguf"
    assert f"wrote {out}" in capsys.readouterr().out
    ck = torch.load(work / "export-mid" / "ckpt.pt", weights_only=False)["head"]
    got = _state(out)
    # the head file is F16 (norms and the router stay F32): the checkpoint's weights, rounded
    assert all(torch.allclose(got[k], ck[k].float(), rtol=1e-3, atol=1e-3) for k in got)
    assert any(not torch.equal(got[k], _state(selfdistill.SHIPPED)[k]) for k in got if k != "ffn.exp_probs_b")
    # the run itself goes on from its checkpoint
    selfdistill.main(["--work", str(work), "--run", "export-mid", *ARGS])
    assert "resumed at step 2" in capsys.readouterr().out


def test_the_curve_measures_held_out_code_and_trunk_text_each_alone(work):
    args = selfdistill.parser().parse_args(
        ["--work", str(work), *ARGS, "--eval-code-batches", "1", "--eval-trunk-batches", "1"]
    )
    data = selfdistill.load_data(args, work, None)
    assert {str(x) for x in data.held.d.domain} == {"code", "chat", "codegen"}
    assert {str(x) for x in data.held_code.d.domain} == {"code"}
    assert {str(x) for x in data.held_trunk.d.domain} == {"chat", "codegen"}
    assert data.held_trunk.d.n_tokens == 25 + 60  # the held-out shard's second and third documents

    selfdistill.main(
        ["--work", str(work), "--run", "groups", *ARGS, "--eval-code-batches", "1", "--eval-trunk-batches", "1"]
    )
    head = work / "groups" / selfdistill.HEAD_FILE
    rows = list(csv.DictReader(head.with_suffix(".loss.csv").open()))
    held = [r for r in rows if r["held_agree1"]]
    assert [int(r["step"]) for r in held] == [0, 2, 3]
    for r in held:
        for prefix in ("code_", "trunk_"):
            assert 0.0 <= float(r[prefix + "held_agree1"]) <= 1.0 and r[prefix + "held_chain3"]
    # without the flags the curve has neither group
    assert selfdistill.load_data(selfdistill.parser().parse_args(["--work", str(work)]), work, None).held_trunk is None


def test_the_curve_batches_are_fixed_and_distinct(work):
    args = selfdistill.parser().parse_args(
        ["--work", str(work), *ARGS, "--eval-batches", "3", "--eval-trunk-batches", "2"]
    )
    data = selfdistill.load_data(args, work, None)
    sets, again = selfdistill.held_batches(data, args), selfdistill.held_batches(data, args)
    assert sorted(sets) == ["", "trunk_"] and len(sets[""]) == 3 and len(sets["trunk_"]) == 2
    for name in sets:
        assert all(torch.equal(x, y) for a, b in zip(sets[name], again[name]) for x, y in zip(a, b))  # seeded
        hidden = [b[1] for b in sets[name]]
        assert not torch.equal(hidden[0], hidden[1])  # one draw after another, not the same batch again


def test_a_hard_weight_changes_the_run_and_is_recorded(work):
    """--hard-weight adds the top-1 term: the same run with it ends with another head."""
    selfdistill.main(["--work", str(work), "--run", "hard-0", *ARGS])
    selfdistill.main(["--work", str(work), "--run", "hard-2", *ARGS, "--hard-weight", "2"])
    a, b = _state(work / "hard-0" / selfdistill.HEAD_FILE), _state(work / "hard-2" / selfdistill.HEAD_FILE)
    assert any(not torch.equal(a[k], b[k]) for k in a)
    rec = json.loads((work / "hard-2" / selfdistill.HEAD_FILE).with_suffix(".train.json").read_text())
    assert rec["args"]["hard_weight"] == 2.0
