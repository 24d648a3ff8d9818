"""Structured output under speculation on the real default model (pymtp.grammar over llguidance):
greedy constrained output with speculation equals it without, token for token, for several
schemas and one grammar; every output validates (jsonschema); bad schemas raise before any
decoding; a logits_processor sees the target's and the head's rows alike."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

import pymtp

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 20},
                    "zip": {"type": "integer", "minimum": 0, "maximum": 99999},
                },
                "required": ["city", "zip"],
                "additionalProperties": False,
            },
        },
        "required": ["name", "address"],
        "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}, "sure": {"type": "boolean"}},
        "required": ["color", "sure"],
        "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {"primes": {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 5}},
        "required": ["primes"],
        "additionalProperties": False,
    },
    "numbers": {
        "type": "object",
        "properties": {"price": {"type": "number"}, "count": {"type": "integer", "minimum": 0}},
        "required": ["price", "count"],
        "additionalProperties": False,
    },
}
GRAMMAR = 'start: "def " NAME "(" NAME "):"\nNAME: /[a-z_]{1,12}/\n'


@pytest.fixture(scope="module")
def default():
    s = pymtp.load(n_ctx=1024)
    yield s
    s.close()


def _prompt(s, text):
    from pymtp.chat import chat_prompt, chat_prompt_tokens

    return chat_prompt_tokens(s, chat_prompt(s.model, [{"role": "user", "content": text}]))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_output_is_the_same_with_and_without_speculation(default, name):
    schema = SCHEMAS[name]
    prompt = _prompt(default, f"Reply with a JSON object for this schema: {json.dumps(schema)}")
    kw = dict(max_tokens=200, json_schema=schema)
    plain = pymtp.generate(prompt, default, speculative=False, **kw)
    spec = pymtp.generate(prompt, default, speculative={"n_draft": 3}, **kw)
    assert spec.tokens == plain.tokens
    assert spec.finish_reason == "stop"
    jsonschema.validate(json.loads(spec.text), schema)
    assert spec.stats.n_drafted > 0


def test_a_grammar_is_followed_with_speculation(default):
    import re

    prompt = _prompt(default, "Write the first line of a Python function that adds two numbers.")
    plain = pymtp.generate(prompt, default, speculative=False, max_tokens=40, grammar=GRAMMAR)
    spec = pymtp.generate(prompt, default, speculative={"n_draft": 3}, max_tokens=40, grammar=GRAMMAR)
    assert spec.tokens == plain.tokens
    assert re.fullmatch(r"def [a-z_]{1,12}\([a-z_]{1,12}\):", spec.text), spec.text


def test_sampled_constrained_output_validates(default):
    schema = SCHEMAS["enum"]
    prompt = _prompt(default, "Pick a color.")
    for seed in range(3):
        # fixed drafts: a sampled path depends on the draft lengths, which auto takes from measured time
        r = pymtp.generate(
            prompt,
            default,
            max_tokens=40,
            temperature=0.9,
            top_k=40,
            seed=seed,
            json_schema=schema,
            speculative={"policy": "fixed"},
        )
        jsonschema.validate(json.loads(r.text), schema)


@pytest.mark.parametrize(
    "bad",
    [dict(json_schema={"type": "nope"}), dict(grammar="start: ("), dict(json_schema=SCHEMAS["enum"], grammar=GRAMMAR)],
)
def test_bad_constraints_raise_before_decoding(default, bad):
    before = default.target.n_writes
    with pytest.raises(ValueError):
        pymtp.generate("hi", default, max_tokens=4, **bad)
    assert default.target.n_writes == before  # nothing was decoded


def test_a_logits_processor_changes_both_sides(default):
    prompt = _prompt(default, "Count from one to five in words.")
    base = pymtp.generate(prompt, default, speculative=False, max_tokens=12)
    banned = base.tokens[1]
    seen = []

    def ban(ids, row):
        seen.append(len(ids))
        row[banned] = -np.inf
        return row

    plain = pymtp.generate(prompt, default, speculative=False, max_tokens=12, logits_processor=ban)
    n_plain = len(seen)
    spec = pymtp.generate(prompt, default, speculative={"n_draft": 2}, max_tokens=12, logits_processor=ban)
    assert spec.tokens == plain.tokens and banned not in spec.tokens
    assert len(seen) - n_plain > len(spec.tokens)  # draft rows and verify rows both went through it
