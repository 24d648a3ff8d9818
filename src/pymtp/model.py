"""Model: a GGUF loaded by llama.cpp (weights, vocabulary, chat template). Its contexts live in
pymtp.contexts; the names other modules take from here (TargetContext, DraftContext,
last_row_only, default_threads, ...) are imported below."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._native import check, ffi, lib
from .contexts import (
    DraftContext,
    Flags,
    TargetContext,
    Tokens,
    _as_tokens,
    _Context,
    _new_handle,
    default_threads,
    last_row_only,
    max_ubatch,
)
from .errors import InvalidHandleError, ModelLoadError, UnsupportedError

__all__ = [
    "DraftContext",
    "Flags",
    "Model",
    "TargetContext",
    "Tokens",
    "default_threads",
    "last_row_only",
    "max_ubatch",
]


def _grow_until_fits(call: Callable[..., int], size: int, ctype: str = "char[]") -> tuple[Any, int]:
    """Run ``call(buf, size, needed)`` with a fresh ``ctype`` buffer of ``size`` items; when the
    shim answers PYMTP_ERR_NOSPACE (it then stores the size it needs in ``needed[0]``), run it
    once more with a buffer that large. Returns the buffer and the checked count."""
    needed = ffi.new("int32_t *")
    for _ in range(2):
        buf = ffi.new(ctype, size)
        rc = call(buf, size, needed)
        if rc != lib.PYMTP_ERR_NOSPACE:
            return buf, check(rc)
        size = needed[0]
    raise AssertionError("unreachable")


class Model:
    """A GGUF model loaded by llama.cpp (weights only; contexts hold the state).

    ``mtp=True`` loads the MTP / NextN blocks when the file has them.
    A Model is safe to share between threads: its contexts serialize their
    native calls on ``model.lock``.

    Over several hosts (see pymtp.rpc): ``rpc_servers=["host:port", ...]`` puts the layers
    on those servers' devices (``tensor_split``: each one's share, in that order; default:
    by free memory); ``mtp_local`` keeps the MTP blocks and the output head in local memory,
    so that drafting does not cross the network and a verify sends hidden rows, not logits;
    ``rpc_timeout`` (seconds) bounds each exchange with a server.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mtp: bool = True,
        n_gpu_layers: int = -1,
        rpc_servers: Sequence[str] | None = None,
        tensor_split: Sequence[float] | None = None,
        mtp_local: bool = True,
        rpc_timeout: float | None = None,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ModelLoadError(f"model file not found: {self.path}")
        if not isinstance(n_gpu_layers, int):
            raise TypeError("n_gpu_layers must be an int (-1 = all)")
        p = ffi.new("pymtp_load_params *")
        p[0] = lib.pymtp_load_default_params()
        p.load_mtp, p.n_gpu_layers, p.mtp_local = int(bool(mtp)), n_gpu_layers, int(bool(mtp_local))
        keep = []  # cffi buffers the call reads
        if rpc_servers:
            from .rpc import check_endpoints, set_timeout

            keep.append(ffi.new("char[]", ",".join(check_endpoints(rpc_servers)).encode()))
            p.rpc_servers = keep[-1]
            set_timeout(rpc_timeout)
        if tensor_split:
            if not rpc_servers:
                raise ValueError("tensor_split needs rpc_servers (the devices it splits over)")
            split = [float(x) for x in tensor_split]
            if any(not (x >= 0.0) or x == float("inf") for x in split) or not any(split):
                raise ValueError(f"tensor_split must be finite shares >= 0, not all 0: {list(tensor_split)}")
            keep.append(ffi.new("float[]", split))
            p.tensor_split, p.n_tensor_split = keep[-1], len(split)
        self.rpc_servers: list[str] = list(rpc_servers or [])
        self._h = _new_handle("pymtp_model **", lib.pymtp_model_load_ext, os.fsencode(self.path), p)
        self.lock = threading.RLock()
        self._contexts: weakref.WeakSet[_Context] = weakref.WeakSet()
        info = ffi.new("pymtp_model_info *")
        check(lib.pymtp_model_get_info(self._h, info))
        self.architecture: str = ffi.string(info.architecture).decode()
        self.description: str = ffi.string(info.description).decode()
        self.n_vocab: int = info.n_vocab
        self.n_embd: int = info.n_embd
        self.n_layer: int = info.n_layer
        self.n_mtp_layers: int = info.n_mtp_layers
        self.mtp_loaded: bool = bool(info.mtp_loaded)
        self.n_ctx_train: int = info.n_ctx_train
        self.is_recurrent: bool = bool(info.is_recurrent or info.is_hybrid)
        self.is_hybrid: bool = bool(info.is_hybrid)
        self.supports_rollback: bool = bool(info.rs_rollback)
        self.bos: int | None = info.token_bos if info.token_bos >= 0 else None
        self.eos: int | None = info.token_eos if info.token_eos >= 0 else None
        self.eot: int | None = info.token_eot if info.token_eot >= 0 else None
        self.add_bos: bool = bool(info.add_bos)
        self.n_params: int = info.n_params
        self.size_bytes: int = info.size_bytes
        self.n_swa: int = info.n_swa  # sliding-window attention span (0: none)
        self._piece_buf = ffi.new("char[]", 256)

    # ---- lifetime ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def failed(self) -> bool:
        """A remote server of this model failed: it must be closed and loaded again."""
        return self._h is not None and bool(check(lib.pymtp_model_failed(self._h)))

    def _handle(self) -> Any:
        if self._h is None:
            raise InvalidHandleError(f"model {self.path.name} is closed")
        return self._h

    def close(self) -> None:
        """Free the weights (and every context still open on this model)."""
        with self.lock:
            if self._h is None:
                return
            for ctx in sorted(self._contexts, key=lambda c: not c.is_draft):
                ctx.close()
            check(lib.pymtp_model_free(self._h))
            self._h = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.n_layer} layers + {self.n_mtp_layers} MTP"
        return f"Model({self.path.name!r}, {self.architecture}, {state})"

    # ---- vocabulary -------------------------------------------------------------------

    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        with self.lock:
            h = self._handle()
            out, n = _grow_until_fits(
                lambda buf, size, needed: lib.pymtp_tokenize(
                    h, data, len(data), add_special, parse_special, buf, size, needed
                ),
                len(data) + 8,
                "int32_t[]",
            )
            return list(out[0:n])

    def detokenize_bytes(self, tokens: Sequence[int], *, render_special: bool = False) -> bytes:
        arr = _as_tokens(tokens)
        with self.lock:
            h = self._handle()
            buf, n = _grow_until_fits(
                lambda buf, size, needed: lib.pymtp_detokenize(
                    h, ffi.from_buffer("int32_t[]", arr), len(arr), render_special, buf, size, needed
                ),
                max(64, 8 * len(arr)),
            )
            return bytes(ffi.unpack(buf, n))

    def detokenize(self, tokens: Sequence[int], *, render_special: bool = False) -> str:
        return self.detokenize_bytes(tokens, render_special=render_special).decode("utf-8", "replace")

    def token_bytes(self, token: int, *, render_special: bool = False) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character)."""
        with self.lock:
            n = check(lib.pymtp_token_piece(self._handle(), int(token), render_special, self._piece_buf, 256))
            return bytes(ffi.unpack(self._piece_buf, n))

    def piece(self, token: int) -> bytes:
        """The bytes of one token (pymtp.textout's Vocabulary: a Session caches them)."""
        return self.token_bytes(token)

    def is_eog(self, token: int) -> bool:
        """True when token ends generation (EOS, end of turn...)."""
        return bool(check(lib.pymtp_token_is_eog(self._handle(), int(token))))

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None when the key is absent."""
        buf = ffi.new("char[]", 4096)
        rc = lib.pymtp_model_meta(self._handle(), key.encode(), buf, 4096)
        return None if rc < 0 else ffi.string(buf).decode("utf-8", "replace")

    def chat_template(self, name: str | None = None) -> str | None:
        """The GGUF's chat template text, or None when it has none."""
        out = ffi.new("const char **")
        rc = lib.pymtp_chat_template(self._handle(), name.encode() if name else ffi.NULL, out)
        if rc == lib.PYMTP_ERR_UNSUPPORTED:
            return None
        check(rc)
        return str(ffi.string(out[0]).decode("utf-8", "replace"))

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], *, add_assistant: bool = True, template: str | None = None
    ) -> str:
        """Format chat messages ({"role", "content"} dicts) with the GGUF's chat template
        (llama.cpp's built-in template support); UnsupportedError when there is none."""
        tmpl = template or self.chat_template()
        if tmpl is None:
            raise UnsupportedError(
                f"{self.path.name} has no chat template: format the prompt yourself, or pass template=..."
            )
        try:
            roles = [ffi.new("char[]", str(m["role"]).encode()) for m in messages]
            contents = [ffi.new("char[]", str(m["content"]).encode()) for m in messages]
        except (KeyError, TypeError) as e:
            raise ValueError(f"messages must be dicts with 'role' and 'content': {e}") from None
        role_arr, content_arr = ffi.new("char *[]", roles), ffi.new("char *[]", contents)
        buf, n = _grow_until_fits(
            lambda buf, size, needed: lib.pymtp_chat_apply(
                tmpl.encode(), role_arr, content_arr, len(messages), add_assistant, buf, size, needed
            ),
            256 + sum(len(m["content"]) for m in messages) * 2,
        )
        return str(ffi.unpack(buf, n).decode("utf-8", "replace"))
