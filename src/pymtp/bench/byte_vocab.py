"""A byte-level GPT-2 (``gpt2`` BPE) vocabulary for synthetic GGUFs: the 256 byte tokens, a few
dozen merges of common pairs and two control tokens, so any UTF-8 text round-trips.

The bench's echo models (``pymtp.bench.echo``) and the test suite's random-weight fixtures
write it with the ``gguf`` package.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["add_byte_bpe_vocab", "byte_vocab", "bytes_to_unicode"]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_B2U = bytes_to_unicode()

# Merges of common pairs (bytes; the space leads a word as in GPT-2's pre-tokenizer).
_MERGES: tuple[tuple[str, str], ...] = (
    (" ", " "),
    ("  ", "  "),
    ("\n", " "),
    ("\n", "    "),
    ("\n", "\n"),
    (" ", "t"),
    (" ", "a"),
    ("h", "e"),
    ("i", "n"),
    ("r", "e"),
    ("o", "n"),
    (" t", "he"),
    ("e", "r"),
    (" ", "s"),
    ("a", "t"),
    (" ", "w"),
    (" ", "o"),
    ("e", "n"),
    (" ", "c"),
    ("i", "t"),
    ("i", "s"),
    ("a", "n"),
    ("o", "r"),
    ("e", "s"),
    (" ", "b"),
    ("e", "d"),
    (" ", "f"),
    ("in", "g"),
    (" ", "p"),
    ("o", "u"),
    (" a", "n"),
    (" ", "("),
    (")", ":"),
    ("d", "e"),
    ("de", "f"),
    (" ", "i"),
    (" ", "x"),
    ("re", "t"),
    ("u", "r"),
    ("ur", "n"),
    ("ret", "urn"),
    (" ", "return"),
    ("s", "e"),
    ("l", "f"),
    ("se", "lf"),
    (" ", "="),
)
_SPECIALS = ("<|bos|>", "<|eos|>")


def byte_vocab(
    merges: Iterable[tuple[str, str]] = _MERGES, specials: Sequence[str] = _SPECIALS
) -> tuple[list[str], list[str], list[int]]:
    """Tokens, merges and token types of a byte-level GPT-2 vocabulary.

    ``merges`` are pairs of plain strings (converted to GPT-2 byte form); each
    merged string becomes a token after the 256 byte tokens; ``specials`` follow
    as control tokens (type 3)."""
    tokens = [_B2U[b] for b in range(256)]
    seen = set(tokens)
    merge_lines = []
    for a, b in merges:
        ua = "".join(_B2U[x] for x in a.encode("utf-8"))
        ub = "".join(_B2U[x] for x in b.encode("utf-8"))
        if ua not in seen or ub not in seen:
            raise ValueError(f"merge {a!r} + {b!r}: both parts must already be tokens")
        merge_lines.append(f"{ua} {ub}")
        if ua + ub not in seen:
            seen.add(ua + ub)
            tokens.append(ua + ub)
    types = [1] * len(tokens) + [3] * len(specials)
    tokens += list(specials)
    return tokens, merge_lines, types


def add_byte_bpe_vocab(
    writer: Any,
    tokens: Sequence[str],
    merges: Sequence[str],
    token_types: Sequence[int] | None = None,
    *,
    bos: int | None = None,
    eos: int | None = None,
    eot: int | None = None,
    pad: int | None = None,
    add_bos: bool = True,
    pre: str = "gpt-2",
    chat_template: str | None = None,
) -> None:
    """Write a ``gpt2`` (byte-level BPE) tokenizer into a ``gguf.GGUFWriter``.

    ``tokens`` in GPT-2 byte form, ``merges`` as ``"a b"`` lines (at least one:
    the writer drops empty arrays and llama.cpp then refuses the vocab),
    ``token_types`` 1 = normal, 3 = control (default all normal)."""
    from gguf import GGUFValueType

    if not merges:
        raise ValueError("a gpt2 vocabulary needs at least one merge")
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", pre)
    writer.add_key_value("tokenizer.ggml.tokens", list(tokens), GGUFValueType.ARRAY, GGUFValueType.STRING)
    types = list(token_types) if token_types is not None else [1] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError("token_types must match tokens")
    writer.add_key_value("tokenizer.ggml.token_type", types, GGUFValueType.ARRAY, GGUFValueType.INT32)
    writer.add_key_value("tokenizer.ggml.merges", list(merges), GGUFValueType.ARRAY, GGUFValueType.STRING)
    for key, tok in (("bos", bos), ("eos", eos), ("eot", eot), ("padding", pad)):
        if tok is not None:
            writer.add_uint32(f"tokenizer.ggml.{key}_token_id", int(tok))
    writer.add_bool("tokenizer.ggml.add_bos_token", bool(add_bos))
    writer.add_bool("tokenizer.ggml.add_eos_token", False)
    if chat_template is not None:
        writer.add_string("tokenizer.chat_template", chat_template)
