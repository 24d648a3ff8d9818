"""Measure the constrained-decoding libraries pymtp could use (issue #15): mask fill and
schema compile times for llguidance and, when importable, xgrammar, at the default model's
vocabulary (SmolLM2, 49,152 tokens) and a synthetic 151,552-token one (the real tokens plus
unique concatenations of two of them).

    python tools/measure_grammar.py [--repeats 200]

Figures: medians over --repeats; a mask is filled at each position of a JSON document being
generated (the matcher advanced token by token), so it covers the states a decode meets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "number"}},
            "required": ["city"],
        },
    },
    "required": ["name", "age", "tags", "address"],
}
DOC = '{"name": "Ada Lovelace", "age": 36, "tags": ["a", "c"], "address": {"city": "London", "zip": 1815}}'


def default_vocab():
    import pymtp
    from pymtp.default_model import default_model_path

    m = pymtp.Model(default_model_path(), mtp=False)
    toks = []
    for i in range(m.n_vocab):
        plain = m.token_bytes(i)
        special = m.token_bytes(i, render_special=True)
        toks.append(b"\xff" + special if not plain and special else plain)
    return toks, m.eos, m


def synthetic(toks, n, seed=0):
    rng = np.random.default_rng(seed)
    out, seen = list(toks), set(toks)
    real = [t for t in toks if t and not t.startswith(b"\xff")]
    while len(out) < n:
        a, b = rng.integers(len(real), size=2)
        t = real[a] + real[b]
        if t not in seen and len(t) < 24:
            seen.add(t)
            out.append(t)
    return out


def ms(xs):
    return (
        f"median {1e3 * statistics.median(xs):.3f} ms, mean {1e3 * statistics.fmean(xs):.3f}, max {1e3 * max(xs):.3f}"
    )


def bench_llguidance(toks, eos, encode, doc_tokens, repeats):
    import llguidance as llg
    import llguidance.numpy as lln

    class Tok:
        eos_token_id, bos_token_id, tokens, special_token_ids = eos, None, toks, []

        def __call__(self, s):
            return encode(s)

    t0 = time.perf_counter()
    tok = llg.LLTokenizer(llg.TokenizerWrapper(Tok()))
    t_tok = time.perf_counter() - t0
    grammar = llg.LLMatcher.grammar_from_json_schema(SCHEMA)
    compiles = []
    for _ in range(5):
        t0 = time.perf_counter()
        m = llg.LLMatcher(tok, grammar)
        compiles.append(time.perf_counter() - t0)
    assert not m.is_error(), m.get_error()
    mask = lln.allocate_token_bitmask(1, len(toks))
    fills, steps = [], []
    for _r in range(max(1, repeats // len(doc_tokens))):
        m.reset()
        for t in doc_tokens:
            t0 = time.perf_counter()
            lln.fill_next_token_bitmask(m, mask)
            fills.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert m.consume_token(t), m.get_error()
            assert m.rollback(1)
            assert m.consume_token(t), m.get_error()
            steps.append(time.perf_counter() - t0)
    return t_tok, compiles, fills, steps


def bench_xgrammar(toks, eos, doc_tokens, repeats):
    import xgrammar as xgr

    t0 = time.perf_counter()
    info = xgr.TokenizerInfo(
        [t[1:] if t.startswith(b"\xff") else t for t in toks],
        xgr.VocabType.RAW,
        vocab_size=len(toks),
        stop_token_ids=[eos],
    )
    t_tok = time.perf_counter() - t0
    compiles = []
    for _ in range(5):
        c = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        t0 = time.perf_counter()
        g = c.compile_json_schema(json.dumps(SCHEMA))
        compiles.append(time.perf_counter() - t0)
    m = xgr.GrammarMatcher(g)
    mask = np.full((1, (len(toks) + 31) // 32), -1, dtype=np.int32)
    fills, steps = [], []
    for _r in range(max(1, repeats // len(doc_tokens))):
        m.reset()
        for t in doc_tokens:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(mask)
            fills.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert m.accept_token(t)
            m.rollback(1)
            assert m.accept_token(t)
            steps.append(time.perf_counter() - t0)
    return t_tok, compiles, fills, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    toks, eos, model = default_vocab()
    doc = model.tokenize(DOC, add_special=False)
    encode = lambda s: model.tokenize(s, add_special=False)  # noqa: E731
    for label, vocab in (("49,152 (SmolLM2)", toks), ("151,552 (synthetic)", synthetic(toks, 151_552))):
        print(f"vocabulary {label}, {len(doc)} positions x {max(1, args.repeats // len(doc))}")
        for name, run in (
            ("llguidance", lambda vocab=vocab: bench_llguidance(vocab, eos, encode, doc, args.repeats)),
            ("xgrammar", lambda vocab=vocab: bench_xgrammar(vocab, eos, doc, args.repeats)),
        ):
            try:
                t_tok, comp, fills, steps = run()
            except ImportError as e:
                print(f"  {name}: not importable ({e})")
                continue
            print(f"  {name}: tokenizer info {1e3 * t_tok:.0f} ms; schema compile {ms(comp)}")
            print(f"    mask fill {ms(fills)}")
            print(f"    accept + rollback(1) + accept {ms(steps)}")


if __name__ == "__main__":
    main()
