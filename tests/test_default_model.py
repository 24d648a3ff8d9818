"""The shipped default model (src/pymtp/models/pymtp-default.gguf) against its PyTorch reference.

``pymtp-default.reference.npz`` holds, for a fixed held-out token sequence, what the PyTorch
model (``pymtp.train.model``, run in float32 on the F16-rounded weights, i.e. the weights the
GGUF stores) computes: trunk logits, the hidden rows handed to the MTP head (output-normed
trunk rows) and the MTP head's logits for (x(p+1), h(p)). Only the F32 test needs torch
(pytest.importorskip); the tokenizer test needs `tokenizers`.

Tolerances (max abs difference of logits; the reference logits span about -12..+9):

* F16 file vs reference: ``F16_ATOL`` = 0.05 for trunk and MTP logits, ``F16_HIDDEN_ATOL`` = 0.02
  for hidden rows. Measured on the CPU backend (llama.cpp 0c1e57098bba): trunk logits 1.0e-3,
  hidden rows 6.0e-4, MTP logits 2.3e-3 (fed the reference hidden rows or llama.cpp's own).
  Since the stored weights are exactly the reference's, the residual is llama.cpp's arithmetic
  (mostly the F16 KV cache); the margin covers other backends (F16 GPU matmuls).
* F32 export (written in a tmp dir from the GGUF's weights with torch) vs PyTorch:
  ``F32_ATOL`` = 0.01. Measured: the same 1.0e-3 / 2.3e-3 (on CPU the F32 and F16 files give
  bit-identical outputs; the F16 KV cache dominates).
Greedy argmax must agree on at least 97% of rows (near-ties may flip; measured: 100%).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pymtp

MODEL_DIR = Path(pymtp.__file__).resolve().parent / "models"
GGUF = MODEL_DIR / "pymtp-default.gguf"
REF = MODEL_DIR / "pymtp-default.reference.npz"
TOKENIZER = MODEL_DIR / "pymtp-default.tokenizer.json"

F16_ATOL = 0.05
F16_HIDDEN_ATOL = 0.02
F32_ATOL = 0.01
ARGMAX_AGREEMENT = 0.97
MAX_FILE_BYTES = 25 * 1024 * 1024


@pytest.fixture(scope="module")
def model():
    m = pymtp.Model(GGUF)
    yield m
    m.close()


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(REF))


def llama_outputs(model: pymtp.Model, tokens, hidden_for_mtp=None):
    """llama.cpp's trunk logits, hidden rows and MTP logits for a token sequence.

    The MTP head pairs token x(p+1) with hidden row h(p) (positions 0..n-2); it is fed
    ``hidden_for_mtp`` when given (the reference rows), else llama.cpp's own rows."""
    toks = [int(t) for t in tokens]
    t = pymtp.TargetContext(model, n_ctx=512, n_batch=512)
    try:
        t.decode(toks, 0)
        logits = t.logits().copy()
        hidden = t.hidden().copy()
        h = np.ascontiguousarray(hidden if hidden_for_mtp is None else hidden_for_mtp, dtype=np.float32)
        d = pymtp.DraftContext(t)
        d.decode(toks[1:], 0, h[0], h[1:-1])
        mtp_logits = d.logits().copy()
        d.close()
    finally:
        t.close()
    return logits, hidden, mtp_logits


def test_file_loads_as_glm4moe_with_one_mtp_block(model):
    assert GGUF.stat().st_size <= MAX_FILE_BYTES
    assert model.architecture == "glm4moe"
    assert model.n_mtp_layers == 1
    assert model.mtp_loaded
    assert model.n_vocab == 4096
    assert model.bos is not None and model.bos == model.eos
    assert model.is_eog(model.eos)
    assert model.meta("glm4moe.nextn_predict_layers") == "1"
    assert model.meta("glm4moe.leading_dense_block_count") == str(int(model.meta("glm4moe.block_count")) - 1)


def test_trunk_and_mtp_match_reference_f16(model, ref):
    logits, hidden, mtp_logits = llama_outputs(model, ref["tokens"], hidden_for_mtp=ref["hidden"])
    assert logits.shape == ref["trunk_logits"].shape
    assert mtp_logits.shape == ref["mtp_logits"].shape
    assert np.abs(logits - ref["trunk_logits"]).max() <= F16_ATOL
    assert np.abs(hidden - ref["hidden"]).max() <= F16_HIDDEN_ATOL
    assert np.abs(mtp_logits - ref["mtp_logits"]).max() <= F16_ATOL
    assert (logits.argmax(1) == ref["trunk_logits"].argmax(1)).mean() >= ARGMAX_AGREEMENT
    assert (mtp_logits.argmax(1) == ref["mtp_logits"].argmax(1)).mean() >= ARGMAX_AGREEMENT


def test_mtp_on_llama_hidden_rows_matches_reference(model, ref):
    """End to end: the MTP head fed llama.cpp's own hidden rows."""
    _, _, mtp_logits = llama_outputs(model, ref["tokens"])
    assert np.abs(mtp_logits - ref["mtp_logits"]).max() <= 2 * F16_ATOL
    assert (mtp_logits.argmax(1) == ref["mtp_logits"].argmax(1)).mean() >= ARGMAX_AGREEMENT


def test_reference_tokens_round_trip(model, ref):
    toks = [int(t) for t in ref["tokens"]]
    assert toks[0] == model.bos
    text = model.detokenize_bytes(toks[1:])
    assert model.tokenize(text, add_special=False) == toks[1:]


def _heldout_snippets(n_files: int = 3, n_chars: int = 6000) -> list[str]:
    from pymtp.train import data

    _, held = data.split_files()
    out = []
    for rel in held:
        s = data.read_text(rel)
        if s:
            out.append(s[:n_chars])
        if len(out) == n_files:
            break
    out.append("héllo wörld 日本語 😀\r\n\n\t  x = 'it''s' ;  \u00a0y\n    return  (a , b) .")
    return out


def test_tokenizer_matches_training_tokenizer(model):
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    assert tok.get_vocab_size() == model.n_vocab
    for s in _heldout_snippets():
        ids = tok.encode(s, add_special_tokens=False).ids
        assert model.tokenize(s, add_special=False) == ids
        assert model.detokenize_bytes(ids) == s.encode("utf-8")
    assert model.tokenize("x", add_special=True)[0] == model.bos


def test_f32_export_matches_pytorch(tmp_path, ref):
    pytest.importorskip("torch")
    from pymtp.train import export

    torch_model, vocab = export.read_gguf(GGUF)
    path = export.write_gguf(torch_model, vocab, tmp_path / "pymtp-default-f32.gguf", f16=False)
    want = export.reference_outputs(torch_model, ref["tokens"])
    # the GGUF's weights are the F16-rounded ones the reference npz was computed from
    np.testing.assert_allclose(want["trunk_logits"], ref["trunk_logits"], atol=1e-4)
    with pymtp.Model(path) as m:
        logits, hidden, mtp_logits = llama_outputs(m, ref["tokens"], hidden_for_mtp=want["hidden"])
    assert np.abs(logits - want["trunk_logits"]).max() <= F32_ATOL
    assert np.abs(mtp_logits - want["mtp_logits"]).max() <= F32_ATOL
    assert (logits.argmax(1) == want["trunk_logits"].argmax(1)).mean() >= ARGMAX_AGREEMENT
