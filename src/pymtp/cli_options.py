"""The generation flags of the ``pymtp`` command, derived from the settings models.

Every field of GenerationConfig, SamplingConfig and SpecConfig (pymtp.config) is a flag of
``generate``, ``chat`` and ``serve``: ``--top-k``, ``--n-draft``, ``--adaptive/--no-adaptive``,
``--drafter {mtp,lookup,hybrid}``..., with its type and default from the field, so a new
field is a new flag. A flag left out is not passed on: the field's own default applies (for
``serve``: the request's value, else that default). The flags make the flat form that
pymtp.request.flat_options reads.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal, Union

from pydantic.fields import FieldInfo

from .config import GenerationConfig, SamplingConfig, SpecConfig
from .request import SPEC_OPTIONS

__all__ = ["add_generation_args", "flag_name", "flat_from_args"]

#: Short forms of the most used flags.
_SHORT = {"max_tokens": "-n", "temperature": "-t"}
#: Help where a field's description is missing or written for Python rather than a terminal.
_HELP = {
    "n_draft": "most tokens drafted per step",
    "p_min": "stop drafting when the head's top probability is below P",
    "adaptive": "choose each draft's length from recent acceptance and measured costs",
    "cooldown": "after a step with no accepted draft token, draft N fewer tokens",
    "cooldown_steps": "steps a --cooldown lasts",
    "logit_bias": "add BIAS to the logit of token id TOKEN (repeatable)",
    "stop": "stop before TEXT (repeatable)",
    "seed": "random seed for sampling (default: random)",
    "drafter": "who drafts: the MTP head, prompt lookup (no model call; works without MTP blocks), or "
    "lookup where it matches and the head elsewhere",
    "heads": "models with several MTP heads: chain (head i drafts token i+1) or first (head 0 drafts all)",
    "draft_vocab": "the MTP head scores only the N most frequent tokens (exact either way; 0 = all)",
    "min_p": "drop tokens below P x the top probability",
}
_METAVAR = {int: "N", float: "X"}


def flag_name(field: str) -> str:
    """The flag of a settings field: max_tokens -> --max-tokens."""
    return "--" + field.replace("_", "-")


def _bias(text: str) -> tuple[int, float]:
    token, sep, bias = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(token), float(bias)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOKEN=BIAS (e.g. 15=-100), got {text!r}") from None


def _scalar(annotation) -> Any:
    """int / float / bool / a Literal of an annotation, Optional stripped."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _add_field(group, name: str, info: FieldInfo, default_note: str, default: Any) -> None:
    flags = [f for f in (_SHORT.get(name), flag_name(name)) if f]
    text = _HELP.get(name) or info.description or name.replace("_", " ")
    kind = _scalar(info.annotation)
    if name == "stop":
        group.add_argument(*flags, action="append", default=None, metavar="TEXT", help=text)
    elif name == "logit_bias":
        group.add_argument(*flags, action="append", type=_bias, default=None, metavar="TOKEN=BIAS", help=text)
    elif kind is bool:
        group.add_argument(
            *flags,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{text} ({default_note}{'on' if default else 'off'})",
        )
    elif typing.get_origin(kind) is Literal:
        group.add_argument(
            *flags, choices=typing.get_args(kind), default=None, help=f"{text} ({default_note}{default})"
        )
    elif kind in (int, float):
        note = "" if default is None else f" ({default_note}{default:g})"
        group.add_argument(*flags, type=kind, default=None, metavar=_METAVAR[kind], help=f"{text}{note}")
    else:  # a new kind of field: give it a flag form here (tests/test_options_reach.py covers every field)
        raise TypeError(f"the settings field {name} ({info.annotation}) has no command-line form")


def add_generation_args(p: argparse.ArgumentParser, *, max_tokens: int | None = None, server: bool = False) -> None:
    """The flags of every settings field, in three groups, and --no-spec. max_tokens: this
    command's own default (chat's 512); server: the flags are defaults of the requests."""
    note = "when a request gives none; default " if server else "default "
    groups = (("output", GenerationConfig), ("sampling", SamplingConfig), ("speculation (drafting)", SpecConfig))
    for title, model in groups:
        g = p.add_argument_group(title)
        for name, info in model.model_fields.items():
            default = max_tokens if name == "max_tokens" and max_tokens is not None else info.default
            _add_field(g, name, info, note, default)
        if model is SpecConfig:
            g.add_argument(
                "--no-spec",
                action="store_true",
                help="plain decoding, no drafting" + (" (requests may still ask for it)" if server else ""),
            )
    if max_tokens is not None:
        p.set_defaults(default_max_tokens=max_tokens)


def flat_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give, in the flat form (flags left out are not there)."""
    fields = (*GenerationConfig.model_fields, *SamplingConfig.model_fields, *SpecConfig.model_fields)
    flat = {name: getattr(args, name) for name in fields if getattr(args, name, None) is not None}
    if "max_tokens" not in flat and getattr(args, "default_max_tokens", None) is not None:
        flat["max_tokens"] = args.default_max_tokens
    if getattr(args, "no_spec", False) or getattr(args, "no_mtp", False):
        flat["speculative"] = False
    return flat


def spec_flags_given(flat: dict[str, Any]) -> list[str]:
    """The speculation flags among flat (for the message when a model cannot draft)."""
    return [flag_name(n) for n in SPEC_OPTIONS if n in flat]
