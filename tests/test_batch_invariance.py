"""Batch invariance on the CPU backend: a row decoded inside a batch of 2-8 rows gives the same
bits as the same row decoded alone, for the trunk (logits and hidden rows) and the MTP head.

Speculative decoding verifies k+1 rows in one decode where plain decoding makes one row per
decode; when both give the same bits, greedy speculation equals plain decoding exactly and a
seeded sampled run does not depend on how its tokens were batched (docs/design/exactness.md).
Every fixture family (dense, MoE, the hybrids' recurrent layers, MLA, sliding windows and
sinks), each weight type, at a short position and past 512 cells (where one-row attention used
to split the cells over the threads); one-row decodes on one thread, batches on two."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import GPU_BUILD

import pymtp
from pymtp.quant import quantize
from pymtp.rollback import n_rs_seq_for
from pymtp_testing.fixtures import FAMILIES

pytestmark = pytest.mark.skipif(
    GPU_BUILD, reason="the bit-exact contract holds for CPU builds (GPU builds keep a tolerance)"
)

#: weight types of the trunk and head; "F32" is the fixture as written. Q4_K_M files hold Q4_K
#: and Q6_K tensors, and the K-quants need rows of 256: those fixtures are 256 wide.
WEIGHT_TYPES = ("F32", "F16", "Q8_0", "Q5_0", "Q4_0", "Q4_K_M", "Q6_K")
WIDE = dict(n_embd=256, head_dim=64, n_ff=512, n_ff_exp=256)
#: batch sizes that cover the continuation after the prompt: 2+3+...+8 rows
BATCHES = (2, 3, 4, 5, 6, 7, 8)
N_CONT = sum(BATCHES)
#: a short prompt, and one whose cache view passes 512 cells
STARTS = (9, 600)


@pytest.fixture(scope="module")
def typed_model(gguf, tmp_path_factory):
    """typed_model(family, type) -> a Model of the fixture in that weight type (kept open)."""
    cache: dict[tuple[str, str], pymtp.Model] = {}
    out = tmp_path_factory.mktemp("typed")

    def get(family: str, wtype: str) -> pymtp.Model:
        key = (family, wtype)
        if key not in cache:
            wide = wtype.startswith(("Q4_K", "Q6_K"))
            src = gguf(family, **WIDE) if wide else gguf(family)
            path = src
            if wtype != "F32":
                path = quantize(src, out / f"{family}-{wtype}.gguf", type=wtype, mtp_type=None)
            cache[key] = pymtp.Model(path)
        return cache[key]

    yield get
    for m in cache.values():
        m.close()


def _tokens(model: pymtp.Model, n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    normal = [t for t in range(model.n_vocab) if not model.is_eog(t) and t != model.bos]
    return [int(t) for t in rng.choice(normal, size=n)]


def _run(model, prompt, cont, sizes, n_threads, n_ctx=1024):
    """Prefill the prompt, then decode cont in decodes of the given sizes: the trunk's logits
    and hidden rows of cont, and the head's logits for the same positions."""
    start = len(prompt)
    with pymtp.TargetContext(model, n_ctx=n_ctx, n_batch=n_ctx, n_rs_seq=n_rs_seq_for(model), n_threads=n_threads) as t:
        t.decode(prompt, 0)
        hidden_prompt = t.hidden().copy()
        logits, hidden = [], []
        i = 0
        for n in sizes:
            t.decode(cont[i : i + n], start + i)
            logits.append(t.logits().copy())
            hidden.append(t.hidden().copy())
            i += n
        logits, hidden = np.concatenate(logits), np.concatenate(hidden)
        head = None
        if model.mtp_loaded:
            # the head at position p takes token p and the trunk's hidden row of p-1
            with pymtp.DraftContext(t, n_threads=n_threads) as d:
                toks = list(prompt) + list(cont)
                rows = np.concatenate([hidden_prompt, hidden])
                d.decode(toks[1:start], 1, rows[0], rows[1 : start - 1])
                out = []
                i = 0
                for n in sizes:
                    p = start + i
                    d.decode(toks[p : p + n], p, rows[p - 1], rows[p : p + n - 1] if n > 1 else None)
                    out.append(d.logits().copy())
                    i += n
                head = np.concatenate(out)
    return logits, hidden, head


def _first_difference(got: np.ndarray, want: np.ndarray) -> str:
    rows = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)).any(axis=1))
    if rows.size == 0:
        return ""
    r = int(rows[0])
    return (
        f"{rows.size} of {len(want)} rows differ, first row {r}: "
        f"max |difference| {float(np.abs(got[r] - want[r]).max()):.3g}"
    )


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_row_in_a_batch_equals_the_row_alone(typed_model, family, wtype, start):
    model = typed_model(family, wtype)
    prompt = _tokens(model, start, seed=1)
    cont = _tokens(model, N_CONT, seed=2)
    # one row per decode on one thread, against batches on two threads
    alone = _run(model, prompt, cont, [1] * N_CONT, n_threads=1)
    batched = _run(model, prompt, cont, BATCHES, n_threads=2)
    _assert_bitwise_equal(batched, alone, f"{family} {wtype} at {start}")


def _assert_bitwise_equal(batched, alone, where: str) -> None:
    """Trunk logits, hidden rows and head logits (where the model has them) bit for bit."""
    for what, got, want in zip(("trunk logits", "hidden rows", "head logits"), batched, alone):
        if want is None:
            continue
        assert got.shape == want.shape
        diff = _first_difference(got, want)
        assert not diff, f"{where}, {what}: {diff}"


#: a long context: about 2,000 cells, where each row's visible cells span 8 chunks of 256 and
#: the attention of a batch reads each K/V cell once for several query positions
LONG_START = 1990
#: the types whose attention runs the inline F16 path (F16 K/V cache) and the generic one
LONG_TYPES = ("F32", "F16", "Q4_K_M")


@pytest.mark.parametrize("wtype", LONG_TYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_row_in_a_batch_equals_the_row_alone_at_2000_cells(typed_model, family, wtype):
    model = typed_model(family, wtype)
    prompt = _tokens(model, LONG_START, seed=3)
    cont = _tokens(model, N_CONT, seed=4)
    alone = _run(model, prompt, cont, [1] * N_CONT, n_threads=1, n_ctx=2048)
    batched = _run(model, prompt, cont, BATCHES, n_threads=2, n_ctx=2048)
    _assert_bitwise_equal(batched, alone, f"{family} {wtype} at {LONG_START}")
