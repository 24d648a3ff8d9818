"""Session: a model with the contexts it generates with, their options and its caches.

``pymtp.load()`` returns one; ``generate``, ``stream``, ``chat``, the server and the bench
all run on one. The contexts are made on first use and reused by every generation
after; a generation holds ``session.lock`` while it touches them.

A Session also answers the model's own questions (``tokenize``, ``n_vocab``,
``apply_chat_template``...: each named here) from ``session.model``.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import default_model
from .config import SamplingConfig, SpecConfig
from .drafters import check_can_draft, drafter_kind, make_drafter
from .errors import InvalidHandleError, UnsupportedError
from .model import DraftContext, Model, TargetContext
from .prompt_cache import PromptCache, read_text, write_text
from .rollback import n_rs_seq_for
from .speculator import MTPSpeculator

#: Memory the default context may spend on its KV cache (F16 keys and values); the default
#: n_ctx is the model's training context, cut down to what fits ($PYMTP_KV_BUDGET_MB overrides).
KV_BUDGET_BYTES = 2 << 30


def kv_bytes_per_position(model: Model) -> int:
    """F16 KV bytes one position costs in the target context, from the GGUF's facts (an upper
    bound: recurrent layers of hybrids and MLA's compressed cache cost less)."""
    arch = model.architecture

    def ints(key: str) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", model.meta(f"{arch}.{key}") or "")]

    n_head = (ints("attention.head_count") or [1])[0] or 1
    n_head_kv = ints("attention.head_count_kv") or [n_head]
    heads = sum(n_head_kv) if len(n_head_kv) > 1 else n_head_kv[0] * model.n_layer
    k_len = (ints("attention.key_length") or [model.n_embd // n_head])[0]
    v_len = (ints("attention.value_length") or [k_len])[0]
    return max(1, heads * (k_len + v_len) * 2)


#: Memory the saved texts of other conversations may hold (KV bytes copied out of the contexts);
#: Session(cache_mb=) or $PYMTP_PROMPT_CACHE_MB overrides, 0 turns the prompt cache off.
PROMPT_CACHE_BYTES = 1 << 30


def default_n_ctx(model: Model) -> int:
    """The model's training context, bounded by the KV memory budget (multiples of 256)."""
    budget = int(os.environ.get("PYMTP_KV_BUDGET_MB", 0)) << 20 or KV_BUDGET_BYTES
    train = model.n_ctx_train or 4096
    fits = budget // kv_bytes_per_position(model) // 256 * 256
    return max(min(train, 256), min(train, fits))


def _from_model(name: str, kind: type) -> property:
    """A Session property that is its model's fact of that name."""
    return property(lambda self: getattr(self.model, name), doc=f"session.model.{name} ({kind.__name__})")


class Session:
    """The contexts one model generates with, made once and reused.

    model: a loaded Model (the session borrows it) or a GGUF path / model name as
    ``pymtp.load`` takes (the session loads it and closes it with itself).
    n_ctx: context length (default: the model's training context, as far as its KV cache fits
    in KV_BUDGET_BYTES, 2 GiB).
    n_threads: CPU threads for decoding (default: pymtp.model.default_threads(): $PYMTP_THREADS,
    else one less than the physical cores).
    cache_mb: memory for the caches of conversations other than the live one (default 1024;
    0: only the live one is kept). See pymtp.prompt_cache.
    rpc_servers, tensor_split, mtp_local, rpc_timeout: a model spread over hosts (pymtp.rpc;
    only when the session loads the model). file, revision: a GGUF of a Hub repository
    (model "org/repo"; pymtp.hub).
    """

    def __init__(
        self,
        model: Model | str | os.PathLike[str] | None,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        mtp: bool = True,
        n_gpu_layers: int = -1,
        cache_mb: int | None = None,
        rpc_servers: list[str] | None = None,
        tensor_split: list[float] | None = None,
        mtp_local: bool = True,
        rpc_timeout: float | None = None,
        file: str | None = None,
        revision: str | None = None,
    ) -> None:
        if cache_mb is not None and (not isinstance(cache_mb, int) or isinstance(cache_mb, bool) or cache_mb < 0):
            raise ValueError(f"cache_mb must be an int >= 0, got {cache_mb!r}")
        if n_ctx is not None and (not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 8):
            raise ValueError(f"n_ctx must be an int >= 8, got {n_ctx!r}")
        if n_threads is not None and (not isinstance(n_threads, int) or isinstance(n_threads, bool) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive int, got {n_threads!r}")
        self.owns_model = not isinstance(model, Model)
        if not isinstance(model, Model):
            model = Model(
                default_model.resolve(model, file, revision),
                mtp=mtp,
                n_gpu_layers=n_gpu_layers,
                rpc_servers=rpc_servers,
                tensor_split=tensor_split,
                mtp_local=mtp_local,
                rpc_timeout=rpc_timeout,
            )
        elif rpc_servers or tensor_split:
            raise ValueError("rpc_servers and tensor_split apply when the session loads the model (give a path)")
        self.model: Model = model
        self.lock = model.lock
        self.n_ctx = n_ctx or default_n_ctx(model)
        self.n_threads = n_threads
        self.generation = 0  # bumped by every new generation: paused streams notice
        self._target: TargetContext | None = None
        self._draft: DraftContext | None = None
        self._speculator: MTPSpeculator | None = None  # the last one: its caches can be reused
        self._speculator_kind: str | None = None  # its drafter: "mtp", "lookup", None
        if cache_mb is None:
            env = os.environ.get("PYMTP_PROMPT_CACHE_MB")
            cache_bytes = int(env) << 20 if env else PROMPT_CACHE_BYTES
        else:
            cache_bytes = cache_mb << 20
        self.prompt_cache = PromptCache(cache_bytes)
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._closed = False

    # ---- contexts --------------------------------------------------------------------------

    def _ensure_contexts(self) -> tuple[TargetContext, DraftContext | None]:
        """The target and draft contexts, made (again, after a close of either) on demand."""
        if self.closed:
            raise InvalidHandleError("this session is closed")
        if self._target is None or self._target.closed or (self._draft is not None and self._draft.closed):
            self._close_contexts()
            self._target = TargetContext(
                self.model, n_ctx=self.n_ctx, n_batch=512, n_rs_seq=n_rs_seq_for(self.model), n_threads=self.n_threads
            )
            self._draft = DraftContext(self._target, n_threads=self.n_threads) if self.model.mtp_loaded else None
        return self._target, self._draft

    @property
    def target(self) -> TargetContext:
        return self._ensure_contexts()[0]

    @property
    def draft(self) -> DraftContext | None:
        return self._ensure_contexts()[1]

    def speculator(self, sampling: SamplingConfig | None = None, spec: SpecConfig | None = None) -> MTPSpeculator:
        """A speculator over this session's contexts (spec None: plain decoding). The last one is
        kept while the contexts and the drafter kind stay the same: its caches are reused."""
        target, draft = self._ensure_contexts()
        kind = drafter_kind(spec)
        check_can_draft(self.model, kind)
        last = self._speculator
        if last is not None and last.target is target and self._speculator_kind == kind:
            last.configure(spec or SpecConfig())
            if sampling is not None:
                last.sampling = sampling
            return last
        if last is not None and last.target is target:
            last.stash()  # its text stays reachable when that kind comes back
        drafter = make_drafter(kind, self.model, draft)
        self._speculator = MTPSpeculator(target, drafter, sampling, spec or SpecConfig())
        self._speculator.cache = self.prompt_cache
        self._speculator_kind = kind
        return self._speculator

    # ---- saved texts on disk -----------------------------------------------------------------

    def _model_facts(self) -> dict[str, Any]:
        m = self.model
        return {
            "file": m.path.name,
            "size": m.path.stat().st_size,
            "architecture": m.architecture,
            "n_vocab": m.n_vocab,
            "n_embd": m.n_embd,
            "n_layer": m.n_layer,
            "mtp": m.mtp_loaded,
        }

    def save_state(self, path: str | os.PathLike[str]) -> Path:
        """Write the cache of the last generation's text (prompt and output) to a file, so that a
        process started later resumes that conversation without reading it again
        (load_state). Returns the path."""
        with self.lock:
            spec = self._speculator
            if spec is None or spec.target is not self._target:
                raise UnsupportedError("nothing to save: this session has generated nothing yet")
            return write_text(path, spec.save(), self._model_facts())

    def load_state(self, path: str | os.PathLike[str]) -> int:
        """Read a file from save_state() into this session's prompt cache: the next prompt
        that shares its text (with the same kind of drafter) decodes only the rest. The file
        must come from the same model file. Returns the positions it holds."""
        with self.lock:
            self._ensure_contexts()
            text = read_text(path, self._model_facts(), self.n_ctx)
            if self.prompt_cache.max_bytes < text.nbytes:
                raise ValueError(
                    f"{path} holds {text.nbytes >> 20} MB of cache; this session keeps at most "
                    f"{self.prompt_cache.max_bytes >> 20} MB (Session(cache_mb=...))"
                )
            self.prompt_cache.put(text, self.model.is_recurrent)
            return text.n_past

    # ---- the model's tokenizer and facts (answered by session.model) ----------------------------

    def tokenize(self, text: str | bytes, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int], *, render_special: bool = False) -> str:
        return self.model.detokenize(tokens, render_special=render_special)

    def detokenize_bytes(self, tokens: Sequence[int], *, render_special: bool = False) -> bytes:
        return self.model.detokenize_bytes(tokens, render_special=render_special)

    def token_bytes(self, token: int, *, render_special: bool = False) -> bytes:
        return self.model.token_bytes(token, render_special=render_special)

    def meta(self, key: str) -> str | None:
        return self.model.meta(key)

    def chat_template(self, name: str | None = None) -> str | None:
        return self.model.chat_template(name)

    def apply_chat_template(
        self, messages: Sequence[dict[str, Any]], *, add_assistant: bool = True, template: str | None = None
    ) -> str:
        return self.model.apply_chat_template(messages, add_assistant=add_assistant, template=template)

    path = _from_model("path", Path)
    architecture = _from_model("architecture", str)
    description = _from_model("description", str)
    n_vocab = _from_model("n_vocab", int)
    n_embd = _from_model("n_embd", int)
    n_layer = _from_model("n_layer", int)
    n_mtp_layers = _from_model("n_mtp_layers", int)
    mtp_loaded = _from_model("mtp_loaded", bool)
    n_ctx_train = _from_model("n_ctx_train", int)
    n_swa = _from_model("n_swa", int)
    is_recurrent = _from_model("is_recurrent", bool)
    is_hybrid = _from_model("is_hybrid", bool)
    supports_rollback = _from_model("supports_rollback", bool)
    bos = _from_model("bos", int)
    eos = _from_model("eos", int)
    eot = _from_model("eot", int)
    add_bos = _from_model("add_bos", bool)
    n_params = _from_model("n_params", int)
    size_bytes = _from_model("size_bytes", int)
    rpc_servers = _from_model("rpc_servers", list)
    failed = _from_model("failed", bool)

    # ---- per-token facts, cached (asked once per emitted token) --------------------------------

    def piece(self, token: int) -> bytes:
        b = self._pieces.get(token)
        if b is None:
            b = self._pieces[token] = self.model.token_bytes(token)
        return b

    def is_eog(self, token: int) -> bool:
        v = self._eog.get(token)
        if v is None:
            v = self._eog[token] = self.model.is_eog(token)
        return v

    # ---- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed or self.model.closed

    def _close_contexts(self) -> None:
        for ctx in (self._draft, self._target):
            if ctx is not None:
                ctx.close()
        self._target = self._draft = None
        self._speculator = None
        self.prompt_cache.clear()  # saved texts are only good for contexts like these

    def close(self) -> None:
        """Free the contexts (and the model, when the session loaded it)."""
        with self.lock:
            self._close_contexts()
            self._closed = True
            if self.owns_model:
                self.model.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.model.path.name!r}, n_ctx={self.n_ctx}, closed={self.closed})"


def as_session(model: Session | Model | str | os.PathLike[str] | None) -> tuple[Session, bool]:
    """The session to generate with, and whether the caller made it (and closes it after).

    A Session is used as is; a Model gets a session of its own for this call; a path or
    name is loaded once and kept (the last PATH_CACHE_SIZE of them); None is the default
    model's shared session."""
    if isinstance(model, Session):
        return model, False
    if isinstance(model, Model):
        return Session(model), True
    return session_for_path(model), False


#: Sessions of models given by path or name, most recent last. One that falls out is
#: only dropped: it is freed once no stream still holds it.
PATH_CACHE_SIZE = 2
_by_path: OrderedDict[tuple[Any, ...], Session] = OrderedDict()


def session_for_path(path: str | os.PathLike[str] | None) -> Session:
    """The shared session of a GGUF path or model name (None: the default model), loaded on
    first use; a file changed on disk since is loaded again."""
    file = default_model.resolve(path)
    try:
        st = file.stat()
        key = (str(file.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return Session(file)  # Session raises the clear "not found" error
    s = _by_path.get(key)
    if s is None or s.closed:
        s = _by_path[key] = Session(file)
        while len(_by_path) > PATH_CACHE_SIZE:
            _by_path.popitem(last=False)
    _by_path.move_to_end(key)
    return s


def default_session() -> Session:
    """The shared session of the default model, loaded on first use."""
    return session_for_path(None)
