"""pymtp.train.probe on synthetic teacher shards: arms start from the same head and see the
same batches (equal held-out figures at step 0, equal first-step losses up to bfloat16's
rounding), and a bf16 step trains; selfdistill's --bf16 run resumes like a float32 one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from test_train_selfdistill import ARGS, work  # noqa: E402,F401  # the synthetic work folder

from pymtp.train import probe, selfdistill  # noqa: E402
from pymtp.train.head import HeadConfig, read_head_gguf  # noqa: E402


def test_an_arm_is_a_rate_a_precision_and_a_target_temperature():
    assert probe.parse_arm("3e-4") == {"name": "3e-4", "lr": 3e-4, "bf16": False, "temp": 1.0}
    assert probe.parse_arm("1e-3:bf16")["bf16"] is True
    assert probe.parse_arm("1e-3:bf16:t0.5") | {"name": ""} == {"name": "", "lr": 1e-3, "bf16": True, "temp": 0.5}
    for bad in ("1e-3:fp8", "1e-3:t0", "1e-3:t-1"):
        with pytest.raises(ValueError, match="tTEMP"):
            probe.parse_arm(bad)


def test_arms_share_the_start_and_the_batches(work, tmp_path):  # noqa: F811
    out = tmp_path / "probe.json"
    probe.main(
        ["--work", str(work), "--arm", "1e-3", "--arm", "1e-3:bf16", "--arm", "1e-4", "--steps", "2",
         "--batch", "2", "--seq", "16", "--eval-every", "2", "--eval-batches", "1", "--threads", "2",
         "--json", str(out)]
    )  # fmt: skip
    res = json.loads(out.read_text())
    fp32, bf16, slow = res["arms"]
    assert fp32["curve"][0] == bf16["curve"][0] == slow["curve"][0]
    # the same first batch and weights: fp32 arms agree exactly, bf16 within its rounding
    assert fp32["train_loss"][0] == slow["train_loss"][0]
    assert bf16["train_loss"][0] == pytest.approx(fp32["train_loss"][0], rel=0.03)
    assert bf16["train_loss"][0] != fp32["train_loss"][0]  # autocast did run in bf16
    assert [r["step"] for r in fp32["curve"]] == [0, 2]
    assert fp32["curve"][1] != fp32["curve"][0]  # it trained


def _state(path):
    return {k: v.clone() for k, v in read_head_gguf(path, HeadConfig()).state_dict().items()}


def test_a_bf16_run_resumes_where_it_stopped(work, capsys):  # noqa: F811
    selfdistill.main(["--work", str(work), "--run", "bf16-straight", *ARGS, "--bf16"])
    selfdistill.main(["--work", str(work), "--run", "bf16-resumed", *ARGS, "--bf16", "--stop-at", "2"])
    selfdistill.main(["--work", str(work), "--run", "bf16-resumed", *ARGS, "--bf16"])
    assert "resumed at step 2" in capsys.readouterr().out
    a = _state(work / "bf16-straight" / selfdistill.HEAD_FILE)
    b = _state(work / "bf16-resumed" / selfdistill.HEAD_FILE)
    assert all(torch.equal(a[k], b[k]) for k in a)
    fp32 = work / "straight" / selfdistill.HEAD_FILE
    if not fp32.exists():
        selfdistill.main(["--work", str(work), "--run", "straight", *ARGS])
    c = _state(fp32)
    assert any(not torch.equal(a[k], c[k]) for k in a if k != "ffn.exp_probs_b")  # bf16 steps differ
    rec = json.loads((work / "bf16-straight" / selfdistill.HEAD_FILE).with_suffix(".train.json").read_text())
    assert rec["args"]["bf16"] is True
