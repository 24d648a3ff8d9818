"""The bench's models: a GGUF path from a --model value, and the default pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import default_model
from ..errors import PymtpError
from .base import BenchError, log


def _parse_value(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def resolve_model(spec: str) -> Path:
    """A GGUF path from a --model value: a path, ``default`` (the default model, assembled
    on first use), ``tiny`` (the small bundled model), ``deep`` (tiny's deep benchmark
    variant), ``fixture:FAMILY[:key=value,...]`` or ``deep:SPEC`` (the deep variant of another
    spec, e.g. ``deep:fixture:glm4moe``)."""
    if spec in default_model.ALIASES:
        try:
            return default_model.resolve(spec)
        except (FileNotFoundError, PymtpError) as e:
            raise BenchError(f"{e}; or pass --model PATH") from None
    if spec == "deep":
        try:
            from ..testing.deep import deep_variant_path
        except ImportError as e:
            raise BenchError(f"the deep benchmark variant needs pymtp.testing.deep ({e}); pass --model PATH") from None
        try:
            return deep_variant_path()
        except FileNotFoundError as e:
            raise BenchError(f"cannot make the deep variant: {e}. Pass --model PATH") from None
    if spec.startswith("default-v") or spec.startswith("vocab:"):
        from ..testing.vocab import VOCABS, padded_vocab_path

        if spec.startswith("vocab:"):
            n, _, rest = spec[6:].partition(":")
            if not n.isdigit() or not rest:
                raise BenchError(f"--model {spec}: expected vocab:N:SPEC, e.g. vocab:8192:fixture:glm4moe")
            return padded_vocab_path(int(n), resolve_model(rest))
        n_vocab = VOCABS.get(spec[len("default-"):])
        if n_vocab is None:
            raise BenchError(f"--model {spec}: the padded default models are "
                             + ", ".join(f"default-{k}" for k in VOCABS))
        return padded_vocab_path(n_vocab, resolve_model("default"))
    if spec.lower().startswith("echo-") and not Path(spec).expanduser().is_file():
        from ..testing.echo import echo_path, parse_name

        try:
            kw = parse_name(spec)
        except ValueError as e:
            raise BenchError(f"--model {e}") from None
        if kw is None:
            raise BenchError(f"--model {spec}: expected echo-AGREE[-SIZE][-TYPE] (e.g. echo-70, echo-80-1.5b, "
                             "echo-100-q8_0) or a GGUF path")
        return echo_path(kw.pop("agree"), **kw)
    if spec.startswith("deep:"):
        from ..testing.deep import deep_variant_path

        return deep_variant_path(resolve_model(spec[5:]))
    if spec.startswith("fixture:"):
        from ..testing.fixtures import fixture_path

        parts = spec.split(":", 2)
        over = {}
        if len(parts) == 3 and parts[2]:
            for kv in parts[2].split(","):
                k, _, v = kv.partition("=")
                over[k.strip()] = _parse_value(v.strip())
        return fixture_path(parts[1], **over)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise BenchError(f"model file not found: {path}")
    return path


def default_models() -> list[Path]:
    """The deep variant and the default model, those that can be had (clear error if none)."""
    found, errors = [], []
    for spec in ("deep", "default"):
        try:
            found.append(resolve_model(spec))
        except BenchError as e:
            errors.append(f"{spec}: {e}")
    if not found:
        raise BenchError("no default benchmark model is available:\n  " + "\n  ".join(errors))
    for e in errors:
        log(f"bench: skipping {e}")
    return found
