"""pymtp.grammar: JSON schemas and grammars to token masks (llguidance) on the default model's
vocabulary (SmolLM2, 49,152 tokens) and on a small hand-made one.

* masks allow exactly the tokens that keep the output a valid prefix (checked against a
  brute-force answer over the whole vocabulary, and token by token by hand);
* rollback restores the masks and the state;
* bad schemas and grammars raise ValueError naming the problem, at construction;
* following the masks with random choices always ends in a document that validates against
  its schema (jsonschema), for nested objects, enums, arrays, numbers; and grammars likewise.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

import pymtp  # noqa: E402
from pymtp import default_model  # noqa: E402
from pymtp.chat import chat_prompt, chat_prompt_tokens  # noqa: E402
from pymtp.grammar import Constraint, Vocabulary, allowed_tokens, mask_words, vocabulary  # noqa: E402


@pytest.fixture(scope="module")
def model():
    m = pymtp.Model(default_model.default_model_path(), mtp=False)
    yield m
    m.close()


@pytest.fixture(scope="module")
def vocab(model):
    return vocabulary(model)


def tok(model, text: str) -> int:
    ids = model.tokenize(text, add_special=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def allowed(matcher) -> set[int]:
    return set(allowed_tokens(matcher.mask(), matcher.n_vocab).tolist())


def drive(matcher, tokens: list[bytes], rng: np.random.Generator, max_steps: int = 600) -> bytes:
    """Follow the masks: pick an allowed token at random (half the time one that closes
    something, so strings and numbers end), accept it, until the matcher is terminated."""
    eos = set(matcher.vocab.eos)
    closing = np.array([any(c in t for c in b'"]},') for t in tokens])
    out = []
    for _ in range(max_steps):
        if matcher.is_terminated():
            return b"".join(out)
        ids = allowed_tokens(matcher.mask(), matcher.n_vocab)
        assert ids.size, "a mask allows nothing before the output is complete"
        ends = [t for t in ids.tolist() if t in eos]
        if ends and rng.random() < 0.5:
            assert matcher.accept(ends[0])
            assert matcher.is_terminated()
            return b"".join(out)
        pool = ids[closing[ids]] if rng.random() < 0.5 and closing[ids].any() else ids
        t = int(rng.choice(pool))
        if t in eos:
            continue
        assert matcher.accept(t), (b"".join(out), tokens[t])
        out.append(tokens[t])
    raise AssertionError(f"not terminated after {max_steps} tokens: {b''.join(out)[:200]!r}")


# ---- masks -----------------------------------------------------------------------------------

ENUM = ["red", "green", "blue", "dark blue"]


def test_the_first_mask_of_an_enum_is_exactly_the_prefix_tokens(model, vocab):
    c = Constraint(model, json_schema={"enum": ENUM})
    docs = [json.dumps(e).encode() for e in ENUM]
    want = {
        i for i, t in enumerate(vocab.tokens) if t and not t.startswith(b"\xff") and any(d.startswith(t) for d in docs)
    }
    assert tok(model, '"') in want and len(want) >= 1
    assert allowed(c.matcher()) == want
    # after '"' and 'bl' only the rest of "blue" / nothing else
    m = c.matcher()
    assert m.accept(tok(model, '"'))
    rest = [d[1:] for d in docs]
    want = {
        i for i, t in enumerate(vocab.tokens) if t and not t.startswith(b"\xff") and any(r.startswith(t) for r in rest)
    }
    assert allowed(m) == want


def test_masks_by_hand_along_an_object(model, vocab):
    c = Constraint(
        model,
        json_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
            "additionalProperties": False,
        },
    )
    m = c.matcher()
    assert allowed(m) == {tok(model, "{"), tok(model, '{"')}
    for t in model.tokenize('{"a": 1', add_special=False):
        assert m.accept(t)
    ok = allowed(m)
    assert {tok(model, "2"), tok(model, "}"), tok(model, " ")} <= ok  # more digits, the end, space
    assert not ok & {tok(model, ","), tok(model, '"'), tok(model, "a"), tok(model, "]"), vocab.eos[0]}
    assert not m.accept(tok(model, ","))  # refused, state unchanged
    assert allowed(m) == ok
    assert m.accept(tok(model, "}")) and m.is_terminated()
    assert allowed(m) == set(vocab.eos)  # only an end token now
    assert m.accept(vocab.eos[0]) and not m.accept(vocab.eos[0])


def test_special_tokens_are_never_allowed_inside_json(model, vocab):
    special = np.array([t.startswith(b"\xff") for t in vocab.tokens])
    assert special.sum() >= 3
    m = Constraint(model, json_schema={"type": "string"}).matcher()
    m.accept(tok(model, '"'))
    ids = allowed_tokens(m.mask(), m.n_vocab)
    assert ids.size > 40_000 and not special[ids].any()


def test_rollback_restores_masks_and_state(model):
    c = Constraint(
        model,
        json_schema={
            "type": "object",
            "properties": {"xs": {"type": "array", "items": {"type": "number"}}, "s": {"type": "string"}},
            "required": ["xs", "s"],
        },
    )
    m = c.matcher()
    toks = model.tokenize('{"xs": [1.5, -2], "s": "hi"}', add_special=False)
    masks = [m.mask()]
    for t in toks:
        assert m.accept(t)
        masks.append(m.mask())
    assert m.is_terminated()
    for n in (1, 3, len(toks) // 2):
        m.rollback(n)
        assert m.n_accepted == len(toks) - n and not m.is_terminated()
        np.testing.assert_array_equal(m.mask(), masks[len(toks) - n])
        for t in toks[len(toks) - n :]:
            assert m.accept(t)
        np.testing.assert_array_equal(m.mask(), masks[-1])
    end = m.vocab.eos[0]
    assert m.accept(end) and m.is_terminated()
    m.rollback(2)  # the end token and "}"
    np.testing.assert_array_equal(m.mask(), masks[-2])
    m.reset()
    np.testing.assert_array_equal(m.mask(), masks[0])
    with pytest.raises(ValueError, match="roll back"):
        m.rollback(1)


def test_rollback_of_an_end_token_in_a_grammar_that_could_go_on(model):
    m = Constraint(model, grammar='start: "ab"+').matcher()
    for t in model.tokenize("abab", add_special=False):
        assert m.accept(t)
    before = m.mask()
    assert m.vocab.eos[0] in allowed(m) and not m.is_terminated()
    assert m.accept(m.vocab.eos[0]) and m.is_terminated()
    m.rollback(1)
    assert not m.is_terminated()
    np.testing.assert_array_equal(m.mask(), before)


def test_fill_mask_layout_and_buffers():
    # 95 printable bytes + one special end token: 96 tokens, 3 words; token j is bit j % 32 of word j // 32
    tokens = [bytes([c]) for c in range(32, 127)] + [b"\xff<|end|>"]
    v = Vocabulary(tokens, [95], lambda b: [c - 32 for c in b])
    m = Constraint(v, regex="a[0-9]").matcher()
    out = np.zeros(4, dtype=np.uint32)
    out[3] = 7
    m.fill_mask(out)
    assert out.tolist() == [0, 0, 1 << (65 - 64), 7]  # 'a' = token 65: word 2, bit 1
    assert m.accept(ord("a") - 32)
    out32 = np.zeros(3, dtype=np.int32)
    m.fill_mask(out32)
    assert allowed_tokens(out32, 96).tolist() == [ord(d) - 32 for d in "0123456789"]
    assert out32[0] == sum(1 << (ord(d) - 32) for d in "0123456789")
    for bad in (np.zeros(2, dtype=np.int32), np.zeros(3, dtype=np.int64), np.zeros((1, 3), dtype=np.int32)):
        with pytest.raises((TypeError, ValueError)):
            m.fill_mask(bad)
    # a vocabulary of 70 (" " to "d" and an end token) leaves the bits past it at 0
    v70 = Vocabulary(tokens[:69] + [b"\xff<|end|>"], [69], lambda b: [c - 32 for c in b])
    m70 = Constraint(v70, regex="[ -d]*").matcher()
    words = np.zeros(mask_words(70), dtype=np.int32)
    m70.fill_mask(words)
    assert words.size == 3 and words.tolist()[:2] == [-1, -1] and words[2] == (1 << 6) - 1
    assert allowed_tokens(words, 70).tolist() == list(range(70))


def test_vocabulary_is_cached_per_model_and_from_a_session(model):
    assert vocabulary(model) is vocabulary(model)
    v = vocabulary(model)
    assert v.n_vocab == model.n_vocab and model.eos in v.eos and all(model.is_eog(t) for t in v.eos)
    assert v.tokens[tok(model, "{")] == b"{" and v.tokens[model.eos] == b"\xff<|im_end|>"


# ---- errors before decoding ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(json_schema={"type": "foo"}), "Invalid type: foo"),
        (dict(json_schema='{"type": "object",'), "not valid JSON"),
        (dict(json_schema={"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}), "nope"),
        (dict(json_schema={"type": "string", "pattern": "(("}), "unclosed group"),
        (dict(json_schema={"type": "number", "minimum": "x"}), "minimum"),
        (dict(json_schema=[1, 2]), "JSON object"),
        (dict(grammar="start: foo"), "unknown name"),
        (dict(grammar='root ::= "a" undefined-rule'), "undefined-rule"),
        (dict(grammar="   "), "non-empty"),
        (dict(regex="a(("), "regex"),
        (dict(json_schema={}, grammar='start: "a"'), "exactly one"),
        (dict(), "exactly one"),
    ],
)
def test_bad_schemas_and_grammars_raise_a_clear_value_error(model, kw, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        Constraint(**kw)
    with pytest.raises(ValueError, match=re.escape(words)):
        Constraint(model, **kw)


def test_a_constraint_without_a_model_needs_one_for_a_matcher(model):
    c = Constraint(json_schema={"type": "integer"})
    with pytest.raises(ValueError, match="no model"):
        c.matcher()
    assert c.matcher(model).accept(tok(model, "7"))


# ---- following the masks ---------------------------------------------------------------------

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 10},
                    "geo": {
                        "type": "object",
                        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                        "required": ["lat", "lon"],
                        "additionalProperties": False,
                    },
                },
                "required": ["city", "geo"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "enums": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"enum": [1, 2, 3, None]},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
        },
        "required": ["color", "size", "mode"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4},
            "pairs": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
                "maxItems": 3,
            },
        },
        "required": ["xs", "pairs"],
        "additionalProperties": False,
    },
    "numbers": {
        "type": "object",
        "properties": {
            "i": {"type": "integer", "minimum": -5, "maximum": 500},
            "x": {"type": "number"},
            "p": {"type": "number", "minimum": 0, "maximum": 1},
            "n": {"type": "integer", "exclusiveMinimum": 0},
        },
        "required": ["i", "x", "p", "n"],
        "additionalProperties": False,
    },
    "top-level array": {
        "type": "array",
        "items": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
        "maxItems": 5,
    },
}


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_random_walks_along_the_masks_validate_against_the_schema(model, vocab, name):
    schema = SCHEMAS[name]
    c = Constraint(model, json_schema=schema)
    rng = np.random.default_rng(sum(map(ord, name)))
    for _ in range(6):
        text = drive(c.matcher(), vocab.tokens, rng).decode("utf-8")
        jsonschema.validate(json.loads(text), schema)


def test_json_object_walks_parse_as_objects(model, vocab):
    c = Constraint(model, json_object=True)
    rng = np.random.default_rng(1)
    for _ in range(6):
        assert isinstance(json.loads(drive(c.matcher(), vocab.tokens, rng)), dict)


@pytest.mark.parametrize(
    "grammar",
    [
        'start: "(" num ("," num)* ")"\nnum: /[0-9]{1,3}/',  # Lark
        'root ::= "(" num ("," num)* ")"\nnum ::= [0-9] [0-9]? [0-9]?',  # GBNF
    ],
)
def test_random_walks_along_a_grammar_match_it(model, vocab, grammar):
    c = Constraint(model, grammar=grammar)
    assert c.kind == ("gbnf" if "::=" in grammar else "lark")
    rng = np.random.default_rng(3)
    for _ in range(6):
        text = drive(c.matcher(), vocab.tokens, rng).decode()
        assert re.fullmatch(r"\([0-9]{1,3}(,[0-9]{1,3})*\)", text), text


def test_a_matcher_is_a_token_constraint_for_generate(model):
    """The protocol pymtp.generate(constraint=) takes: a greedy output that validates."""
    schema = SCHEMAS["enums"]
    prompt = chat_prompt(model, "Pick a color, a size and a mode as JSON.")
    with pymtp.Session(model, n_ctx=256) as s:
        r = pymtp.generate(
            chat_prompt_tokens(model, prompt),
            s,
            max_tokens=48,
            speculative=False,
            constraint=Constraint(model, json_schema=schema).matcher(),
        )
    assert r.finish_reason == "stop"
    jsonschema.validate(json.loads(r.text), schema)
