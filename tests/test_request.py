"""pymtp.request: one resolution of a request's options, and the forms derived from the settings
models (generate/stream's shared signature, the server's request fields, the CLI's flags)."""

from __future__ import annotations

import inspect
import json

import pytest
from pydantic import ValidationError

import pymtp
from pymtp.config import GenerationConfig, SamplingConfig, SpecConfig
from pymtp.errors import UnsupportedError
from pymtp.request import GenerateOptions, OptionError, Request, flat_options, resolve

EXTRAS = {"speculative", "constraint", "json_schema", "grammar", "logits_processor", "logprobs", "top_logprobs"}


# ---- one signature, from the settings models ----


def test_generate_options_are_the_settings_fields_and_the_output_options():
    assert set(GenerateOptions.__annotations__) == (
        set(SamplingConfig.model_fields) | set(GenerationConfig.model_fields) | EXTRAS
    )


def test_generate_and_stream_share_one_signature():
    g, s = inspect.signature(pymtp.generate), inspect.signature(pymtp.stream)
    assert list(g.parameters) == list(s.parameters) == ["prompt", "model", "options"]
    assert g.parameters["options"].annotation == s.parameters["options"].annotation == "Unpack[GenerateOptions]"


def test_unknown_keywords_are_type_errors_naming_the_closest(models):
    m = models("glm4moe")
    for call in (pymtp.generate, pymtp.stream):
        with pytest.raises(TypeError, match="unexpected keyword argument 'temprature'; did you mean 'temperature'"):
            call("hi", m, temprature=0.5)
        with pytest.raises(TypeError, match=r"'n_draft'; it is a SpecConfig setting: speculative=\{'n_draft'"):
            call("hi", m, n_draft=2)


# ---- resolve ----


def test_resolve_builds_the_frozen_configs(models):
    m = models("glm4moe")
    r = resolve(
        {
            "temperature": 0.5,
            "seed": 3,
            "max_tokens": 9,
            "stop": "x",
            "logit_bias": {4: 1.0},
            "speculative": {"n_draft": 2},
            "top_logprobs": 2,
        },
        m,
    )
    assert r.sampling == SamplingConfig(temperature=0.5, seed=3, logit_bias={4: 1.0})
    assert r.limits == GenerationConfig(max_tokens=9, stop=("x",))
    assert r.spec == SpecConfig(n_draft=2) and r.spec.model_fields_set == SpecConfig(n_draft=2).model_fields_set
    assert r.logprobs and r.wants_logprobs and r.top_logprobs == 2 and not r.constrained
    assert resolve({}, m) == Request(SamplingConfig(), SpecConfig(), GenerationConfig())
    assert resolve({"speculative": False}, m).spec is None
    assert resolve({"speculative": None, "stop": None, "seed": None, "logit_bias": None}, m).spec is None
    spec = SpecConfig(drafter="lookup")
    assert resolve({"speculative": spec}, m).spec is spec


def test_resolve_checks_what_depends_on_the_model(models, gguf):
    m = models("glm4moe")
    with pytest.raises(OptionError, match="outside the vocabulary") as e:
        resolve({"logit_bias": {m.n_vocab: 1.0}}, m)
    assert e.value.option == "logit_bias"
    with pytest.raises(OptionError) as e:
        resolve({"top_logprobs": 21}, m)
    assert e.value.option == "top_logprobs"
    with pytest.raises(OptionError) as e:
        resolve({"json_schema": {"type": "object"}, "grammar": "start: /a/"}, m)
    assert e.value.option == "grammar"
    with pymtp.load(gguf("glm4moe-nomtp"), n_ctx=64) as plain:
        with pytest.raises(UnsupportedError, match="no MTP blocks") as e:
            resolve({}, plain)
        assert e.value.option == "speculative"
        assert resolve({"speculative": {"drafter": "lookup"}}, plain).spec.drafter == "lookup"
        assert resolve({"speculative": False}, plain).spec is None


def test_bad_values_name_their_field(models):
    m = models("glm4moe")
    for options, field in (
        ({"temperature": 101}, "temperature"),
        ({"max_tokens": None}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"speculative": {"n_draft": 0}}, "n_draft"),
    ):
        with pytest.raises(ValidationError) as e:
            resolve(options, m)
        assert e.value.errors()[0]["loc"] == (field,), options


def test_a_grammar_gives_each_generation_its_own_matcher(models):
    r = resolve({"grammar": 'start: "ab"'}, models("glm4moe"))
    assert r.constrained and r.grammar is not None and r.constraint is None
    assert r.new_constraint() is not r.new_constraint()


def test_a_list_of_prompts_takes_grammars_and_logits_processors(models):
    """Each prompt of a list gets its own matcher of a grammar or schema (and the logits processor),
    and equals its run alone (#31: constraints run in batches); a caller's constraint object,
    which holds one text's state, is refused for several prompts."""
    m = models("glm4moe")
    for kw in ({"grammar": 'start: "ab" | "cd"'}, {"logits_processor": lambda ids, row: row}):
        got = pymtp.generate(["x", "y"], m, max_tokens=4, **kw)
        assert [r.tokens for r in got] == [pymtp.generate(p, m, max_tokens=4, **kw).tokens for p in ("x", "y")]
    with pytest.raises(UnsupportedError, match="a constraint object follows one text"):
        pymtp.generate(["x", "y"], m, max_tokens=4, constraint=resolve({"grammar": 'start: "ab"'}, m).new_constraint())


# ---- the flat form (CLI flags, server fields) ----


def test_flat_options():
    assert flat_options({}) == {"speculative": True}
    assert flat_options({"n_draft": 2, "temperature": 0.5}) == {"temperature": 0.5, "speculative": {"n_draft": 2}}
    # the request's fields over the defaults', its speculative over theirs
    assert flat_options({"p_min": 0.5}, {"n_draft": 4, "p_min": 0.1}) == {"speculative": {"n_draft": 4, "p_min": 0.5}}
    assert flat_options({"n_draft": 2}, {"speculative": False}) == {"speculative": False}
    assert flat_options({"speculative": True}, {"speculative": False, "n_draft": 4}) == {"speculative": {"n_draft": 4}}
    assert flat_options({"temperature": None}, {"temperature": 0.7}) == {"temperature": 0.7, "speculative": True}
    with pytest.raises(OptionError):
        flat_options({"speculative": "yes"})


# ---- the server's request fields and the CLI's flags are derived ----


def test_the_server_request_fields_are_the_settings_fields():
    from pymtp.server.schemas import CompletionRequest

    fields = CompletionRequest.model_fields
    for model in (SamplingConfig, SpecConfig, GenerationConfig):
        for name, info in model.model_fields.items():
            assert name in fields, name
            if name not in ("logit_bias", "stop"):  # OpenAI's wire forms
                assert fields[name].default is None
                assert fields[name].description == info.description
                inner = [a for a in fields[name].annotation.__args__ if a is not type(None)][0]
                assert list(getattr(inner, "__metadata__", ())) == list(info.metadata), name
    # one temperature bound: the config's
    with pytest.raises(ValidationError):
        CompletionRequest.model_validate({"prompt": "x", "temperature": 100.5})
    assert CompletionRequest.model_validate({"prompt": "x", "temperature": 2.5}).temperature == 2.5


def test_the_cli_has_a_flag_per_settings_field():
    from pymtp.cli import build_parser
    from pymtp.cli_options import flag_name

    parser = build_parser()
    for command in ("generate", "chat", "serve"):
        sub = parser._subparsers._group_actions[0].choices[command]
        flags = {s for a in sub._actions for s in a.option_strings}
        for model in (SamplingConfig, SpecConfig, GenerationConfig):
            for name in model.model_fields:
                assert flag_name(name) in flags, (command, name)


def test_parallel_defaults_agree():
    from pymtp.cli import build_parser
    from pymtp.server import create_app

    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    (action,) = [a for a in serve._actions if "--parallel" in a.option_strings]
    default = inspect.signature(create_app).parameters["parallel"].default
    assert default == 4 and f"default {default};" in action.help


def test_server_defaults_are_checked_when_the_app_is_made(models):
    from pymtp.server import create_app

    m = models("glm4moe")
    with pytest.raises(ValueError, match="temperature"):
        create_app(m, defaults={"temperature": 101})
    with pytest.raises(ValueError, match="unknown request defaults: tempreature"):
        create_app(m, defaults={"tempreature": 0.5})


def test_server_model_without_mtp_blocks(gguf):
    from fastapi.testclient import TestClient

    from pymtp.server import create_app

    with (
        pymtp.load(gguf("glm4moe-nomtp"), n_ctx=128) as plain,
        TestClient(create_app(plain, model_name="m", parallel=1)) as client,
    ):

        def post(**extra):
            return client.post("/v1/completions", content=json.dumps({"prompt": "hi", "max_tokens": 3, **extra}))

        r = post()
        assert r.status_code == 200 and r.json()["pymtp"]["speculative"] is False
        r = post(speculative=True)
        assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"
        r = post(speculative=True, drafter="lookup")
        assert r.status_code == 200 and r.json()["pymtp"]["speculative"] is True
