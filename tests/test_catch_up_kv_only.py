"""A draft decode that asks for no output rows builds the MTP block's K/V rows alone (patches
0006 and 0007, issue #28): for every family whose NextN graph takes that cut, a catch-up decoded
without outputs must leave the draft context exactly where one decoded with every row's output
leaves it: the next draft row's logits and hidden row are bitwise the same (the same K/V rows,
written by the same operations on the same rows)."""

from __future__ import annotations

import numpy as np
import pytest

from pymtp_testing.draft_decodes import after_catch_up

#: the families whose MTP graph writes K/V rows alone for a ubatch without outputs
KV_ONLY = ["glm4moe", "qwen35", "qwen35moe", "deepseek2"]


@pytest.mark.parametrize("trimmed", [False, True])
@pytest.mark.parametrize("family", KV_ONLY)
def test_a_catch_up_without_outputs_writes_the_same_kv(models, family, trimmed):
    s = models(family)
    vocab = np.arange(0, s.model.n_vocab, 3) if trimmed else []
    every_row = after_catch_up(s, True, vocab)
    kv_only = after_catch_up(s, False, vocab)
    for a, b in zip(every_row, kv_only):
        np.testing.assert_array_equal(b, a)
    # a real draft row: a finite hidden row, and scored logits (-inf outside a trimmed set) not all equal
    logits, hidden = kv_only
    assert np.isfinite(hidden).all()
    assert np.ptp(logits[np.isfinite(logits)]) > 0
