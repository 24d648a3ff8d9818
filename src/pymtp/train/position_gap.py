"""Why a head's held-out agreement differs between training and evaluate_head (#30): the same
documents and positions measured four ways, binned by position in the window.

    python -m pymtp.train.position_gap --head H.gguf [--human-tokens 30000] [--torch-trunk]

For each held-out document set (``eval``: evaluate_head's held-out stdlib windows, seed 0;
``train``: the held-out human code of the CPU teacher shards, the documents the training
curve's ``code_held_agree`` crops come from) and each head, at every position p whose row
predicts x(p+2) (the figure evaluate_head counts: the head's argmax over the draft vocabulary
against the trunk's full-vocabulary argmax at p+1, from llama.cpp's F16 trunk):

* ``llama``: the head in llama.cpp (DraftContext over the whole window), evaluate_head's figure;
* ``torch``: the PyTorch head (multistep.chain_forward, step 1) over the whole window, on
  llama.cpp's hidden rows: equal to ``llama`` up to float rounding when the hand-off is right;
* ``torch_crop``: the same with the head's attention reset every ``--crop`` positions, the
  attention span training crops give (``--seq``);
* ``torch_trunk`` (with --torch-trunk): the PyTorch head on trunk_torch's rows (the GPU
  run's teacher) instead of llama.cpp's, target unchanged;
* ``shard`` (the ``train`` set): the PyTorch head over the whole window on the shards'
  float16 rows, target the shards' stored top-1.

Figures are agreement per bin of ``--bin`` positions, and over all positions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from . import teacher, teacher_text


def bins_of(n_pos: int, width: int) -> list[str]:
    return [f"{s}-{min(s + width, n_pos) - 1}" for s in range(0, n_pos, width)]


class Tally:
    """Agreements and positions per (set, head, measure) and position bin."""

    def __init__(self, width: int, n_pos: int = teacher_text.WINDOW):
        self.width, self.n_bins = width, -(-n_pos // width)
        self.c: dict[tuple[str, str, str], np.ndarray] = {}

    def add(self, key: tuple[str, str, str], agree: np.ndarray, pos: np.ndarray) -> None:
        c = self.c.setdefault(key, np.zeros((self.n_bins, 2), np.int64))
        b = np.minimum(pos // self.width, self.n_bins - 1)
        np.add.at(c[:, 0], b, agree.astype(np.int64))
        np.add.at(c[:, 1], b, 1)

    def figures(self) -> dict:
        names = bins_of(self.n_bins * self.width, self.width)
        out: dict = {}
        for (s, h, m), c in sorted(self.c.items()):
            row = {"all": round(c[:, 0].sum() / max(c[:, 1].sum(), 1), 4), "positions": int(c[:, 1].sum())}
            row["by_position"] = {n: [round(a / k, 4), int(k)] for n, (a, k) in zip(names, c.tolist()) if k}
            out.setdefault(s, {}).setdefault(h, {})[m] = row
        return out


def torch_head_argmax(head, W, vocab_ids, tokens: np.ndarray, hidden: np.ndarray, crop: int = 0) -> np.ndarray:
    """The head's argmax over the draft vocabulary (full ids) of every row p (predicting x(p+2))
    of one document, the head's attention over the whole document, or reset every `crop` rows
    (each run of rows from its own crop of tokens and hidden rows, as training crops are)."""
    import torch

    from .multistep import chain_forward

    L = len(tokens)
    spans = [(0, L)] if not crop else [(s, min(s + crop, L)) for s in range(0, L - 1, crop - 1)]
    Wsub = W[vocab_ids]
    out = np.empty(L - 1, np.int64)
    with torch.no_grad():
        for s, e in spans:
            if e - s < 2:
                continue
            t = torch.as_tensor(tokens[s:e], dtype=torch.long)[None]
            h = torch.as_tensor(hidden[s:e], dtype=torch.float32)[None]
            g = chain_forward(head, W, t, h, 1)[0][0]  # rows s..e-2
            out[s : e - 1] = vocab_ids[(g @ Wsub.T).argmax(-1)].numpy()
    return out


def train_held_code(work: Path) -> list[dict]:
    """The held-out human code of the CPU teacher shards: tokens, float16 rows, stored top-1."""
    d = teacher.load(work / "teacher", True, domains={"code"})
    out = []
    for i in range(len(d.offsets) - 1):
        s, e = int(d.offsets[i]), int(d.offsets[i + 1])
        out.append(
            {
                "domain": "code",
                "tokens": d.tokens[s:e].astype(np.int64).tolist(),
                "first": int(d.first[i]),
                "hidden16": d.hidden[s:e],
                "top1": d.topk_ids[s:e, 0].astype(np.int64),
            }
        )
    return out


def measure(
    heads: dict[str, Path],
    sets: dict[str, list[dict]],
    *,
    width: int = 64,
    crop: int = 256,
    draft_vocab: int = 4096,
    torch_trunk: bool = False,
    log=print,
) -> dict:
    import torch

    import pymtp
    from pymtp.draft_vocab import frequent_tokens

    from .evaluate_head import TeacherForced, assemble
    from .head import HeadConfig, read_head_gguf

    sessions = {n: pymtp.load(assemble(h), n_ctx=2048) for n, h in heads.items()}
    first = next(iter(sessions.values())).model
    vocab = frequent_tokens(first, draft_vocab).astype(np.int64)
    tf = {n: TeacherForced(s.model, vocab) for n, s in sessions.items()}
    lead = next(iter(tf.values()))
    cfg = HeadConfig()
    torch_heads = {n: read_head_gguf(h, cfg) for n, h in heads.items()}
    W = _output_matrix()
    vocab_t = torch.as_tensor(vocab)
    trunk = None
    if torch_trunk:
        from pymtp import trunk as trunk_mod

        from .trunk_torch import Trunk

        trunk = Trunk.from_gguf(trunk_mod.trunk_path())
    tally = Tally(width)
    hid_diff: list[float] = []
    for sname, docs in sets.items():
        log(f"{sname}: {len(docs)} documents, {sum(len(d['tokens'][: teacher_text.WINDOW]) for d in docs)} tokens")
        for d in docs:
            toks = np.asarray(d["tokens"][: teacher_text.WINDOW], np.int64)
            if len(toks) < 3:
                continue
            trunk_next, h = lead.trunk(toks.tolist())
            p = np.arange(max(0, d["first"] - 2), len(toks) - 1)
            target = trunk_next[p + 1]
            h_t = None
            if trunk is not None:
                with torch.no_grad():
                    h_t = trunk(torch.as_tensor(toks)[None])[0].numpy()
                hid_diff.append(float(np.abs(h_t - h).max() / np.abs(h).max()))
            for n in heads:
                t = tf[n]
                t.d.seq_rm(0)
                t.d.decode(toks[1:].tolist(), 0, h[0], h[1:-1])
                lg = t.d.logits()
                llama = vocab[lg[:, vocab].argmax(1)]
                tally.add((sname, n, "llama"), llama[p] == target, p)
                th = torch_heads[n]
                full = torch_head_argmax(th, W, vocab_t, toks, h)
                tally.add((sname, n, "torch"), full[p] == target, p)
                cropped = torch_head_argmax(th, W, vocab_t, toks, h, crop)
                tally.add((sname, n, "torch_crop"), cropped[p] == target, p)
                if h_t is not None:
                    tt = torch_head_argmax(th, W, vocab_t, toks, h_t)
                    tally.add((sname, n, "torch_trunk"), tt[p] == target, p)
                if "hidden16" in d:
                    sh = torch_head_argmax(th, W, vocab_t, toks, d["hidden16"][: len(toks)])
                    tally.add((sname, n, "shard"), sh[p] == d["top1"][p + 1], p)
            tally.add((sname, "trunk", "top1_in_draft_vocab"), np.isin(target, vocab), p)
    for t in tf.values():
        t.close()
    for s in sessions.values():
        s.close()
    out = tally.figures()
    if hid_diff:
        out["torch_trunk_rows"] = {"max_rel_diff_median": float(np.median(hid_diff)), "docs": len(hid_diff)}
    return out


def table(res: dict) -> str:
    """A markdown table of measure() figures: a row per (set, head, measure), a column per bin."""
    rows = [
        (s, h, m, f) for s, hs in res.items() if s != "torch_trunk_rows" for h, ms in hs.items() for m, f in ms.items()
    ]
    names = list(dict.fromkeys(b for *_, f in rows for b in f["by_position"]))
    lines = ["| set | head | measure | all (positions) | " + " | ".join(names) + " |"]
    lines.append("|" + " --- |" * (4 + len(names)))
    for s, h, m, f in rows:
        cells = [f"{f['by_position'][b][0]:.3f}" if b in f["by_position"] else "" for b in names]
        lines.append(f"| {s} | {h} | {m} | {f['all']:.3f} ({f['positions']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _output_matrix():
    """The trunk's tied output matrix as the F16 default model holds it, float32 (torch)."""
    import torch

    from pymtp import trunk as trunk_mod

    from .head import gguf_weights
    from .selfdistill import default_work

    cached = default_work() / "embed.npy"  # selfdistill's copy (float16)
    if cached.exists():
        return torch.from_numpy(np.load(cached).astype(np.float32))
    W = gguf_weights(trunk_mod.trunk_path(), {"token_embd.weight"})["token_embd.weight"]
    return torch.from_numpy(W.astype(np.float16).astype(np.float32))


def main(argv=None) -> None:
    from .evaluate_head import held_out_documents
    from .selfdistill import SHIPPED, default_work

    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train.position_gap",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--head", type=Path, action="append", default=[], help="a head beside the shipped one")
    ap.add_argument("--human-tokens", type=int, default=6_000, help="evaluate_head's held-out human-code budget")
    ap.add_argument("--windows-per-file", type=int, default=0, help="evaluate_head's --windows-per-file")
    ap.add_argument("--train-docs", type=int, default=60, help="held-out code documents of the shards (0: none)")
    ap.add_argument("--bin", type=int, default=64, help="positions per bin")
    ap.add_argument("--crop", type=int, default=256, help="the training crop (--seq) torch_crop resets at")
    ap.add_argument("--no-shipped", action="store_true", help="only the --head heads")
    ap.add_argument("--torch-trunk", action="store_true", help="also the head on trunk_torch's rows")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    heads = {} if args.no_shipped else {"shipped": SHIPPED}
    for h in args.head:
        heads[h.stem if h.stem not in heads else str(h)] = h
    import pymtp

    with pymtp.load(n_ctx=2048) as s:
        docs = held_out_documents(
            s.model, None, per_domain=0, human_tokens=args.human_tokens, per_file=args.windows_per_file
        )
    sets = {"eval": [d for d in docs if d["domain"] == "code"]}
    if args.train_docs:
        sets["train"] = train_held_code(args.work or default_work())[: args.train_docs]
    res = measure(heads, sets, width=args.bin, crop=args.crop, torch_trunk=args.torch_trunk)
    print(table(res))
    if "torch_trunk_rows" in res:
        print(f"trunk_torch rows against llama.cpp's: {res['torch_trunk_rows']}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
