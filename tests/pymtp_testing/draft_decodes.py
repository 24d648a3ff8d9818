"""Draft-context decodes the native tests compare bitwise (patches 0006 and 0007: a catch-up
without outputs writes the MTP block's K/V rows alone)."""

from __future__ import annotations

import numpy as np

import pymtp
from pymtp.model import last_row_only


def after_catch_up(s, outputs: bool, vocab):
    """The logits and hidden row of a one-row draft after a catch-up over the prompt decoded
    with every row's output (the whole NextN block) or with none (K/V rows only)."""
    prompt = s.tokenize("def f(x):\n    return x * 2 + 1")
    n = len(prompt)
    assert n >= 5
    with pymtp.TargetContext(s.model, n_ctx=64, n_batch=64, n_threads=1) as t:
        t.decode(prompt, 0)
        rows = t.hidden().copy()
        with pymtp.DraftContext(t, n_batch=64, n_threads=1) as d:
            d.set_vocab(vocab)
            flags = np.full(n - 2, 1 if outputs else 0, dtype=np.uint8)
            d.decode(prompt[1 : n - 1], 1, rows[0], rows[1 : n - 2], output=flags)
            d.decode([prompt[n - 1]], n - 1, rows[n - 2], output=last_row_only(1))
            return d.logits()[-1].copy(), d.hidden()[-1].copy()


def head_rows(s, vocab):
    """The head's (logits, hidden row) of a prompt's last draft row, then of the recursion's next step."""
    prompt = s.tokenize("def f(x):\n    return x * 2 + 1")
    n = len(prompt)
    with pymtp.TargetContext(s.model, n_ctx=64, n_batch=64, n_threads=1) as t:
        t.decode(prompt, 0)
        rows = t.hidden().copy()
        with pymtp.DraftContext(t, n_batch=64, n_threads=1) as d:
            d.set_vocab(vocab)
            # untrimmed, every row asks for logits: llama.cpp's masked hidden rows are a decode's
            # first rows, so the last token's row comes only with all of them
            out = last_row_only(n - 1) if len(vocab) else np.ones(n - 1, dtype=np.uint8)
            d.decode(prompt[1:], 1, rows[0], rows[1 : n - 1], output=out)
            first = d.logits()[-1].copy(), d.hidden()[-1].copy()
            d.decode([prompt[3]], n, first[1], output=last_row_only(1))  # the recursion's next step
            return first, (d.logits()[-1].copy(), d.hidden()[-1].copy())
