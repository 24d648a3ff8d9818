"""No request option is dropped on the way to the engine, on any path.

Every field of SamplingConfig, SpecConfig and GenerationConfig (read from the models, so a new
field is covered without touching this file) is set to a value other than its default and sent
through each entry point: pymtp.generate with one prompt and with a list, pymtp.stream, the
server with --parallel 1 and 4, the CLI's flags (generate) and the CLI's serve flags (as the
server's defaults). The engine's boundary (MTPSpeculator.start and TextOutput) records what it
was given; it must equal the configs built from those values directly.
"""

from __future__ import annotations

import json
import threading
import typing
import urllib.request
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from test_server import TIMEOUT, _Server

import pymtp
from pymtp.cli_options import flag_name
from pymtp.config import GenerationConfig, SamplingConfig, SpecConfig
from pymtp.server import create_app
from pymtp.speculator import MTPSpeculator
from pymtp.textout import TextOutput

PROMPT = "def f(x):"
#: Values the automatic choice cannot make (or would make slow): the rest come from _pick.
OVERRIDES: dict[str, Any] = {
    "max_tokens": 5,  # short generations
    "stop": ("@@zq",),  # a stop string the text will not contain
    "logit_bias": ((5, 1.5), (7, -2.0)),  # tokens of the fixture's 304-token vocabulary
}


def _scalar(annotation):
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) is not Literal and len(args) == 1 else annotation


def _pick(model: type[BaseModel], name: str) -> Any:
    """A valid value of the field other than its default (first of a few candidates the field accepts)."""
    info = model.model_fields[name]
    kind, default = _scalar(info.annotation), info.default
    if kind is bool:
        candidates = [not default]
    elif typing.get_origin(kind) is Literal:
        candidates = [a for a in typing.get_args(kind) if a != default]
    elif kind is int:
        candidates = [1] if default is None else [default + 1, default - 1]
    elif kind is float:
        candidates = [0.5] if default is None else [default + 0.25, default - 0.25]
    else:
        candidates = []
    for value in candidates:
        try:
            model(**{name: value})
            return value
        except ValueError:
            continue
    raise AssertionError(f"no non-default value for {model.__name__}.{name}: add one to OVERRIDES")


def _values(model: type[BaseModel]) -> dict[str, Any]:
    values = {name: OVERRIDES[name] if name in OVERRIDES else _pick(model, name) for name in model.model_fields}
    model(**values)  # jointly valid too
    return values


SAMPLING, SPEC, LIMITS = _values(SamplingConfig), _values(SpecConfig), _values(GenerationConfig)
WANT = (SamplingConfig(**SAMPLING), SpecConfig(**SPEC), GenerationConfig(**LIMITS))
OUTPUTS = {"logprobs": True, "top_logprobs": 2}


def test_every_value_differs_from_its_default():
    for model, values in ((SamplingConfig, SAMPLING), (SpecConfig, SPEC), (GenerationConfig, LIMITS)):
        for name, value in values.items():
            assert value != model.model_fields[name].default, name


@pytest.fixture
def engine(monkeypatch):
    """What the engine's boundary was given, per generation: (sampling, spec, start kwargs) of each
    MTPSpeculator.start and the limits of each TextOutput."""
    seen: dict[str, list] = {"start": [], "limits": []}
    lock = threading.Lock()
    start, init = MTPSpeculator.start, TextOutput.__init__

    def spy_start(self, prompt, *args, **kw):
        start(self, prompt, *args, **kw)
        with lock:
            seen["start"].append((self.sampling, self.spec if self.drafter is not None else None, kw))

    def spy_init(self, model, limits, *args, **kw):
        init(self, model, limits, *args, **kw)
        with lock:
            seen["limits"].append(limits)

    monkeypatch.setattr(MTPSpeculator, "start", spy_start)
    monkeypatch.setattr(TextOutput, "__init__", spy_init)
    return seen


def _check(seen: dict, n: int, outputs: bool = True) -> None:
    assert len(seen["start"]) == n and len(seen["limits"]) == n, seen
    for sampling, spec, kw in seen["start"]:
        assert (sampling, spec) == WANT[:2]
        if outputs:
            assert kw["logprobs"] and kw["top_logprobs"] == OUTPUTS["top_logprobs"], kw
    for limits in seen["limits"]:
        assert limits == WANT[2]


@pytest.fixture(scope="module")
def model(gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as m:
        yield m


def test_api_one_prompt(engine, model):
    r = pymtp.generate(PROMPT, model, speculative=SPEC, **SAMPLING, **LIMITS, **OUTPUTS)
    assert r.tokens and r.top_logprobs
    _check(engine, 1)


def test_api_stream(engine, model):
    s = pymtp.stream(PROMPT, model, speculative=SpecConfig(**SPEC), **SAMPLING, **LIMITS, **OUTPUTS)
    assert "".join(s) == s.result.text
    _check(engine, 1)


def test_api_list_of_prompts(engine, model):
    rs = pymtp.generate([PROMPT, "x = 1"], model, speculative=SPEC, **SAMPLING, **LIMITS, **OUTPUTS)
    assert len(rs) == 2 and all(r.tokens for r in rs)
    _check(engine, 2)


def _wire(values: dict) -> dict:
    """The JSON form of a request's settings (OpenAI's logit_bias: {"token": bias})."""
    out = dict(values)
    out["logit_bias"] = {str(t): b for t, b in values["logit_bias"]}
    out["stop"] = list(values["stop"])
    return out


def _complete(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("parallel", [1, 4])
def test_server(engine, model, parallel):
    with _Server(create_app(model, model_name="m", parallel=parallel)) as srv:
        body = _complete(srv.url, {"prompt": PROMPT, "logprobs": 2, **_wire({**SAMPLING, **SPEC, **LIMITS})})
    assert body["choices"][0]["text"] is not None
    _check(engine, 1)


@pytest.mark.parametrize("parallel", [1, 4])
def test_server_defaults(engine, model, parallel):
    """The same values as the server's defaults reach a request that gives none."""
    with _Server(create_app(model, model_name="m", parallel=parallel, defaults={**SAMPLING, **SPEC, **LIMITS})) as srv:
        _complete(srv.url, {"prompt": PROMPT, "logprobs": 2})
    _check(engine, 1)


def _argv(values: dict) -> list[str]:
    """The CLI flags of values (--flag / --no-flag for booleans, one --stop / --logit-bias per item)."""
    argv = []
    for name, value in values.items():
        flag = flag_name(name)
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif name == "stop":
            argv += [a for s in value for a in (flag, s)]
        elif name == "logit_bias":
            argv += [a for t, b in value for a in (flag, f"{t}={b}")]
        else:
            argv += [flag, str(value)]
    return argv


def test_cli_generate(engine, gguf, capsys):
    from pymtp.cli import EXIT_OK, main

    rc = main(["generate", "-m", str(gguf("glm4moe")), "-q", *_argv({**SAMPLING, **SPEC, **LIMITS}), PROMPT])
    assert rc == EXIT_OK, capsys.readouterr().err
    _check(engine, 1, outputs=False)  # the CLI asks for no logprobs


def test_cli_serve_flags_are_the_servers_defaults(engine, gguf, model, monkeypatch, capsys):
    """pymtp serve's flags become create_app's defaults, and those reach a request that gives none."""
    import pymtp.server as server
    from pymtp.cli import EXIT_OK, main

    given = {}
    monkeypatch.setattr(server, "create_app", lambda session, **kw: given.update(kw))
    monkeypatch.setattr(server, "serve", lambda app, **kw: None)
    rc = main(["serve", "-m", str(gguf("glm4moe")), "-q", *_argv({**SAMPLING, **SPEC, **LIMITS})])
    assert rc == EXIT_OK, capsys.readouterr().err
    with _Server(create_app(model, model_name="m", defaults=given["defaults"])) as srv:
        _complete(srv.url, {"prompt": PROMPT, "logprobs": 2})
    _check(engine, 1)
