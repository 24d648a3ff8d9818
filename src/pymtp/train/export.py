"""GGUF export (llama.cpp ``glm4moe`` + one NextN block) and the parity reference npz.

    python -m pymtp.train.export --ckpt build/pymtp-train/model.pt --out src/pymtp/models/pymtp-default.gguf

Metadata keys are written by string name so the ``gguf`` package version does not matter.
Tensor layout: a numpy array (a, b) becomes the ggml tensor {b, a}; torch Linear weights
(out, in) are therefore written as they are.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from . import data
from .model import Config, GLM4MoEMTP
from .records import RECORDS_DIR, record_path

ARCH = "glm4moe"
REF_TOKENS = 64  # length of the reference token sequence
GATING_SIGMOID = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3
PRE_TOKENIZER = "trillion"


def gguf_tensors(model: GLM4MoEMTP) -> dict[str, torch.Tensor]:
    """llama.cpp tensor name -> torch tensor (numpy order)."""
    cfg = model.cfg
    sd: dict[str, torch.Tensor] = {
        "token_embd.weight": model.tok_embd.weight,
        "output_norm.weight": model.output_norm.weight,
    }
    if model.output is not None:
        sd["output.weight"] = model.output.weight

    def block(i, b):
        a = b.attn
        sd[f"blk.{i}.attn_norm.weight"] = b.attn_norm.weight
        sd[f"blk.{i}.attn_q.weight"] = a.wq.weight
        sd[f"blk.{i}.attn_k.weight"] = a.wk.weight
        sd[f"blk.{i}.attn_v.weight"] = a.wv.weight
        sd[f"blk.{i}.attn_output.weight"] = a.wo.weight
        sd[f"blk.{i}.post_attention_norm.weight"] = b.attn_post_norm.weight
        f = b.ffn
        if hasattr(f, "gate_inp"):
            sd[f"blk.{i}.ffn_gate_inp.weight"] = f.gate_inp.weight
            sd[f"blk.{i}.exp_probs_b.bias"] = f.exp_probs_b
            sd[f"blk.{i}.ffn_gate_exps.weight"] = f.gate_exps
            sd[f"blk.{i}.ffn_up_exps.weight"] = f.up_exps
            sd[f"blk.{i}.ffn_down_exps.weight"] = f.down_exps
            if f.shared is not None:
                sd[f"blk.{i}.ffn_gate_shexp.weight"] = f.shared.gate.weight
                sd[f"blk.{i}.ffn_up_shexp.weight"] = f.shared.up.weight
                sd[f"blk.{i}.ffn_down_shexp.weight"] = f.shared.down.weight
        else:
            sd[f"blk.{i}.ffn_gate.weight"] = f.gate.weight
            sd[f"blk.{i}.ffn_up.weight"] = f.up.weight
            sd[f"blk.{i}.ffn_down.weight"] = f.down.weight

    for i, b in enumerate(model.blocks):
        block(i, b)
    n = cfg.n_layer
    block(n, model.mtp.block)
    sd[f"blk.{n}.nextn.eh_proj.weight"] = model.mtp.eh_proj.weight
    sd[f"blk.{n}.nextn.enorm.weight"] = model.mtp.enorm.weight
    sd[f"blk.{n}.nextn.hnorm.weight"] = model.mtp.hnorm.weight
    sd[f"blk.{n}.nextn.shared_head_norm.weight"] = model.mtp.shared_head_norm.weight
    return sd


def is_f32_tensor(name: str, t: torch.Tensor) -> bool:
    """Norms, biases and the tiny router stay F32 in the F16 export."""
    return t.dim() < 2 or "ffn_gate_inp" in name


def round_to_f16(model: GLM4MoEMTP) -> GLM4MoEMTP:
    """A copy whose weights are exactly what the F16 GGUF stores."""
    import copy

    m = copy.deepcopy(model)
    with torch.no_grad():
        for name, t in gguf_tensors(m).items():
            if not is_f32_tensor(name, t):
                t.copy_(t.half().float())
    return m


def vocab_from_tokenizer(tok) -> dict:
    """GGUF vocabulary fields from a HF ``tokenizers`` byte-level BPE tokenizer."""
    tokens, merges = data.vocab_from_tokenizer_json(tok.to_str())
    special = {a["id"] for a in json.loads(tok.to_str()).get("added_tokens", [])}
    sep = tokens.index(data.SPECIAL)
    return {
        "tokens": tokens,
        "merges": merges,
        "bos": sep,
        "eos": sep,
        "token_type": [TOKEN_CONTROL if i in special else TOKEN_NORMAL for i in range(len(tokens))],
    }


def write_gguf(model: GLM4MoEMTP, vocab, path: str | Path, *, f16: bool = True, name: str = "pymtp-default") -> Path:
    """Write the model; ``vocab`` is a tokenizers.Tokenizer or a dict from vocab_from_tokenizer/read_gguf."""
    import gguf

    if not isinstance(vocab, dict):
        vocab = vocab_from_tokenizer(vocab)
    cfg = model.cfg
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    w = gguf.GGUFWriter(str(path), ARCH)
    k = lambda s: f"{ARCH}.{s}"
    w.add_string("general.name", name)
    w.add_uint32(k("context_length"), cfg.n_ctx)
    w.add_uint32(k("embedding_length"), cfg.n_embd)
    w.add_uint32(k("block_count"), cfg.n_layer + 1)
    w.add_uint32(k("nextn_predict_layers"), 1)
    w.add_uint32(k("leading_dense_block_count"), cfg.n_layer)
    w.add_uint32(k("feed_forward_length"), cfg.n_ff)
    w.add_uint32(k("attention.head_count"), cfg.n_head)
    w.add_uint32(k("attention.head_count_kv"), cfg.n_head)
    w.add_float32(k("attention.layer_norm_rms_epsilon"), cfg.norm_eps)
    w.add_uint32(k("rope.dimension_count"), cfg.head_dim)
    w.add_float32(k("rope.freq_base"), cfg.rope_base)
    w.add_uint32(k("expert_count"), cfg.n_expert)
    w.add_uint32(k("expert_used_count"), cfg.n_expert_used)
    w.add_uint32(k("expert_shared_count"), cfg.n_expert_shared)
    w.add_uint32(k("expert_feed_forward_length"), cfg.n_ff_exp)
    w.add_float32(k("expert_weights_scale"), cfg.expert_weights_scale)
    w.add_bool(k("expert_weights_norm"), cfg.expert_weights_norm)
    w.add_uint32(k("expert_gating_func"), GATING_SIGMOID)
    w.add_uint32("general.file_type", 1 if f16 else 0)

    w.add_string("tokenizer.ggml.model", "gpt2")
    # "trillion" = llama.cpp's GPT-2 regex (LLAMA_VOCAB_PRE_TYPE_TRILLION shares the GPT2 case in
    # llama-vocab.cpp) with clean_spaces = false; "gpt-2" would set clean_spaces = true, and
    # llama_detokenize would then drop the space in " .", " ,", " 's", ... (no byte-exact round trip).
    w.add_string("tokenizer.ggml.pre", PRE_TOKENIZER)
    w.add_array("tokenizer.ggml.tokens", vocab["tokens"])
    w.add_array("tokenizer.ggml.token_type", [int(t) for t in vocab["token_type"]])
    w.add_array("tokenizer.ggml.merges", vocab["merges"])
    w.add_uint32("tokenizer.ggml.bos_token_id", int(vocab["bos"]))
    w.add_uint32("tokenizer.ggml.eos_token_id", int(vocab["eos"]))
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)

    for tname, t in gguf_tensors(model).items():
        arr = t.detach().float().cpu().numpy()
        if f16 and not is_f32_tensor(tname, t):
            arr = arr.astype(np.float16)
        w.add_tensor(tname, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def read_gguf(path: str | Path) -> tuple[GLM4MoEMTP, dict]:
    """Load a file written by write_gguf back into PyTorch (float32) with its vocabulary."""
    import gguf

    r = gguf.GGUFReader(str(path))

    def val(key):
        f = r.fields[key]
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[-1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i][0].item() for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]][0].item()

    k = lambda s: f"{ARCH}.{s}"
    names = {t.name: t for t in r.tensors}
    n_layer = val(k("block_count")) - val(k("nextn_predict_layers"))
    emb = names["token_embd.weight"]
    cfg = Config(
        n_vocab=int(emb.shape[1]),
        n_embd=val(k("embedding_length")),
        n_layer=n_layer,
        n_head=val(k("attention.head_count")),
        n_ff=val(k("feed_forward_length")),
        n_expert=val(k("expert_count")),
        n_expert_used=val(k("expert_used_count")),
        n_ff_exp=val(k("expert_feed_forward_length")),
        n_expert_shared=val(k("expert_shared_count")),
        n_ctx=val(k("context_length")),
        rope_base=val(k("rope.freq_base")),
        norm_eps=val(k("attention.layer_norm_rms_epsilon")),
        tie_embeddings="output.weight" not in names,
        expert_weights_norm=bool(val(k("expert_weights_norm"))),
        expert_weights_scale=val(k("expert_weights_scale")),
    )
    model = GLM4MoEMTP(cfg)
    with torch.no_grad():
        for tname, t in gguf_tensors(model).items():
            src = names[tname]
            arr = np.array(src.data, dtype=np.float32).reshape(tuple(int(x) for x in reversed(src.shape)))
            t.copy_(torch.from_numpy(arr).reshape(t.shape))
    model.eval()
    vocab = {
        "tokens": val("tokenizer.ggml.tokens"),
        "merges": val("tokenizer.ggml.merges"),
        "token_type": val("tokenizer.ggml.token_type"),
        "bos": val("tokenizer.ggml.bos_token_id"),
        "eos": val("tokenizer.ggml.eos_token_id"),
    }
    return model, vocab


def reference_tokens(heldout_stream: np.ndarray, n: int = REF_TOKENS) -> np.ndarray:
    """A fixed held-out sequence: the first n tokens of the 2nd held-out document (starts with BOS)."""
    starts = np.flatnonzero(heldout_stream == 0)
    s = int(starts[1]) if len(starts) > 1 else 0
    return heldout_stream[s : s + n].astype(np.int32)


@torch.no_grad()
def reference_outputs(model: GLM4MoEMTP, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Trunk logits / hidden rows for all tokens; MTP logits / hidden for (tokens[1:], hidden[:-1])."""
    model.eval()
    x = torch.from_numpy(tokens.astype(np.int64))[None]
    logits, h = model.trunk(x)
    mlogits, mh = model.mtp_forward(x[:, 1:], h[:, :-1])
    return {
        "tokens": tokens.astype(np.int32),
        "trunk_logits": logits[0].numpy().astype(np.float32),
        "hidden": h[0].numpy().astype(np.float32),
        "mtp_logits": mlogits[0].numpy().astype(np.float32),
        "mtp_hidden": mh[0].numpy().astype(np.float32),
    }


def write_reference(model: GLM4MoEMTP, tokens: np.ndarray, path: str | Path) -> Path:
    """Reference from the F16-rounded weights (= the shipped file's weights)."""
    ref = reference_outputs(round_to_f16(model), tokens)
    np.savez_compressed(path, **ref, weights=np.array("f16-rounded"))  # type: ignore[arg-type]  # numpy stub
    return Path(path)


def export_all(
    model: GLM4MoEMTP, tok, out: str | Path, heldout_stream: np.ndarray, records: str | Path = RECORDS_DIR
) -> None:
    out = Path(out)
    write_gguf(model, tok, out, f16=True)
    ref = record_path(out, ".reference.npz", records)
    write_reference(model, reference_tokens(heldout_stream), ref)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) and {ref}", flush=True)


def load_checkpoint(path: str | Path) -> GLM4MoEMTP:
    ck = torch.load(path, map_location="cpu", weights_only=False)
    model = GLM4MoEMTP(Config(**ck["config"]))
    model.load_state_dict(ck["state_dict"])
    model.eval()
    return model


def main(argv=None) -> None:
    from tokenizers import Tokenizer

    ap = argparse.ArgumentParser(
        prog="python -m pymtp.train.export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ckpt", default="build/pymtp-train/model.pt")
    ap.add_argument("--out", default="src/pymtp/models/pymtp-default.gguf")
    ap.add_argument("--tokenizer", default=None, help="default: <records>/<out stem>.tokenizer.json")
    ap.add_argument("--records", default=str(RECORDS_DIR), help="where the tokenizer and the reference npz are")
    ap.add_argument("--f32", action="store_true", help="write F32 weights (no reference npz)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    tokp = args.tokenizer or str(record_path(out, ".tokenizer.json", args.records))
    tok = Tokenizer.from_file(tokp)
    model = load_checkpoint(args.ckpt)
    if args.f32:
        write_gguf(model, tok, out, f16=False)
        print(f"wrote {out}")
        return
    _, held = data.split_files()
    he = data.encode_stream(tok, [t for t in (data.read_text(f) for f in held) if t])
    export_all(model, tok, out, he, args.records)


if __name__ == "__main__":
    main()
