"""A draft decode that asks for no output rows builds the MTP block's K/V rows alone (patches
0006 and 0007, issue #28): for every family whose NextN graph takes that cut, a catch-up decoded
without outputs must leave the draft context exactly where one decoded with every row's output
leaves it: the next draft row's logits and hidden row are bitwise the same (the same K/V rows,
written by the same operations on the same rows)."""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from pymtp.model import last_row_only

#: the families whose MTP graph writes K/V rows alone for a ubatch without outputs
KV_ONLY = ["glm4moe", "qwen35", "qwen35moe", "deepseek2"]


def _after_catch_up(s, outputs: bool, vocab):
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


@pytest.mark.parametrize("trimmed", [False, True])
@pytest.mark.parametrize("family", KV_ONLY)
def test_a_catch_up_without_outputs_writes_the_same_kv(models, family, trimmed):
    s = models(family)
    vocab = np.arange(0, s.model.n_vocab, 3) if trimmed else []
    every_row = _after_catch_up(s, True, vocab)
    kv_only = _after_catch_up(s, False, vocab)
    for a, b in zip(every_row, kv_only):
        np.testing.assert_array_equal(b, a)
    # a real draft row: a finite hidden row, and scored logits (-inf outside a trimmed set) not all equal
    logits, hidden = kv_only
    assert np.isfinite(hidden).all()
    assert np.ptp(logits[np.isfinite(logits)]) > 0
