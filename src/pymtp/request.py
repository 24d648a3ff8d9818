"""One request, resolved once: the options of a generation become a frozen Request.

Every entry point resolves a request here, once: ``pymtp.generate`` / ``stream`` (their
keywords, GenerateOptions), the CLI's flags and the server's request fields (both the flat form:
``speculative`` a bool beside SpecConfig's fields, read by flat_options). resolve() builds the
SamplingConfig, SpecConfig and GenerationConfig (pymtp.config: the one place of every option's
type, bounds and default) and checks what depends on the model (the logit_bias tokens, MTP
blocks for the MTP head, a JSON schema or grammar compiled for its vocabulary). The engine then
takes the Request as it is; it checks only what needs the engine (whether the prompt fits).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from typing_extensions import TypedDict

from .config import GenerationConfig, SamplingConfig, SpecConfig
from .errors import UnsupportedError

if TYPE_CHECKING:
    from .grammar import Constraint
    from .model import Model
    from .sampling import LogitsProcessor, TokenConstraint

__all__ = ["GenerateOptions", "MAX_TOP_LOGPROBS", "OptionError", "Request", "flat_options", "resolve"]

#: The most alternatives top_logprobs may ask for per token.
MAX_TOP_LOGPROBS = 20


class GenerateOptions(TypedDict, total=False):
    """The keywords of ``pymtp.generate()`` and ``pymtp.stream()`` (``chat()`` and ``chat_stream()``
    pass them on). Each is optional: one left out takes its field's default in
    [SamplingConfig][pymtp.config.SamplingConfig] / [GenerationConfig][pymtp.config.GenerationConfig]
    (where the bounds are too). None is the same as left out for stop, logit_bias, seed and the
    constraint options; speculative=None is plain decoding."""

    max_tokens: int
    """Most tokens to generate (default 256)."""
    stop: str | Sequence[str] | None
    """End the text before the first of these strings (not included in it)."""
    ignore_eos: bool
    """Keep going past end-of-generation tokens."""
    temperature: float
    """0 (the default) is greedy; higher is more random, up to 100."""
    top_k: int
    """Keep the k likeliest tokens (0 = all)."""
    top_p: float
    """Nucleus sampling: the smallest set of tokens with this much probability."""
    min_p: float
    """Drop tokens below min_p times the top probability."""
    repetition_penalty: float
    """Divide a recent token's positive logit by it, multiply a negative one (1 = off)."""
    repetition_window: int
    """The recent tokens the three penalties count (default 64)."""
    presence_penalty: float
    """OpenAI's: subtracted once from the logit of a token in the window."""
    frequency_penalty: float
    """OpenAI's: subtracted per occurrence in the window."""
    logit_bias: Mapping[int, float] | None
    """{token id: bias} added to the logits first (bias in [-100, 100])."""
    seed: int | None
    """Seed of the sampling RNG (default: a random one). A list of prompts seeds each alike."""
    sampling_rule: Literal["auto", "coupled", "rejection"]
    """coupled: a seed gives the same tokens speculative or not; rejection: speculative sampling,
    the most acceptance; auto (the default): coupled when a seed is given."""
    speculative: bool | SpecConfig | Mapping[str, Any] | None
    """True (the default): MTP drafting with the default [SpecConfig][pymtp.config.SpecConfig];
    False: plain decoding; a SpecConfig or a dict of its fields."""
    constraint: TokenConstraint
    """Any pymtp.sampling.TokenConstraint (e.g. ``pymtp.grammar.Constraint(...).matcher()``):
    masks every token; speculation stays exact. One generation's state: not for a list of prompts."""
    json_schema: dict | str
    """The output follows this JSON schema (pymtp.grammar; ``pip install 'pymtp-llm[grammar]'``)."""
    grammar: str
    """The output follows this grammar (llguidance's Lark, or GBNF)."""
    logits_processor: LogitsProcessor
    """``f(token_ids, logits) -> logits``, on every row, the target's and the head's alike (one
    Python call per row: slower; for rules a mask cannot express)."""
    logprobs: bool
    """result.logprobs: log p of each token under the sampling settings."""
    top_logprobs: int
    """result.top_logprobs: per token its row's n likeliest (token, log p), n in 0..20 (implies logprobs)."""


#: The option names of each settings model, and the rest of GenerateOptions.
SAMPLING_OPTIONS = tuple(SamplingConfig.model_fields)
LIMIT_OPTIONS = tuple(GenerationConfig.model_fields)
SPEC_OPTIONS = tuple(SpecConfig.model_fields)
OPTIONS = tuple(GenerateOptions.__annotations__)
_CONSTRAINT_OPTIONS = ("constraint", "json_schema", "grammar")
#: Options whose None means "left out" in generate()'s keywords (elsewhere None is a bad value).
_NONE_IS_DEFAULT = ("stop", "logit_bias", "seed", *_CONSTRAINT_OPTIONS, "logits_processor")


class OptionError(ValueError):
    """An option value that is out of its range or that the model cannot take; ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


class UnsupportedOption(OptionError, UnsupportedError):
    """An option the model cannot do at all (MTP drafting without MTP blocks)."""


@dataclass(frozen=True)
class Request:
    """A request resolved: the frozen settings and the output options the engine takes.

    grammar: a compiled pymtp.grammar.Constraint (json_schema=, grammar=, the server's
    response_format and forced tool calls): each generation gets a matcher of its own.
    constraint: the caller's own TokenConstraint (one generation's state)."""

    sampling: SamplingConfig
    spec: SpecConfig | None  # None: plain decoding
    limits: GenerationConfig
    logprobs: bool = False
    top_logprobs: int = 0
    logits_processor: LogitsProcessor | None = None
    grammar: Constraint | None = None
    constraint: TokenConstraint | None = None

    @property
    def speculative(self) -> bool:
        return self.spec is not None

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs or self.top_logprobs > 0

    @property
    def constrained(self) -> bool:
        return self.grammar is not None or self.constraint is not None

    def new_constraint(self) -> TokenConstraint | None:
        """The constraint of one generation: a fresh matcher of the grammar, else the caller's own."""
        return self.grammar.matcher() if self.grammar is not None else self.constraint


def check_names(options: Mapping[str, Any], where: str) -> None:
    """A TypeError like Python's for a keyword that is not an option (with the closest name)."""
    for name in options:
        if name not in OPTIONS:
            close = difflib.get_close_matches(name, OPTIONS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if name in SPEC_OPTIONS:
                hint = f"; it is a SpecConfig setting: speculative={{{name!r}: ...}}"
            raise TypeError(f"{where} got an unexpected keyword argument {name!r}{hint}")


def resolve(options: Mapping[str, Any], model: Model, *, where: str = "generate()") -> Request:
    """The Request of options (GenerateOptions) for model.

    Raises TypeError for an unknown option, pydantic's ValidationError for a value out of
    its field's bounds (naming the field), OptionError (``option``: the name) for one the
    model cannot take, UnsupportedOption (an UnsupportedError) for MTP drafting on a model
    without MTP blocks."""
    check_names(options, where)
    given = {k: v for k, v in options.items() if not (v is None and k in _NONE_IS_DEFAULT)}
    sampling = SamplingConfig(**{k: given[k] for k in SAMPLING_OPTIONS if k in given})
    limits = GenerationConfig(**{k: given[k] for k in LIMIT_OPTIONS if k in given})
    spec = _spec(given.get("speculative", True))
    _check_for_model(sampling, spec, model)
    top = given.get("top_logprobs", 0)
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise OptionError("top_logprobs", f"top_logprobs must be an int in [0, {MAX_TOP_LOGPROBS}], got {top!r}")
    logprobs = given.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise OptionError("logprobs", f"logprobs must be True or False, got {logprobs!r}")
    processor = given.get("logits_processor")
    if processor is not None and not callable(processor):
        raise OptionError("logits_processor", "logits_processor must be callable: f(token_ids, logits) -> logits")
    grammar, constraint = _constraints(given, model)
    return Request(
        sampling,
        spec,
        limits,
        logprobs=logprobs or top > 0,
        top_logprobs=top,
        logits_processor=processor,
        grammar=grammar,
        constraint=constraint,
    )


def _spec(speculative) -> SpecConfig | None:
    if speculative is True:
        return SpecConfig()
    if speculative is False or speculative is None:
        return None
    if isinstance(speculative, SpecConfig):
        return speculative
    if isinstance(speculative, Mapping):
        return SpecConfig(**speculative)
    raise TypeError(f"speculative must be True, False, a SpecConfig or a dict, got {type(speculative).__name__}")


def _check_for_model(sampling: SamplingConfig, spec: SpecConfig | None, model: Model) -> None:
    n_vocab = model.n_vocab
    for token, _ in sampling.logit_bias:
        if token >= n_vocab:
            raise OptionError("logit_bias", f"logit_bias: token {token} is outside the vocabulary (0..{n_vocab - 1})")
    if spec is not None and spec.drafter in ("mtp", "hybrid") and not model.mtp_loaded:
        raise UnsupportedOption(
            "speculative",
            f"{model.path.name} has no MTP blocks (architecture {model.architecture}, n_mtp_layers="
            f"{model.n_mtp_layers}, loaded={model.mtp_loaded}): speculative decoding needs them. Run it with "
            "speculative=False, or draft by prompt lookup: speculative={'drafter': 'lookup'}.",
        )


def _constraints(given: Mapping[str, Any], model: Model):
    named = [n for n in _CONSTRAINT_OPTIONS if n in given]
    if len(named) > 1:
        raise OptionError(named[1], f"give at most one of constraint=, json_schema=, grammar= (got {', '.join(named)})")
    if "constraint" in given:
        return None, given["constraint"]
    if not named:
        return None, None
    from .grammar import Constraint

    return Constraint(model, **{named[0]: given[named[0]]}), None


def flat_options(given: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """generate()'s options from the flat form of the CLI and the server, over flat defaults.

    The flat form has SpecConfig's fields beside the other options and ``speculative`` a
    bool: the request's (else the default's, else True) turns drafting on or off, the fields
    (the request's over the default's) configure it. None is the same as left out."""
    merged = {k: v for k, v in (defaults or {}).items() if v is not None}
    merged.update((k, v) for k, v in given.items() if v is not None)
    fields = {k: merged.pop(k) for k in SPEC_OPTIONS if k in merged}
    on = merged.get("speculative", True)
    if not isinstance(on, bool):
        raise OptionError("speculative", f"speculative must be true or false, got {on!r}")
    merged["speculative"] = (fields or True) if on else False
    return merged
