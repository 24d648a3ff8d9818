"""Held-out curve figures of the shipped head and run6's step-200 checkpoint under the old
(stdlib-count) and the new (shipped ranking) draft vocabulary, on run6's fixed eval batches."""

import json
from pathlib import Path

import numpy as np
import torch

import pymtp
from pymtp import default_model
from pymtp.train import teacher
from pymtp.train.head import HeadConfig, read_head_gguf
from pymtp.train.multistep import DraftVocab
from pymtp.train.selfdistill import SHIPPED, Crops, held_figures

WORK = Path.home() / ".cache/pymtp/train/smollm2-135m"
STDLIB_COUNTS = "smollm2-135m-mtp-f16-3da73830e80d-a2-700c948a558398bc.npy"
FIGURES = ("held_agree1", "held_chain2", "held_chain3")

torch.set_num_threads(2)
cfg = HeadConfig()
W = torch.from_numpy(np.load(WORK / "embed.npy").astype(np.float32))
new = np.load(WORK / "vocab.npy")
counts = np.load(Path.home() / ".cache/pymtp/draft-vocab" / STDLIB_COUNTS)
old_top = np.argsort(-counts, kind="stable")[:4096]
with pymtp.Model(default_model.resolve(None)) as m:
    eog = [t for t in (m.eos, m.eot) if t is not None]
old = np.unique(np.concatenate([old_top, np.asarray(eog, np.int64)])).astype(np.int32)
print("new", len(new), "old", len(old), "overlap", np.isin(new, old).sum())

held = Crops(teacher.load(WORK / "teacher", True, n_shards=8), 256)
rng = np.random.default_rng(5)
eval_batches = [held.batch(rng, 8, "cpu") for _ in range(4)]
held_code = Crops(teacher.load(WORK / "teacher", True, domains={"code"}, n_shards=8), 256)
rng_code = np.random.default_rng(6)
code_batches = [held_code.batch(rng_code, 8, "cpu") for _ in range(4)]

run6 = read_head_gguf(WORK / "run6/run6-step200.gguf", cfg)
heads = (("shipped", read_head_gguf(SHIPPED, cfg)), ("run6-step200", run6))
out = {}
for vname, v in (("old", old), ("new", new)):
    dv = DraftVocab(v, cfg.n_vocab)
    for hname, h in heads:
        a = held_figures(h, W, dv, eval_batches, 3, "text")
        c = held_figures(h, W, dv, code_batches, 3, "text")
        row = {k: a[k] for k in FIGURES} | {"code_" + k: c[k] for k in FIGURES}
        out[f"{vname} vocab, {hname}"] = row
        print(vname, hname, row, flush=True)
Path("/tmp/t4/curve_vocab.json").write_text(json.dumps(out, indent=1))
