"""The CPU matrix products of 1-8 rows (native/patches/0004-cpu-small-batch-matmul.patch).

Two properties, per weight type:
- agreement with a float64 reference, through a model whose logits are one matrix product
  (``output.weight`` of the type under test times the normalized token embedding; the block's
  output projections are zero, so the residual stream is the embedding exactly);
- row i of an n-row decode is bitwise the row decoded alone (n = 2..8), through a whole model
  quantized to the type, after a short and a long prefix.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

import pymtp
from pymtp.quant import quantize
from pymtp_testing import fixtures

pytestmark = pytest.mark.skipif(
    any(b in pymtp._native.build_info().partition("backends:")[2].split() for b in ("CUDA", "VULKAN", "METAL")),
    reason="the bit-exact small-batch contract is the CPU backend's",
)

N_EMBD = 256  # a multiple of the K-quants' 256-element super-block
HEAD_DIM = 64


def _random_blocks(qtype: QT, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Valid blocks of ``qtype`` with random quants and scales (what any quantizer could write)."""
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block

    def half(lo: float, hi: float, n: int = nb) -> np.ndarray:
        return rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)

    def raw(n: int) -> np.ndarray:
        return rng.integers(0, 256, (nb, n), dtype=np.uint8)

    if qtype == QT.Q8_0:
        qs = rng.integers(-127, 128, (nb, 32), dtype=np.int8).view(np.uint8)
        parts = [half(0.0005, 0.002), qs]
    elif qtype == QT.Q4_0:
        parts = [half(0.005, 0.03), raw(16)]
    elif qtype == QT.Q5_0:
        parts = [half(0.003, 0.015), raw(4), raw(16)]
    elif qtype == QT.Q4_K:
        parts = [half(0.0005, 0.003), half(0.0002, 0.002), raw(12), raw(128)]
    elif qtype == QT.Q5_K:
        parts = [half(0.0005, 0.003), half(0.0002, 0.002), raw(12), raw(32), raw(128)]
    elif qtype == QT.Q6_K:
        scales = rng.integers(-64, 65, (nb, 16), dtype=np.int8).view(np.uint8)
        parts = [raw(128), raw(64), scales, half(0.00005, 0.0003)]
    else:
        raise AssertionError(qtype)
    out = np.concatenate(parts, axis=1)
    assert out.shape[1] == nbytes
    return out.reshape(rows, cols // block * nbytes)


#: tokens whose embedding holds its largest magnitude twice, with opposite signs
TIED_TOKENS = {41: 1.0, 7: -1.0, 99: 1.0}


def _matmul_model(path, qtype: QT, n_vocab_extra: int, n_embd: int = N_EMBD, seed: int = 0):
    """A llama whose logits are output.weight (of ``qtype``, ``n_embd`` wide) times
    rmsnorm(token embedding). Returns (path, token embeddings, output weights as float64)."""
    rng = np.random.default_rng(seed)
    specials = ("<|bos|>", "<|eos|>") + tuple(f"<|pad{i}|>" for i in range(n_vocab_extra))
    tokens, merges, types = fixtures.byte_vocab(specials=specials)
    n_vocab = len(tokens)
    n_head, n_head_kv, n_ff = n_embd // HEAD_DIM, 2, 256

    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_uint32("general.file_type", 0)
    wr.add_uint32("general.quantization_version", 2)
    wr.add_uint32("llama.context_length", 512)
    wr.add_uint32("llama.embedding_length", n_embd)
    wr.add_uint32("llama.block_count", 1)
    wr.add_uint32("llama.feed_forward_length", n_ff)
    wr.add_uint32("llama.attention.head_count", n_head)
    wr.add_uint32("llama.attention.head_count_kv", n_head_kv)
    wr.add_uint32("llama.attention.key_length", HEAD_DIM)
    wr.add_uint32("llama.attention.value_length", HEAD_DIM)
    wr.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    wr.add_float32("llama.rope.freq_base", 10000.0)
    wr.add_uint32("llama.rope.dimension_count", HEAD_DIM)
    fixtures.add_byte_bpe_vocab(
        wr, tokens, merges, types, bos=tokens.index("<|bos|>"), eos=tokens.index("<|eos|>"), add_bos=False
    )

    def f32(name: str, arr: np.ndarray) -> None:
        wr.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    embd = rng.standard_normal((n_vocab, n_embd)).astype(np.float32)
    # the largest |x| twice, with both signs (either first): the Q8_K quantizer of the
    # activations takes the first one's sign, as the reference does
    for tok, sign in TIED_TOKENS.items():
        embd[tok, 5], embd[tok, 200] = 6.0 * sign, -6.0 * sign
    f32("token_embd.weight", embd)
    f32("output_norm.weight", np.ones(n_embd))
    f32("blk.0.attn_norm.weight", np.ones(n_embd))
    f32("blk.0.ffn_norm.weight", np.ones(n_embd))
    f32("blk.0.attn_q.weight", rng.standard_normal((n_embd, n_embd)) * 0.05)
    f32("blk.0.attn_k.weight", rng.standard_normal((n_head_kv * HEAD_DIM, n_embd)) * 0.05)
    f32("blk.0.attn_v.weight", rng.standard_normal((n_head_kv * HEAD_DIM, n_embd)) * 0.05)
    f32("blk.0.attn_output.weight", np.zeros((n_embd, n_embd)))
    f32("blk.0.ffn_gate.weight", rng.standard_normal((n_ff, n_embd)) * 0.05)
    f32("blk.0.ffn_up.weight", rng.standard_normal((n_ff, n_embd)) * 0.05)
    f32("blk.0.ffn_down.weight", np.zeros((n_embd, n_ff)))
    if qtype in (QT.F32, QT.F16):
        w = (rng.standard_normal((n_vocab, n_embd)) * 0.06).astype(np.float32 if qtype == QT.F32 else np.float16)
        wr.add_tensor("output.weight", w)
        wdeq = w.astype(np.float64)
    else:
        blocks = _random_blocks(qtype, n_vocab, n_embd, rng)
        wr.add_tensor("output.weight", blocks, raw_shape=blocks.shape, raw_dtype=qtype)
        wdeq = dequantize(blocks, qtype).astype(np.float64).reshape(n_vocab, n_embd)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path, embd, wdeq


#: normalized mean squared error allowed against float64 (ggml's test-backend-ops uses 5e-4
#: for quantized products): F32 weights meet F32 activations; F16 weights meet F32 activations
#: in the x86 kernels and F16 ones in the vec_dot of other CPUs (~1e-7); the others meet
#: activations quantized to 8 bits (Q8_0 or Q8_K)
NMSE = {
    QT.F32: 1e-10,
    QT.F16: 1e-6,
    QT.Q8_0: 5e-4,
    QT.Q4_0: 5e-4,
    QT.Q5_0: 5e-4,
    QT.Q4_K: 5e-4,
    QT.Q5_K: 5e-4,
    QT.Q6_K: 5e-4,
}


# 304 output rows: Q4_0 and Q4_K weights go to the repacked (interleaved) layout on AVX2
# (Q4_K: the small-batch kernel on block_q4_Kx8 for 1-8 rows);
# 307 rows (3 more tokens): they stay in the plain layout. 1024 wide: 4 super-blocks a row.
# (768 wide: 3, an odd count.)
CASES = [(t, 0, N_EMBD) for t in NMSE] + [
    (QT.Q4_0, 3, N_EMBD),
    (QT.Q4_K, 3, N_EMBD),
    (QT.Q4_K, 0, 1024),
    (QT.Q4_K, 3, 1024),
    (QT.Q5_K, 0, 1024),
    (QT.Q6_K, 0, 1024),
    (QT.Q6_K, 3, 768),
]


@pytest.mark.parametrize(
    ("qtype", "n_vocab_extra", "n_embd"), CASES, ids=[f"{t.name}-{304 + e}rows-{k}wide" for t, e, k in CASES]
)
def test_matmul_agrees_with_float64_and_rows_do_not_depend_on_the_batch(tmp_path, qtype, n_vocab_extra, n_embd):
    path, embd, wdeq = _matmul_model(tmp_path / f"mm-{qtype.name}.gguf", qtype, n_vocab_extra, n_embd)
    toks = [3, 77, 150, 201, 255, 12, 99, 180]
    x = embd[toks].astype(np.float64)
    x = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + 1e-6)
    want = x @ wdeq.T

    with pymtp.load(path, n_ctx=64) as model, pymtp.TargetContext(model, n_ctx=64, n_batch=8) as ctx:
        rows = {}
        for n in range(1, 9):
            ctx.seq_rm(0)
            ctx.decode(toks[:n], 0, output=np.ones(n, dtype=np.uint8))
            rows[n] = ctx.logits()[:n].copy()
    got = rows[8].astype(np.float64)
    for i in range(8):
        nmse = np.mean((got[i] - want[i]) ** 2) / np.mean(want[i] ** 2)
        assert nmse < NMSE[qtype], f"row {i}: normalized squared error {nmse:.3g} against float64"
    for n in range(1, 8):
        np.testing.assert_array_equal(rows[n], rows[8][:n], err_msg=f"rows of a {n}-row decode vs 8 rows")


def test_repacked_q4_K_rows_equal_the_one_row_gemv(tmp_path):
    """Repacked Q4_K (block_q4_Kx8): batches of 1-8 rows run the small-batch kernel; above 8,
    llama.cpp's own code runs its 4-row gemm and its one-row gemv for the rows left over (the
    9th-11th of 11), on activations quantized by llama.cpp's quantize_row_q8_K. Those rows must
    equal the rows decoded alone: the kernel has the gemv's bits, and the small batches' vector
    quantizer the reference's (tokens 41 and 7 hold their largest magnitude twice)."""
    path, _, _ = _matmul_model(tmp_path / "mm-Q4_K-wide.gguf", QT.Q4_K, 0, 1024)
    toks = [3, 77, 150, 201, 255, 12, 99, 180, 41, 230, 7]
    with pymtp.load(path, n_ctx=64) as model, pymtp.TargetContext(model, n_ctx=64, n_batch=16) as ctx:
        ctx.decode(toks, 0, output=np.ones(len(toks), dtype=np.uint8))
        batch = ctx.logits()[: len(toks)].copy()
        for i in range(8, len(toks)):
            ctx.seq_rm(0)
            ctx.decode([toks[i]], 0, output=np.ones(1, dtype=np.uint8))
            np.testing.assert_array_equal(ctx.logits()[0], batch[i], err_msg=f"row {i} (gemv) against the row alone")


#: whole models quantized by llama.cpp: (file type, the weight types it must contain)
MODEL_TYPES = {
    "F16": {"F16"},
    "Q8_0": {"Q8_0"},
    "Q4_0": {"Q4_0"},
    "Q5_0": {"Q5_0"},
    "Q4_K_M": {"Q4_K", "Q6_K"},
    "Q5_K_M": {"Q5_K", "Q6_K"},
    "Q6_K": {"Q6_K"},
}


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    d = tmp_path_factory.mktemp("kernels")
    src = fixtures.fixture_path(
        "llama", cache_dir=d, n_embd=N_EMBD, head_dim=HEAD_DIM, n_head=4, n_head_kv=2, n_ff=512, n_trunk=2
    )
    made = {}

    def get(ftype: str):
        if ftype not in made:
            made[ftype] = quantize(src, d / f"llama-{ftype}.gguf", type=ftype, mtp_type=None)
            r = gguf.GGUFReader(str(made[ftype]))
            have = {t.tensor_type.name for t in r.tensors if len(t.shape) == 2}
            assert MODEL_TYPES[ftype] <= have, f"{ftype} file holds {have}"
        return made[ftype]

    return get


@pytest.mark.parametrize("ftype", list(MODEL_TYPES))
@pytest.mark.parametrize("prefix", [4, 300], ids=["short", "long"])
def test_rows_of_a_batch_equal_rows_decoded_alone(quantized, ftype, prefix):
    rng = np.random.default_rng(prefix)
    toks = [int(t) for t in rng.integers(0, 256, prefix + 8)]
    with pymtp.load(quantized(ftype), n_ctx=512) as model, pymtp.TargetContext(model, n_ctx=512, n_batch=512) as ctx:
        ctx.decode(toks[:prefix], 0)
        alone = []
        for i in range(8):
            ctx.decode([toks[prefix + i]], prefix + i, output=np.ones(1, dtype=np.uint8))
            alone.append(ctx.logits()[0].copy())
        for n in range(2, 9):
            ctx.seq_rm(prefix)
            ctx.decode(toks[prefix : prefix + n], prefix, output=np.ones(n, dtype=np.uint8))
            batch = ctx.logits()[:n]
            for i in range(n):
                np.testing.assert_array_equal(batch[i], alone[i], err_msg=f"row {i} of a {n}-row decode")


def test_repacked_q6_K_prefill_rows_equal_the_rows_alone(quantized):
    """Repacked Q6_K (block_q6_Kx8, patch 0008 on x86: every weight matrix of a Q6_K file but
    the output matrix): every product goes through the small-batch kernel, a prefill in groups
    of 8 rows on activations quantized one row at a time. So an 11-row prefill (a group of 8
    and one of 3; attention of fewer than 64 rows is invariant, 0005) leaves the same K/V and
    hidden rows as 11 one-row decodes: the last row's logits (the output matrix at one row
    both ways) are bitwise equal."""
    toks = [int(t) for t in np.random.default_rng(11).integers(0, 256, 11)]
    with pymtp.load(quantized("Q6_K"), n_ctx=64) as model, pymtp.TargetContext(model, n_ctx=64, n_batch=16) as ctx:
        last = np.zeros(len(toks), dtype=np.uint8)
        last[-1] = 1
        ctx.decode(toks, 0, output=last)
        batch = ctx.logits()[0].copy()
        ctx.seq_rm(0)
        for i, t in enumerate(toks):
            ctx.decode([t], i, output=np.ones(1, dtype=np.uint8))
        np.testing.assert_array_equal(
            ctx.logits()[0], batch, err_msg="last row of an 11-row prefill against 11 decodes"
        )


def _extreme_q6_K_blocks(qtype: QT, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Q6_K blocks at the ends of every range: quants 0 or 63 (-32 or 31), scales -128 or 127."""
    assert qtype == QT.Q6_K
    nb = rows * cols // 256
    ends = rng.integers(0, 2, (nb, 192), dtype=np.uint8) * np.uint8(0xFF)  # ql and qh, all bits 0 or 1
    scales = np.where(rng.integers(0, 2, (nb, 16)) == 1, 127, -128).astype(np.int8).view(np.uint8)
    d = rng.uniform(0.00001, 0.00005, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    return np.concatenate([ends, scales, d], axis=1).reshape(rows, cols // 256 * 210)


@pytest.mark.parametrize("n_vocab_extra", [0, 3], ids=["304rows", "307rows"])
def test_q6_K_at_the_ends_of_its_ranges(tmp_path, monkeypatch, n_vocab_extra):
    """Q6_K weights whose quants and scales all sit at their extremes: no integer in the
    small-batch tile saturates (agreement with float64) and rows do not depend on the batch.
    (The output matrix stays in the plain layout; tools/kernel_bench/bench_q6kx8.cpp holds the
    repacked kernel to the same extremes.)"""
    monkeypatch.setattr(f"{__name__}._random_blocks", _extreme_q6_K_blocks)
    test_matmul_agrees_with_float64_and_rows_do_not_depend_on_the_batch(tmp_path, QT.Q6_K, n_vocab_extra, 1024)
