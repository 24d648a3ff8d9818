"""What the padding of a padded-vocabulary variant (pymtp.bench.vocab) does: greedy output
against the source model, and the probability mass the padded tokens take.

    python tools/measure_padded_vocab.py [--n-vocab 248320] [--src model.gguf] [--max-tokens 64]

For each bench prompt (2 code, 2 prose): greedy continuations, plain and MTP k=3, on the
source and on the padded model (tokens and MTP acceptance must be equal); then, over every
generated position of the padded model, the padded tokens' share of softmax(logits / 0.7)
(no truncation) and whether one reaches the top 20 (Qwen's top-k: if none does, they take
exactly nothing under Qwen's settings).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import pymtp
from pymtp.bench import code_prompts, prose_prompts
from pymtp.bench.vocab import padded_vocab_path
from pymtp.config import SpecConfig
from pymtp.default_model import resolve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-vocab", type=int, default=248_320)
    ap.add_argument("--src", default=None, help="source GGUF (default: the default model)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args()
    src = resolve(a.src or "default")
    padded = padded_vocab_path(a.n_vocab, src)
    out = {"src": str(src), "padded": str(padded), "n_vocab": a.n_vocab, "prompts": []}
    with pymtp.load(src, n_ctx=1024) as s0, pymtp.load(padded, n_ctx=1024) as s1:
        n_old = s0.model.n_vocab
        for p in code_prompts(2) + prose_prompts(2):
            rec = {"prompt": p.id}
            for name, spec in (("plain", False), ("mtp-3", SpecConfig(n_draft=3, adaptive=False))):
                g0 = pymtp.generate(p.text, s0, max_tokens=a.max_tokens, ignore_eos=True, speculative=spec)
                g1 = pymtp.generate(p.text, s1, max_tokens=a.max_tokens, ignore_eos=True, speculative=spec)
                rec[f"{name}_equal"] = g0.tokens == g1.tokens
                rec[f"{name}_accepted"] = [g0.stats.n_accepted, g1.stats.n_accepted]
            toks = s1.model.tokenize(p.text)
            seq = toks + list(g1.tokens)
            with pymtp.TargetContext(s1.model, n_ctx=len(seq) + 1, n_batch=len(seq)) as t:
                out_rows = np.zeros(len(seq), dtype=np.uint8)
                out_rows[len(toks) - 1 :] = 1  # the rows that chose generated tokens
                t.decode(seq, 0, output=out_rows)
                L = np.array(t.logits(), dtype=np.float64)
            z = (L - L.max(axis=1, keepdims=True)) / a.temperature
            e = np.exp(z)
            mass = e[:, n_old:].sum(axis=1) / e.sum(axis=1)
            k20 = np.partition(L, -20, axis=1)[:, -20]
            rec.update(
                n_positions=int(L.shape[0]),
                pad_mass_mean=float(mass.mean()),
                pad_mass_max=float(mass.max()),
                pad_in_top20=int((L[:, n_old:].max(axis=1) >= k20).sum()),
                gap_top_real_to_top_pad_min=float((L[:, :n_old].max(axis=1) - L[:, n_old:].max(axis=1)).min()),
            )
            out["prompts"].append(rec)
            print(json.dumps(rec))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
