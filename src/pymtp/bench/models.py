"""The bench's models: a GGUF path from a --model value, and the default pair."""

from __future__ import annotations

from pathlib import Path

from .. import default_model
from ..errors import PymtpError
from .base import BenchError, log


def resolve_model(spec: str) -> Path:
    """A GGUF path from a --model value: a path, ``default`` (the default model, assembled
    on first use), ``tiny`` (the small bundled model), ``deep`` (tiny's deep benchmark
    variant), ``deep:SPEC`` (the deep variant of another spec, e.g. ``deep:model.gguf``),
    ``default-v151k`` / ``default-v248k`` / ``vocab:N:SPEC`` (padded vocabularies) or an echo
    model ``echo-AGREE[-SIZE][-TYPE]``."""
    if spec in default_model.ALIASES:
        try:
            return default_model.resolve(spec)
        except (FileNotFoundError, PymtpError) as e:
            raise BenchError(f"{e}; or pass --model PATH") from None
    if spec == "deep":
        from .deep import deep_variant_path

        try:
            return deep_variant_path()
        except FileNotFoundError as e:
            raise BenchError(f"cannot make the deep variant: {e}. Pass --model PATH") from None
    if spec.startswith("default-v") or spec.startswith("vocab:"):
        from .vocab import VOCABS, padded_vocab_path

        if spec.startswith("vocab:"):
            n, _, rest = spec[6:].partition(":")
            if not n.isdigit() or not rest:
                raise BenchError(f"--model {spec}: expected vocab:N:SPEC, e.g. vocab:8192:model.gguf")
            return padded_vocab_path(int(n), resolve_model(rest))
        n_vocab = VOCABS.get(spec[len("default-") :])
        if n_vocab is None:
            raise BenchError(
                f"--model {spec}: the padded default models are " + ", ".join(f"default-{k}" for k in VOCABS)
            )
        return padded_vocab_path(n_vocab, resolve_model("default"))
    if spec.lower().startswith("echo-") and not Path(spec).expanduser().is_file():
        from .echo import echo_path, parse_name

        try:
            kw = parse_name(spec)
        except ValueError as e:
            raise BenchError(f"--model {e}") from None
        if kw is None:
            raise BenchError(
                f"--model {spec}: expected echo-AGREE[-SIZE][-TYPE] (e.g. echo-70, echo-80-1.5b, "
                "echo-100-q8_0) or a GGUF path"
            )
        return echo_path(kw.pop("agree"), **kw)
    if spec.startswith("deep:"):
        from .deep import deep_variant_path

        return deep_variant_path(resolve_model(spec[5:]))
    if spec.startswith("fixture:"):
        # The test suite's random-weight models are not part of the installed package.
        raise BenchError(
            f"--model {spec}: fixture models live in a source checkout's tests/pymtp_testing; "
            "write one with `PYTHONPATH=tests python -m pymtp_testing.fixtures FAMILY` and pass its path"
        )
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
    for msg in errors:
        log(f"bench: skipping {msg}")
    return found
