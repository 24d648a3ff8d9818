"""Acceptance of NextN heads on the default trunk, measured in llama.cpp through pymtp,
several heads in one run (before against after).

    python -m pymtp.train.evaluate_head                          # the shipped head
    python -m pymtp.train.evaluate_head --head NEW.gguf          # the shipped head and NEW.gguf
    python -m pymtp.train.evaluate_head --head NEW.gguf --json out.json

Each head is assembled with the F16 trunk (as pymtp.load() does for the default) and measured
on held-out text only (teacher_text.py's splits), the heads taking turns on each item:

* teacher-forced acceptance at draft length 1, by domain: the share of counted positions p
  where the head's argmax from (x(p+1), h(p)) over the draft vocabulary drafting uses
  (``--draft-vocab``, SpecConfig's default) equals the trunk's argmax at p+1; the full
  vocabulary's too, and a draft vocabulary of the same size taken from the distillation
  corpus (``accept_corpus_vocab``; equal to ``accept`` when --work has no shards). Domains:
  ``code`` (held-out stdlib files: the first ``--windows-per-file`` windows of each, so that
  the figure spans the held-out files rather than the first two to six of them), ``docs``
  (held-out package READMEs, the same cap), and the trunk's
  greedy ``chat``, ``prose`` and ``codegen`` text (from --text, python -m
  pymtp.train.selfdistill's trunk-text.jsonl; completions only);
* real speculative generations (n_draft 3, fixed draft length) from held-out chat
  instructions, prose openings and code prefixes, at greedy and at Qwen's sampling settings
  (T 0.7, top-p 0.8, top-k 20): P(first k accepted) for k = 1..3 (steps whose first k drafts
  were all accepted / steps that drafted k) and tokens per step (emitted / steps).

Needs only numpy and pymtp (no torch).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import teacher_text

WINDOW = teacher_text.WINDOW
QWEN = dict(temperature=0.7, top_p=0.8, top_k=20)
TRUNK_DOMAINS = teacher_text.TRUNK_DOMAINS
# held-out trunk texts past the first --per-domain of a domain (--per-domain-wide) count under
# DOMAIN + MORE, so that the usual figure stays the same set while a larger one is reported too
MORE = "_more"


def assemble(head: Path) -> Path:
    """The default trunk (F16) with this head, cached by the head's hash."""
    from pymtp import convert, trunk
    from pymtp.cache import cache_dir, cached_file, file_sha256
    from pymtp.default_model import ASSEMBLY

    out = cache_dir("models") / f"smollm2-135m-mtp-f16-{file_sha256(head)[:12]}-a{ASSEMBLY}.gguf"
    return cached_file(out, lambda tmp: convert.write_glm4moe(trunk.trunk_path(), tmp, head=head, f16=True))


class TeacherForced:
    """Counts of head-vs-trunk argmax agreement for one model, per domain."""

    def __init__(self, model, vocab_ids: np.ndarray, alt_vocab: np.ndarray | None = None):
        import pymtp

        self.t = pymtp.TargetContext(model, n_ctx=teacher_text.WINDOW, n_batch=teacher_text.WINDOW)
        self.d = pymtp.DraftContext(self.t)
        self.vocab = vocab_ids
        self.alt = alt_vocab if alt_vocab is not None else vocab_ids
        # domain -> [agree (draft vocab), agree (full), positions, agree (the other draft vocab)]
        self.counts: dict[str, np.ndarray] = {}

    def trunk(self, toks: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """The trunk's argmax per row (row q predicts x(q+1)) and its hidden rows."""
        self.t.seq_rm(0)
        self.t.decode(toks, 0)
        return self.t.logits().argmax(1), self.t.hidden().copy()

    def add(self, domain: str, toks: list[int], first: int, trunk=None) -> None:
        """Count one document; trunk: trunk(toks) already computed (by any model with the
        same trunk: the heads measured share the F16 trunk's bytes)."""
        toks = toks[: teacher_text.WINDOW]
        if len(toks) < 3:
            return
        trunk_next, h = trunk if trunk is not None else self.trunk(toks)
        self.d.seq_rm(0)
        self.d.decode(toks[1:], 0, h[0], h[1:-1])  # row p: (x(p+1), h(p)) predicts x(p+2)
        logits = self.d.logits()
        head_full = logits.argmax(1)
        head_vocab = self.vocab[logits[:, self.vocab].argmax(1)]
        head_alt = self.alt[logits[:, self.alt].argmax(1)]
        p = np.arange(max(0, first - 2), len(toks) - 1)  # predictions of x(p+2) with p+2 >= first
        c = self.counts.setdefault(domain, np.zeros(4, np.int64))
        c += [
            (head_vocab[p] == trunk_next[p + 1]).sum(),
            (head_full[p] == trunk_next[p + 1]).sum(),
            len(p),
            (head_alt[p] == trunk_next[p + 1]).sum(),
        ]

    def close(self) -> None:
        self.d.close()
        self.t.close()

    def figures(self) -> dict:
        def fig(c):
            n = max(c[2], 1)
            return {
                "accept": round(c[0] / n, 4),
                "accept_full_vocab": round(c[1] / n, 4),
                "accept_corpus_vocab": round(c[3] / n, 4),
                "positions": int(c[2]),
            }

        out = {d: fig(c) for d, c in sorted(self.counts.items())}
        wide = tuple(d for d in self.counts if d.endswith(MORE))
        groups = {
            "trunk_written": TRUNK_DOMAINS,
            "human_code": ("code",),
            "all": tuple(d for d in self.counts if d not in wide),
        }
        if wide:  # the larger held-out trunk-written set (--per-domain-wide): the figures above and the rest
            groups["trunk_written_wide"] = TRUNK_DOMAINS + wide
            groups |= {dom + "_wide": (dom, dom + MORE) for dom in TRUNK_DOMAINS}
        for g, doms in groups.items():
            out[g] = fig(sum((self.counts[d] for d in doms if d in self.counts), np.zeros(4, np.int64)))
        return out


def teacher_forced(model, seqs: list[tuple[list[int], int]]) -> tuple[int, int]:
    """(agreements, positions) at draft length 1 over the whole vocabulary; each item is
    (tokens, first position counted) (tools/measure_quant.py's figure)."""
    tf = TeacherForced(model, np.arange(model.n_vocab))
    try:
        for toks, first in seqs:
            tf.add("all", toks, first + 1)
    finally:
        tf.close()
    c = tf.counts.get("all", np.zeros(4, np.int64))
    return int(c[1]), int(c[2])


def speculative(
    session, prompts: list[list[int]], max_tokens: int, sampling: dict, seed: int, n_draft: int = 3
) -> dict:
    """P(first k accepted), k = 1..n_draft, and tokens per step over generations of the prompts
    (batched: pymtp.generate with a list)."""
    import pymtp

    spec = pymtp.SpecConfig(n_draft=n_draft, adaptive=False)
    rs = pymtp.generate(prompts, session, max_tokens=max_tokens, speculative=spec, seed=seed, **sampling)
    assert isinstance(rs, list)  # a list of prompts: a list of results
    acc, dra, steps, emitted = np.zeros(n_draft), np.zeros(n_draft), 0, 0
    for r in rs:
        a, d = r.stats.accepted_at[:n_draft], r.stats.drafted_at[:n_draft]
        acc[: len(a)] += a
        dra[: len(d)] += d
        steps += r.stats.n_steps
        emitted += r.stats.n_emitted
    return {
        "p_first_k_accepted": [round(float(a / d), 4) if d else 0.0 for a, d in zip(acc, dra)],
        "tokens_per_step": round(emitted / max(steps, 1), 4),
        "steps": int(steps),
        "tokens": int(emitted),
    }


def held_out_documents(
    model, text: Path | None, *, per_domain: int, human_tokens: int, per_file: int = 0, per_domain_wide: int = 0
) -> list[dict]:
    """Held-out trunk texts (the first per_domain of each domain; with per_domain_wide, the
    texts after them up to that many too, their domain marked with MORE) and human windows."""
    docs = []
    if text is not None and text.exists():
        gen = [d for d in teacher_text.trunk_documents(text) if d["held_out"] and d["temperature"] == 0.0]
        for dom in TRUNK_DOMAINS:
            mine = [d for d in gen if d["domain"] == dom]
            docs += mine[:per_domain]
            docs += [d | {"domain": dom + MORE} for d in mine[per_domain:per_domain_wide]]
    human = teacher_text.human_documents(
        model,
        code_tokens=10 * human_tokens,
        docs_tokens=10 * human_tokens,
        seed=0,
        splits=(True,),
        per_source=per_file,
    )
    return docs + human


def prompts_for(model, text: Path | None, n: int, per_file: int = 0) -> list[list[int]]:
    """Held-out prompts: chat instructions and prose openings (trunk-text.jsonl's held-out
    items) and held-out stdlib code prefixes, n of each at most (from n files with
    per_file 1; without it, the first file's windows)."""
    out = []
    if text is not None and text.exists():
        held = [t for t in teacher_text.read_jsonl(text) if t["held_out"]]
        for dom in ("chat", "prose"):
            out += [t["prompt"] for t in held if t["domain"] == dom][:n]
    code = [
        d
        for d in teacher_text.human_documents(
            model, code_tokens=10 * WINDOW * n, docs_tokens=0, seed=0, splits=(True,), per_source=per_file
        )
        if d["domain"] == "code"
    ]
    out += [d["tokens"][:64] for d in code[:n]]
    return out


def corpus_vocab(work: Path, model, n: int) -> np.ndarray | None:
    """The n most frequent tokens of the distillation corpus' training split (selfdistill's
    shards in work) plus the end-of-generation tokens, or None without shards: the
    alternative to pymtp.draft_vocab's stdlib-derived set."""
    from . import teacher

    if not (work / "teacher" / teacher.MANIFEST).exists():
        return None
    counts = np.bincount(teacher.load(work / "teacher", False).tokens, minlength=model.n_vocab)
    top = np.argsort(-counts, kind="stable")[:n]
    eog = [t for t in (model.eos, model.eot) if t is not None]
    return np.unique(np.concatenate([top, np.asarray(eog, np.int64)])).astype(np.int64)


def evaluate(
    heads: dict[str, Path],
    *,
    text: Path | None,
    per_domain: int = 20,
    human_tokens: int = 10_000,
    per_file: int = 0,
    per_domain_wide: int = 0,
    n_prompts: int = 8,
    max_tokens: int = 64,
    draft_vocab: int = 4096,
    seed: int = 0,
    work: Path | None = None,
    log=print,
) -> dict:
    import pymtp
    from pymtp.draft_vocab import frequent_tokens

    sessions = {name: pymtp.load(assemble(h), n_ctx=2048) for name, h in heads.items()}
    first = next(iter(sessions.values())).model
    vocab = frequent_tokens(first, draft_vocab).astype(np.int64)
    alt = corpus_vocab(work, first, draft_vocab) if work is not None else None
    docs = held_out_documents(
        first,
        text,
        per_domain=per_domain,
        human_tokens=human_tokens,
        per_file=per_file,
        per_domain_wide=per_domain_wide,
    )
    prompts = prompts_for(first, text, n_prompts, per_file=min(per_file, 1))
    log(f"{len(docs)} held-out documents, {len(prompts)} prompts, heads: {', '.join(heads)}")
    out: dict[str, dict[str, Any]] = {name: {"head": str(h)} for name, h in heads.items()}
    t0 = time.time()
    tf = {name: TeacherForced(s.model, vocab, alt) for name, s in sessions.items()}
    lead = next(iter(tf.values()))
    for d in docs:
        toks = d["tokens"][:WINDOW]
        if len(toks) < 3:
            continue
        rows = lead.trunk(toks)  # one trunk pass; the heads take turns on it
        for name in heads:
            tf[name].add(d["domain"], toks, d["first"], rows)
    for name in heads:
        out[name]["teacher_forced_k1"] = tf[name].figures()
        tf[name].close()
    log(f"teacher-forced: {time.time() - t0:.0f} s")
    for label, sampling in (("greedy", {}), ("qwen_sampling", QWEN)):
        t0 = time.time()
        for name, s in sessions.items():
            out[name][label] = speculative(s, prompts, max_tokens, sampling, seed)
        log(f"{label}: {time.time() - t0:.0f} s")
    for s in sessions.values():
        s.close()
    return out


def main(argv=None) -> None:
    from .selfdistill import SHIPPED, default_work

    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train.evaluate_head",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--head", type=Path, action="append", default=[], help="a head GGUF to measure beside the shipped one"
    )
    ap.add_argument("--text", type=Path, default=None, help="trunk-text.jsonl (default: selfdistill's, in the cache)")
    ap.add_argument("--per-domain", type=int, default=12, help="held-out trunk texts per domain")
    ap.add_argument(
        "--per-domain-wide",
        type=int,
        default=0,
        help="also report trunk_written_wide: the first this many held-out trunk texts per domain "
        "(the --per-domain ones included; the figures of the others count under DOMAIN_more)",
    )
    ap.add_argument("--human-tokens", type=int, default=40_000, help="held-out human tokens per domain (at most)")
    ap.add_argument(
        "--windows-per-file",
        type=int,
        default=2,
        help="held-out human windows per file / package at most, and code prompts from distinct "
        "files (0: no cap: the budget's first files, as before 2026-11-28, 2 to 6 files)",
    )
    ap.add_argument("--prompts", type=int, default=8, help="prompts per kind (chat, prose, code)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="selfdistill's work folder: its corpus gives the alternative draft vocabulary measured",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    heads = {"shipped": SHIPPED}
    for h in args.head:
        heads[h.stem if h.stem not in heads else str(h)] = h
    text = args.text or default_work() / "trunk-text.jsonl"
    res = evaluate(
        heads,
        text=text,
        per_domain=args.per_domain,
        human_tokens=args.human_tokens,
        per_file=args.windows_per_file,
        per_domain_wide=args.per_domain_wide,
        n_prompts=args.prompts,
        max_tokens=args.max_tokens,
        draft_vocab=args.draft_vocab,
        work=args.work or default_work(),
    )
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
