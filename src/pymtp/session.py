"""Session: a model with the contexts it generates with, their options and its caches.

``pymtp.load()`` returns one; ``generate``, ``stream``, ``chat``, the server and the bench
all run on one. The contexts are made on first use and reused by every generation
after; a generation holds ``session.lock`` while it touches them.

A Session also answers the model's own questions (``tokenize``, ``n_vocab``,
``apply_chat_template``...) by passing them to ``session.model``.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import default_model
from .config import SamplingConfig, SpecConfig
from .errors import UnsupportedError
from .model import DraftContext, Model, TargetContext
from .rollback import n_rs_seq_for
from .speculator import MTPSpeculator

DEFAULT_N_CTX = 4096


class Session:
    """The contexts one model generates with, made once and reused.

    model: a loaded Model (the session borrows it) or a GGUF path / model name as
    ``pymtp.load`` takes (the session loads it and closes it with itself).
    n_ctx: context length (default: the model's training context, at most 4096).
    n_threads: CPU threads for decoding (default: llama.cpp's choice).
    """

    def __init__(self, model: Model | str | os.PathLike | None, *, n_ctx: int | None = None,
                 n_threads: int | None = None, mtp: bool = True, n_gpu_layers: int = -1) -> None:
        if n_ctx is not None and (not isinstance(n_ctx, int) or isinstance(n_ctx, bool) or n_ctx < 8):
            raise ValueError(f"n_ctx must be an int >= 8, got {n_ctx!r}")
        if n_threads is not None and (not isinstance(n_threads, int) or isinstance(n_threads, bool) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive int, got {n_threads!r}")
        self.owns_model = not isinstance(model, Model)
        if self.owns_model:
            model = Model(default_model.resolve(model), mtp=mtp, n_gpu_layers=n_gpu_layers)
        self.model: Model = model
        self.lock = model.lock
        self.n_ctx = n_ctx or min(model.n_ctx_train or DEFAULT_N_CTX, DEFAULT_N_CTX)
        self.n_threads = n_threads
        self.generation = 0            # bumped by every new generation: paused streams notice
        self._target: TargetContext | None = None
        self._draft: DraftContext | None = None
        self._speculator: MTPSpeculator | None = None     # the last one: its caches can be reused
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._closed = False

    # ---- contexts --------------------------------------------------------------------------

    def _ensure_contexts(self) -> tuple[TargetContext, DraftContext | None]:
        """The target and draft contexts, made (again, after a close of either) on demand."""
        if self._closed:
            raise UnsupportedError("this session is closed")
        if self._target is None or self._target.closed or (self._draft is not None and self._draft.closed):
            self._close_contexts()
            self._target = TargetContext(self.model, n_ctx=self.n_ctx, n_batch=512,
                                         n_rs_seq=n_rs_seq_for(self.model), n_threads=self.n_threads)
            self._draft = DraftContext(self._target, n_threads=self.n_threads) if self.model.mtp_loaded else None
        return self._target, self._draft

    @property
    def target(self) -> TargetContext:
        return self._ensure_contexts()[0]

    @property
    def draft(self) -> DraftContext | None:
        return self._ensure_contexts()[1]

    def speculator(self, sampling: SamplingConfig | None = None, spec: SpecConfig | None = None) -> MTPSpeculator:
        """A speculator over this session's contexts (spec None: plain decoding)."""
        target, draft = self._ensure_contexts()
        if spec is not None and draft is None:
            m = self.model
            raise UnsupportedError(
                f"{m.path.name} has no MTP blocks (architecture {m.architecture}, n_mtp_layers={m.n_mtp_layers}, "
                f"loaded={m.mtp_loaded}): speculative decoding needs them. Run it with speculative=False.")
        draft = draft if spec is not None else None
        last = self._speculator
        if last is not None and last.target is target and (last.drafter.ctx if last.drafter else None) is draft:
            # The same contexts and drafting mode: keep the speculator, and with it the
            # text its caches hold (the next start() reuses the shared prefix).
            last.configure(spec or SpecConfig())
            if sampling is not None:
                last.sampling = sampling
            return last
        self._speculator = MTPSpeculator(target, draft, sampling, spec or SpecConfig())
        return self._speculator

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

    def close(self) -> None:
        """Free the contexts (and the model, when the session loaded it)."""
        with self.lock:
            self._close_contexts()
            self._closed = True
            if self.owns_model:
                self.model.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str):
        # Only reached for names a Session lacks: the model's metadata and tokenizer.
        if name.startswith("__") or name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"Session({self.model.path.name!r}, n_ctx={self.n_ctx}, closed={self.closed})"


def as_session(model: Session | Model | str | Path | None) -> tuple[Session, bool]:
    """The session to generate with, and whether the caller made it (and closes it after).

    A Session is used as is; a Model gets a session of its own for this call; a
    path or name is loaded; None is the default model's shared session."""
    if isinstance(model, Session):
        return model, False
    if model is None:
        return default_session(), False
    return Session(model), True


_default: Session | None = None


def default_session() -> Session:
    """The shared session of the default model, loaded on first use."""
    global _default
    if _default is None or _default.closed:
        _default = Session(None)
    return _default
