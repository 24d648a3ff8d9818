"""pymtp.grammar: JSON schemas and grammars compiled to token masks, for constrained decoding.

    c = Constraint(model, json_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    m = c.matcher()                 # one per generation: a pymtp.sampling.TokenConstraint
    m.fill_mask(words)              # packed bitmask of the tokens allowed next
    m.accept(token); m.rollback(1); m.is_terminated()

Library: llguidance (PyPI ``llguidance``; extra ``pip install 'pymtp-llm[grammar]'``).
Decision (issue #15), measured with ``python tools/measure_grammar.py --repeats 300`` on
2 shared AMD EPYC cores, a 4-property nested schema (strings, integer, enum array, nested
object), masks filled at each of the 44 positions of a matching document:

    vocabulary                         llguidance 1.9.1          xgrammar 0.2.8
    49,152 (SmolLM2)   tokenizer info  120 ms                    23 ms
                       schema compile  0.55 ms                   4.6 ms
                       mask fill       0.008 ms median, 0.017    0.001 ms median, 0.002
                                       mean, 0.25 max            mean, 0.06 max
    151,552 (synth.)   tokenizer info  607 ms                    81 ms
                       schema compile  0.68 ms                   28 ms
                       mask fill       0.016 median, 0.026       0.002 median, 0.011
                                       mean, 0.30 max            mean, 0.09 max
    accept + rollback(1) + accept: about 0.002 ms for both.

Both fill a mask in microseconds, well under one decode (milliseconds), and both roll back
by n tokens. llguidance is chosen because:
* it has no dependencies (a 3 MB wheel); xgrammar 0.2.8 installs torch, transformers,
  triton and apache-tvm-ffi and imports transformers at import time;
* it compiles lazily: a schema costs under 1 ms at any vocabulary size (xgrammar's compile
  grows with the vocabulary: 28 ms at 151k), which matters for a server that gets a new
  schema per request; its per-model cost (the token trie, 0.1-0.6 s) is paid once, cached;
* it takes Lark (its own extended syntax, special tokens as ``<|name|>``), GBNF (converted
  to Lark), regexes and JSON schemas, and it is the library llama.cpp's own grammar option
  (LLAMA_LLGUIDANCE) uses;
* its masks are the packed int32 layout below, filled straight into a numpy buffer.

Bitmask layout (what pymtp's native sampler consumes): ``ceil(n_vocab / 32)`` 32-bit words,
int32 or uint32, C-contiguous; bit ``j % 32`` (least significant first) of word ``j // 32``
is set when token ``j`` is allowed. Bits past n_vocab are 0.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Constraint", "Matcher", "Vocabulary", "vocabulary", "JSON_DEFAULTS", "mask_words", "allowed_tokens"]

#: JSON compile options (llguidance's JsonCompileOptions) unless json_options= says otherwise:
#: whitespace between tokens, at most 8 characters at a time, so a small model cannot spin
#: in whitespace forever, while it can still indent.
JSON_DEFAULTS: dict[str, Any] = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,8}"}


def _llg():
    try:
        import llguidance
    except ImportError:
        raise ImportError("constrained decoding needs llguidance: pip install 'pymtp-llm[grammar]'") from None
    return llguidance


def mask_words(n_vocab: int) -> int:
    """Words of a bitmask for n_vocab tokens."""
    return (n_vocab + 31) // 32


def allowed_tokens(mask: np.ndarray, n_vocab: int) -> np.ndarray:
    """The token ids a packed bitmask allows, ascending (vectorized; for tests and debugging)."""
    bits = np.unpackbits(np.ascontiguousarray(mask).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:n_vocab])


# ---- vocabulary --------------------------------------------------------------------------------


class Vocabulary:
    """A vocabulary as llguidance sees it: token bytes (special tokens as b"\\xff" + their
    text, so grammars can name them as ``<|im_end|>``), the end-of-generation ids (allowed
    when the grammar is complete), and a tokenizer function (bytes -> ids)."""

    def __init__(self, tokens: Sequence[bytes], eos: Sequence[int], encode: Callable[[bytes], list[int]]) -> None:
        llg = _llg()
        eos = [int(t) for t in eos]
        if not eos:
            raise ValueError("a vocabulary needs at least one end-of-generation token")
        self.tokens = list(tokens)
        self.n_vocab = n_vocab = len(self.tokens)
        self.eos = eos
        if not all(0 <= t < n_vocab for t in eos):
            raise ValueError(f"end-of-generation ids {eos} are not all in the vocabulary (0..{n_vocab - 1})")

        class _Wrapper:
            eos_token_id, bos_token_id = eos[0], None
            special_token_ids: list[int] = []

            def __init__(self, toks):
                self.tokens = toks

            def __call__(self, data):
                ids = [int(t) for t in encode(data.encode() if isinstance(data, str) else bytes(data))]
                if ids and not 0 <= min(ids) <= max(ids) < n_vocab:
                    raise ValueError(f"the tokenizer returned ids outside the vocabulary (0..{n_vocab - 1})")
                return ids

        self.llg = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapper(self.tokens)), eos_token=eos)

    @classmethod
    def from_model(cls, model) -> Vocabulary:
        """The vocabulary of a pymtp Model (one pass over its tokens: about 0.1 s at 49k)."""
        n = model.n_vocab
        tokens, eog = [], []
        for i in range(n):
            plain = model.token_bytes(i)
            if not plain:
                special = model.token_bytes(i, render_special=True)
                plain = b"\xff" + special if special else b""
            tokens.append(plain)
            if model.is_eog(i):
                eog.append(i)
        # EOS first: llguidance's primary end token.
        eos = [t for t in (model.eos, model.eot) if t is not None and t in eog]
        eos += [t for t in eog if t not in eos]
        ref = weakref.ref(model)

        def encode(data: bytes) -> list[int]:
            m = ref()
            if m is None:
                raise RuntimeError("the model of this vocabulary was freed")
            return m.tokenize(data, add_special=False, parse_special=False)

        return cls(tokens, eos, encode)


_vocab_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_vocab_lock = threading.Lock()


def _as_model(model):
    inner = getattr(model, "model", None)  # a Session
    return inner if inner is not None and hasattr(inner, "token_bytes") else model


def vocabulary(model) -> Vocabulary:
    """The Vocabulary of a Model or Session (or a Vocabulary itself), made once per model."""
    if isinstance(model, Vocabulary):
        return model
    model = _as_model(model)
    with _vocab_lock:
        v = _vocab_cache.get(model)
        if v is None:
            v = _vocab_cache[model] = Vocabulary.from_model(model)
        return v


# ---- constraints ---------------------------------------------------------------------------------


def _schema_text(schema: dict | str | bool) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema is not valid JSON: {e}") from None
    if isinstance(schema, bool):
        schema = {} if schema else {"not": {}}
    if not isinstance(schema, dict):
        raise ValueError(f"json_schema must be a JSON object (a dict or its text), got {type(schema).__name__}")
    try:
        return json.dumps(schema)
    except (TypeError, ValueError) as e:
        raise ValueError(f"json_schema cannot be written as JSON: {e}") from None


def _grammar_format(text: str, fmt: str) -> str:
    if fmt == "auto":
        return "gbnf" if "::=" in text else "lark"
    if fmt not in ("lark", "gbnf", "regex"):
        raise ValueError(f"grammar_format must be 'auto', 'lark', 'gbnf' or 'regex', got {fmt!r}")
    return fmt


class Constraint:
    """A JSON schema, grammar or regex, compiled and checked before any decoding.

    Give exactly one of:
    * ``json_schema``: a JSON schema (dict or JSON text);
    * ``json_object=True``: any JSON object (OpenAI's ``response_format: json_object``);
    * ``grammar``: a grammar in llguidance's Lark syntax or llama.cpp's GBNF
      (``grammar_format="auto"`` picks GBNF when the text has ``::=``; or "lark", "gbnf");
    * ``regex``: a regular expression the whole output matches.

    model: a Model, Session or Vocabulary. With one, the grammar is also checked against its
    vocabulary now, and matcher() needs no argument. json_options: llguidance JSON options
    over JSON_DEFAULTS (e.g. ``{"whitespace_flexible": False}`` for compact JSON).
    Raises ValueError naming the problem (an unknown type, a bad $ref, a Lark syntax error...).
    """

    def __init__(
        self,
        model=None,
        *,
        json_schema: dict | str | bool | None = None,
        grammar: str | None = None,
        regex: str | None = None,
        json_object: bool = False,
        grammar_format: str = "auto",
        json_options: dict | None = None,
    ) -> None:
        llg = _llg()
        given = [
            k
            for k, v in (
                ("json_schema", json_schema),
                ("grammar", grammar),
                ("regex", regex),
                ("json_object", json_object or None),
            )
            if v is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of json_schema=, grammar=, regex= or json_object=True"
                + (f" (got {', '.join(given)})" if given else "")
            )
        self.kind = given[0]
        if json_object:
            json_schema = {"type": "object"}
        if json_schema is not None:
            self.source = _schema_text(json_schema)
            opts = {**JSON_DEFAULTS, **(json_options or {})}
            try:
                self.grammar = llg.LLMatcher.grammar_from_json_schema(self.source, overrides=opts)
            except ValueError as e:
                raise ValueError(f"invalid json_schema: {e}") from None
        else:
            text = grammar if grammar is not None else regex
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{self.kind} must be a non-empty string")
            self.source = text
            fmt = "regex" if regex is not None else _grammar_format(text, grammar_format)
            self.kind = "regex" if regex is not None else fmt
            try:
                self.grammar = llg.grammar_from(fmt, text)
            except ValueError as e:
                raise ValueError(f"invalid {fmt} grammar: {e}") from None
        self._check(None)
        self._templates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self.vocab = vocabulary(model) if model is not None else None
        if self.vocab is not None:
            self._template(self.vocab)

    def _check(self, vocab: Vocabulary | None) -> None:
        llg = _llg()
        is_error, msgs = llg.LLMatcher.validate_grammar_with_warnings(self.grammar, vocab.llg if vocab else None)
        if is_error:
            what = "json_schema" if self.kind in ("json_schema", "json_object") else f"{self.kind} grammar"
            raise ValueError(f"invalid {what}: {msgs[0].strip() if msgs else 'rejected by llguidance'}")

    def _template(self, vocab: Vocabulary):
        with self._lock:
            t = self._templates.get(vocab)
            if t is None:
                self._check(vocab)
                t = _llg().LLMatcher(vocab.llg, self.grammar, log_level=0)
                if t.is_error():
                    raise ValueError(f"invalid {self.kind}: {t.get_error()}")
                self._templates[vocab] = t
            return t

    def matcher(self, model=None) -> Matcher:
        """A fresh matcher at the start of the output (one per generation)."""
        vocab = vocabulary(model) if model is not None else self.vocab
        if vocab is None:
            raise ValueError("this Constraint has no model: give matcher(model)")
        return Matcher(self._template(vocab).deep_copy(), vocab)

    def __repr__(self) -> str:
        src = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        return f"Constraint({self.kind}: {src!r})"


class Matcher:
    """The state of one constrained output: a pymtp.sampling.TokenConstraint.

    fill_mask writes the allowed tokens; accept advances by a token (False, state unchanged,
    for a token the grammar forbids); rollback(n) undoes the last n accepted tokens (any n up
    to the number accepted); is_terminated: nothing but the end may follow (the grammar is
    complete and cannot go on, or an end-of-generation token was accepted)."""

    def __init__(self, matcher, vocab: Vocabulary) -> None:
        self._m = matcher
        self.vocab = vocab
        self.n_vocab = vocab.n_vocab
        self.n_accepted = 0
        self._eos = frozenset(vocab.eos)
        self._ended = -1  # n_accepted when an end token was accepted (nothing may follow it)
        self._virtual_end = False  # that end token was counted here only (see accept)

    def fill_mask(self, out: np.ndarray) -> None:
        """Write the mask of allowed next tokens into out (int32/uint32, at least
        ceil(n_vocab / 32) words; words past those are left alone)."""
        words = mask_words(self.n_vocab)
        if not isinstance(out, np.ndarray) or out.dtype not in (np.int32, np.uint32) or out.ndim != 1:
            raise TypeError("fill_mask needs a 1-D int32 or uint32 numpy array")
        if out.size < words or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"fill_mask needs a writeable C-contiguous array of at least {words} words")
        if self._m.is_error():
            raise RuntimeError(f"the grammar matcher failed: {self._m.get_error()}")
        self._m.unsafe_compute_mask_ptr(out.ctypes.data, words * 4)

    def mask(self) -> np.ndarray:
        """The mask of allowed next tokens, as a new int32 array."""
        out = np.zeros(mask_words(self.n_vocab), dtype=np.int32)
        self.fill_mask(out)
        return out

    def allows(self, token: int) -> bool:
        """Whether accept(token) would succeed (as the mask says, without filling one)."""
        if not 0 <= token < self.n_vocab or self._m.is_error():
            return False
        if self._m.validate_tokens([int(token)]) == 1:
            return True
        # llguidance's validate_tokens refuses an end token once the grammar can go no further
        # (stopped); the mask allows it there, and consuming it succeeds.
        return token in self._eos and self._m.is_accepting() and self.n_accepted > self._ended

    def accept(self, token: int) -> bool:
        if not self.allows(token):
            return False
        if token in self._eos and self._m.is_stopped():
            # The grammar is already final: llguidance takes the end token without recording it
            # (a rollback would not count it), so it is counted here only.
            self.n_accepted += 1
            self._ended = self.n_accepted
            self._virtual_end = True
            return True
        if not self._m.consume_token(int(token)):
            raise RuntimeError(f"the grammar matcher failed on token {token}: {self._m.get_error()}")
        self.n_accepted += 1
        if token in self._eos and self._ended < 0:
            self._ended = self.n_accepted
        return True

    def rollback(self, n: int) -> None:
        if not 0 <= n <= self.n_accepted:
            raise ValueError(f"cannot roll back {n} tokens: {self.n_accepted} accepted")
        real = n
        if n and self._virtual_end:  # the uncounted end token is the last one
            real, self._virtual_end = n - 1, False
        if real and not self._m.rollback(real):
            raise RuntimeError(f"the grammar matcher could not roll back {real} tokens: {self._m.get_error()}")
        self.n_accepted -= n
        if self._ended > self.n_accepted:
            self._ended = -1

    def is_terminated(self) -> bool:
        return self._m.is_stopped()

    def is_accepting(self) -> bool:
        """The output so far is complete (it may stop here), though it may also go on."""
        return self._m.is_accepting()

    def reset(self) -> None:
        self.rollback(self.n_accepted)
