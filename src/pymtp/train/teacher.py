"""Teacher extraction: the trunk's hidden rows and top-k next-token distributions, in shards.

The expensive part of distillation, the trunk, runs once: llama.cpp (through pymtp) prefills
each document and this module keeps, for every position q,

* ``hidden[q]``: the row h(q) the MTP head consumes (output-normed, float16);
* ``topk_ids[q]`` / ``topk_logp[q]``: the trunk's k most likely next tokens x(q+1) and their
  log-probabilities under the full-vocabulary softmax (uint16 ids, float16 log-probs).

Short documents are packed several to a decode (one sequence id each), so a prefill carries
up to ``n_batch`` rows. Shards hold whole documents (``shard-NNNNN.npz``) and a manifest
(``manifest.json``) lists the finished shards and the documents they hold, so an interrupted
extraction goes on from the next document. The manifest also records the teacher file's
identity; a different teacher starts a new extraction.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
VERSION = 1


TOPK_BLOCK = 64  # columns per block in top_k_logprobs' first pass


def top_k_logprobs(logits: np.ndarray, k: int, block: int = TOPK_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """(ids uint16, log-probs float16) of each row's k largest logits, most likely first (ties:
    the lower id first).

    Selecting over the whole row (argpartition of 49,152 logits per position) took a fifth of
    extraction's time. Instead: each row's blocks of `block` columns give their maxima (one
    vectorised pass); the k-th largest block maximum t is a lower bound of the row's k-th largest
    logit (k blocks hold a value >= t), so the top k lie in the blocks whose maximum is >= t,
    a few dozen of them, and only those are sorted."""
    n, V = logits.shape
    nb = V // block
    if V % block or nb < k:  # small vocabularies (tests' tiny model): the plain selection
        return top_k_logprobs_whole_rows(logits, k)
    blocks = logits.reshape(n, nb, block)
    bmax = blocks.max(axis=2)
    thr = np.partition(bmax, nb - k, axis=1)[:, nb - k]
    br, bb = np.nonzero(bmax >= thr[:, None])  # row-major: rows ascending
    vals = blocks[br, bb]  # (candidate blocks, block)
    keep = vals >= thr[br][:, None]
    rows = np.broadcast_to(br[:, None], vals.shape)[keep]
    cols = (bb[:, None] * block + np.arange(block))[keep]
    vals = vals[keep]
    order = np.lexsort((cols, -vals, rows))  # by row, then value descending, then id
    cols, vals = cols[order], vals[order]
    take = np.searchsorted(rows[order], np.arange(n))[:, None] + np.arange(k)
    idx, top = cols[take], vals[take]
    return idx.astype(np.uint16), _log_probs(logits, top)


def top_k_logprobs_whole_rows(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """top_k_logprobs by a selection over whole rows (the form extraction used before)."""
    idx = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    top = np.take_along_axis(logits, idx, axis=1)
    order = np.lexsort((idx, -top), axis=1)
    idx, top = np.take_along_axis(idx, order, axis=1), np.take_along_axis(top, order, axis=1)
    return idx.astype(np.uint16), _log_probs(logits, top)


def _log_probs(logits: np.ndarray, top: np.ndarray) -> np.ndarray:
    """top's log-probabilities (float16) under each row's full softmax; top[:, 0] is the row's max."""
    m = top[:, :1]
    lse = m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True, dtype=np.float64)).astype(np.float32)
    return (top - lse).astype(np.float16)


def _teacher_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _packs(docs: list[dict], n_batch: int) -> list[list[int]]:
    """Consecutive documents grouped so that each group's tokens fit one decode of n_batch rows."""
    out: list[list[int]] = []
    cur: list[int] = []
    n = 0
    for i, d in enumerate(docs):
        L = len(d["tokens"])
        if L > n_batch:
            raise ValueError(f"document {d['id']!r} has {L} tokens; a decode holds {n_batch}")
        if cur and n + L > n_batch:
            out.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += L
    if cur:
        out.append(cur)
    return out


def extract(
    teacher: Path,
    docs: list[dict],
    out_dir: Path,
    *,
    top_k: int = 32,
    shard_tokens: int = 50_000,
    n_batch: int = 512,
    n_seq: int = 8,
    n_threads: int | None = None,
    select=top_k_logprobs,
    log=print,
) -> dict:
    """Extract the documents not yet in out_dir's shards (by id) into new shards; returns the
    manifest. A rerun with more documents (more trunk text, say) extracts only those."""
    import pymtp

    out_dir.mkdir(parents=True, exist_ok=True)
    man_path = out_dir / MANIFEST
    man = json.loads(man_path.read_text()) if man_path.exists() else None
    if man and (
        man.get("teacher") != _teacher_key(teacher) or man.get("top_k") != top_k or man.get("version") != VERSION
    ):
        raise ValueError(f"{out_dir} holds an extraction by another teacher or top_k; use another folder")
    man = man or {
        "version": VERSION,
        "teacher": _teacher_key(teacher),
        "top_k": top_k,
        "shards": [],
        "docs_done": 0,
        "tokens": 0,
        "seconds": 0.0,
    }
    done: set[str] = set()
    for sh in man["shards"]:
        done.update(str(i) for i in np.load(out_dir / sh["file"])["doc_id"])
    todo = [d for d in docs if d["id"] not in done]
    if not todo:
        return man
    log(f"teacher: {man['docs_done']} documents extracted ({man['tokens']} tokens), {len(todo)} to go")
    model = pymtp.Model(teacher)
    ctx = pymtp.TargetContext(model, n_ctx=n_batch * n_seq, n_batch=n_batch, n_seq_max=n_seq, n_threads=n_threads)
    buf: dict[str, list] = {k: [] for k in ("tokens", "hidden", "ids", "logp")}
    meta: list[dict] = []
    t0, c0 = time.time(), time.process_time()
    try:
        for pack in _packs(todo, n_batch):
            group = [todo[i] for i in pack]
            for grp in (group[i : i + n_seq] for i in range(0, len(group), n_seq)):
                toks = np.concatenate([np.asarray(d["tokens"], np.int32) for d in grp])
                pos = np.concatenate([np.arange(len(d["tokens"]), dtype=np.int32) for d in grp])
                seq = np.concatenate([np.full(len(d["tokens"]), s, np.int32) for s, d in enumerate(grp)])
                ctx.decode_rows(toks, pos, seq)
                hidden = ctx.hidden().astype(np.float16)  # copies: the views die at the next decode
                ids, logp = select(ctx.logits(), top_k)
                for s in range(len(grp)):
                    ctx.seq_rm(0, seq_id=s)
                o = 0
                for d in grp:
                    L = len(d["tokens"])
                    buf["tokens"].append(np.asarray(d["tokens"], np.int32))
                    buf["hidden"].append(hidden[o : o + L])
                    buf["ids"].append(ids[o : o + L])
                    buf["logp"].append(logp[o : o + L])
                    meta.append({k: d[k] for k in ("id", "domain", "held_out", "first")})
                    o += L
            if sum(len(t) for t in buf["tokens"]) >= shard_tokens:
                _write_shard(out_dir, man, buf, meta, time.time() - t0, time.process_time() - c0)
                t0, c0 = time.time(), time.process_time()
                log(
                    f"  shard {len(man['shards'])}: {man['docs_done']} documents, {man['tokens']} tokens, "
                    f"{man['seconds']:.0f} s"
                )
        if meta:
            _write_shard(out_dir, man, buf, meta, time.time() - t0, time.process_time() - c0)
    finally:
        ctx.close()
        model.close()
    return man


def _write_shard(
    out_dir: Path, man: dict, buf: dict, meta: list[dict], seconds: float, cpu_seconds: float = 0.0
) -> None:
    name = f"shard-{len(man['shards']):05d}.npz"
    lens = np.asarray([len(t) for t in buf["tokens"]], np.int64)
    tmp = out_dir / (name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(
            f,
            tokens=np.concatenate(buf["tokens"]),
            hidden=np.concatenate(buf["hidden"]),
            topk_ids=np.concatenate(buf["ids"]),
            topk_logp=np.concatenate(buf["logp"]),
            offsets=np.concatenate([[0], np.cumsum(lens)]),
            first=np.asarray([m["first"] for m in meta], np.int32),
            domain=np.asarray([m["domain"] for m in meta]),
            held_out=np.asarray([m["held_out"] for m in meta]),
            doc_id=np.asarray([m["id"] for m in meta]),
        )
    os.replace(tmp, out_dir / name)
    man["shards"].append({"file": name, "docs": len(meta), "tokens": int(lens.sum())})
    man["docs_done"] += len(meta)
    man["tokens"] += int(lens.sum())
    man["seconds"] = round(man["seconds"] + seconds, 1)
    # CPU time of the process (all its threads): on a busy machine, what idle cores would take
    man["cpu_seconds"] = round(man.get("cpu_seconds", 0.0) + cpu_seconds, 1)
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(man, indent=1) + "\n")
    os.replace(tmp, out_dir / MANIFEST)
    for v in buf.values():
        v.clear()
    meta.clear()


@dataclass
class Documents:
    """Every extracted document of one split, concatenated: doc i spans [offsets[i], offsets[i+1])."""

    tokens: np.ndarray
    hidden: np.ndarray
    topk_ids: np.ndarray
    topk_logp: np.ndarray
    offsets: np.ndarray
    first: np.ndarray
    domain: np.ndarray

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])


def load(out_dir: Path, held_out: bool, domains: set[str] | None = None, n_shards: int | None = None) -> Documents:
    """The documents of the training (held_out=False) or held-out split, from every finished
    shard (the first n_shards only, when given: a fixed set while extraction adds more)."""
    man = json.loads((out_dir / MANIFEST).read_text())
    parts: dict[str, list] = {k: [] for k in ("tokens", "hidden", "topk_ids", "topk_logp", "first", "domain", "len")}
    for sh in man["shards"][:n_shards]:
        with np.load(out_dir / sh["file"]) as npz:
            # each array read once: indexing the NpzFile re-reads the array from the zip
            z = {k: npz[k] for k in npz.files}
        offs = z["offsets"]
        for i in range(len(offs) - 1):
            dom = str(z["domain"][i])
            if bool(z["held_out"][i]) != held_out or (domains and dom not in domains):
                continue
            s, e = int(offs[i]), int(offs[i + 1])
            for k in ("tokens", "hidden", "topk_ids", "topk_logp"):
                parts[k].append(z[k][s:e])
            parts["first"].append(int(z["first"][i]))
            parts["domain"].append(dom)
            parts["len"].append(e - s)
    if not parts["len"]:
        raise ValueError(f"no {'held-out' if held_out else 'training'} documents in {out_dir}")
    return Documents(
        tokens=np.concatenate(parts["tokens"]),
        hidden=np.concatenate(parts["hidden"]),
        topk_ids=np.concatenate(parts["topk_ids"]),
        topk_logp=np.concatenate(parts["topk_logp"]),
        offsets=np.concatenate([[0], np.cumsum(parts["len"])]).astype(np.int64),
        first=np.asarray(parts["first"], np.int64),
        domain=np.asarray(parts["domain"]),
    )
