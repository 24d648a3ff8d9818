"""The server's options and operational endpoints: the model id check, the API key, malformed JSON,
/health, /metrics (Prometheus text, parsed by prometheus-client), n > 1 choices, the temperature default.

Servers listen on 127.0.0.1 only; generations are short (max_tokens <= 16 on the tiny fixtures).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_server import TIMEOUT, ScriptedRunner, _Server

import pymtp
from pymtp.server import create_app

MODEL = "fixture-chat"
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def served(gguf):
    from conftest import CHATML

    model = pymtp.load(gguf("glm4moe", chat_template=CHATML), n_ctx=512, n_threads=1)
    with _Server(create_app(model, model_name=MODEL, parallel=1)) as srv:
        srv.model = model
        yield srv
    model.close()


@pytest.fixture(scope="module")
def client(served):
    return served.client()


def call(url: str, body: bytes | dict | None = None, headers: dict | None = None):
    """(status, headers, body: parsed JSON or text) of a GET (body None) or POST."""
    data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        method="GET" if body is None else "POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            status, hdrs, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, e.headers, e.read()
    try:
        return status, hdrs, json.loads(raw)
    except ValueError:
        return status, hdrs, raw.decode()


def error_of(body: dict) -> dict:
    """The OpenAI error object of body, checked for its shape."""
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str)
    return err


def metrics_of(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of /metrics, parsed by prometheus-client."""
    status, hdrs, text = call(f"{url}/metrics")
    assert status == 200 and hdrs["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# ---- the model id ----


def test_unknown_model_is_404_on_both_endpoints(served, client):
    for path, body in (
        ("completions", {"prompt": "hi"}),
        ("chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ):
        status, _, out = call(f"{served.url}/v1/{path}", {**body, "model": "gpt-4o", "max_tokens": 2})
        assert status == 404
        err = error_of(out)
        assert err["code"] == "model_not_found" and err["param"] == "model" and err["type"] == "not_found_error"
        assert "gpt-4o" in err["message"] and MODEL in err["message"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model=MODEL.upper(), prompt="hi", max_tokens=2)


def test_served_id_and_omitted_model_are_accepted(served, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    ref = client.completions.create(model=MODEL, prompt="abc", max_tokens=6).choices[0].text
    for extra in ({}, {"model": None}, {"model": ""}):
        status, _, out = call(f"{served.url}/v1/completions", {"prompt": "abc", "max_tokens": 6, **extra})
        assert status == 200 and out["model"] == MODEL and out["choices"][0]["text"] == ref


# ---- malformed bodies ----


@pytest.mark.parametrize(
    "raw, where",
    [
        (b'{"prompt": "hi",}', "line 1 column 17 (char 16)"),
        (b'{\n  "prompt": "hi"\n  "max_tokens": 2}', "line 3 column 3 (char 21)"),
        (b"{not json", "line 1 column 2 (char 1)"),
    ],
)
def test_malformed_json_names_its_position(served, raw, where):
    status, _, out = call(f"{served.url}/v1/completions", raw)
    assert status == 400
    err = error_of(out)
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json"
    assert "not valid JSON" in err["message"] and where in err["message"]


def test_bodies_that_are_not_json_objects(served):
    url = f"{served.url}/v1/chat/completions"
    for raw, words in (
        (b"", "empty"),
        (b"[1, 2]", "not an array"),
        (b'"hi"', "not a string"),
        (b"\xff\xfe{}", "not UTF-8"),
    ):
        status, _, out = call(url, raw)
        assert status == 400 and words in error_of(out)["message"], (raw, out)
    # any content type is read as JSON (curl -d sends application/x-www-form-urlencoded)
    status, _, out = call(
        f"{served.url}/v1/completions",
        {"prompt": "hi", "max_tokens": 2},
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 200 and out["usage"]["completion_tokens"] == 2


# ---- the API key ----


def test_api_key(models):
    with _Server(create_app(models("glm4moe"), model_name="m", api_key=KEY)) as srv:
        url = f"{srv.url}/v1/completions"
        body = {"model": "m", "prompt": "hi", "max_tokens": 2}
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": KEY},
            {"Authorization": f"Basic {KEY}"},
        ):
            status, hdrs, out = call(url, body, headers)
            assert status == 401 and hdrs["WWW-Authenticate"] == "Bearer", headers
            assert error_of(out)["code"] == "invalid_api_key"
        # refused before the body is read: a malformed body without the key is a 401, not a 400
        assert call(url, b"{oops")[0] == 401
        assert call(f"{srv.url}/v1/models")[0] == 401
        for scheme in ("Bearer", "bearer"):
            status, _, out = call(url, body, {"Authorization": f"{scheme} {KEY}"})
            assert status == 200 and out["usage"]["completion_tokens"] == 2
        ok = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT)
        assert [m.id for m in ok.models.list().data] == ["m"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{srv.url}/v1", api_key="nope", max_retries=0, timeout=TIMEOUT).models.list()
        assert call(f"{srv.url}/health")[:3:2] == (200, {"status": "ok", "model": "m"})  # open
        assert call(f"{srv.url}/metrics")[0] == 200  # open
        m = metrics_of(srv.url)
        assert m[("pymtp_requests_total", (("endpoint", "/v1/completions"), ("outcome", "client_error")))] == 5
        assert m[("pymtp_requests_total", (("endpoint", "/v1/completions"), ("outcome", "ok")))] == 2


def test_api_key_must_be_printable():
    with pytest.raises(ValueError, match="printable"):
        create_app(None, api_key="two words")


def test_parallel_must_be_in_range(models):
    for bad in (0, 65):
        with pytest.raises(ValueError, match="parallel must be in"):
            create_app(models("glm4moe"), parallel=bad)


def test_a_batch_the_server_cannot_make_is_an_error_not_a_hang(models):
    """parallel > 1 with slots too large for llama.cpp: each request gets the error at once."""
    with _Server(create_app(models("glm4moe"), model_name="m", parallel=4, slot_ctx=1 << 23)) as srv:
        for _ in range(2):
            status, _, body = call(f"{srv.url}/v1/completions", {"prompt": "hi", "max_tokens": 2})
            assert status >= 400 and "n_ctx" in error_of(body)["message"]


def test_cli_api_key_from_the_environment(monkeypatch, gguf):
    import pymtp.server as server
    from pymtp.cli import EXIT_OK, EXIT_USAGE, main

    seen = {}
    monkeypatch.setattr(server, "serve", lambda app, **kw: seen.update(app=app))
    monkeypatch.setenv("PYMTP_API_KEY", KEY)
    path = str(gguf("glm4moe"))
    assert main(["serve", "-m", path, "-q", "--temperature", "0.5"]) == EXIT_OK
    assert any(
        mw.cls.__name__ == "ApiKeyMiddleware" and mw.kwargs["api_key"] == KEY for mw in seen["app"].user_middleware
    )
    monkeypatch.delenv("PYMTP_API_KEY")
    assert main(["serve", "-m", path, "-q"]) == EXIT_OK
    assert not any(mw.cls.__name__ == "ApiKeyMiddleware" for mw in seen["app"].user_middleware)
    assert main(["serve", "-m", path, "-q", "--temperature", "101"]) == EXIT_USAGE


# ---- /health and /metrics ----


def test_health(served):
    assert call(f"{served.url}/health")[:3:2] == (200, {"status": "ok", "model": MODEL})


def test_health_is_503_once_the_model_is_closed(gguf):
    model = pymtp.load(gguf("glm4moe"), n_ctx=256)
    with _Server(create_app(model)) as srv:
        assert call(f"{srv.url}/health")[0] == 200
        model.close()
        status, _, body = call(f"{srv.url}/health")
        assert status == 503 and body["status"] == "unavailable"


def test_metrics_count_requests_tokens_and_drafts(served, client):
    before = metrics_of(served.url)
    drafting = {"ignore_eos": True, "policy": "fixed"}  # auto may not draft on a fixture
    r = client.completions.create(model=MODEL, prompt="def f(x):", max_tokens=12, extra_body=drafting)
    chunks = list(client.completions.create(model=MODEL, prompt="abc", max_tokens=8, stream=True, extra_body=drafting))
    call(f"{served.url}/v1/completions", {"prompt": "hi", "max_tokens": 0})  # a 400
    s = client.completions.create(
        model=MODEL, prompt="The", max_tokens=400, stream=True, extra_body={"ignore_eos": True}
    )
    next(iter(s))
    s.close()  # cancelled
    client.completions.create(
        model=MODEL,
        prompt="abc",
        max_tokens=2,  # waits for the cancelled one
        extra_body={"ignore_eos": True},
    )
    after = metrics_of(served.url)

    def d(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    ep = "/v1/completions"
    assert d("pymtp_requests_total", endpoint=ep, outcome="ok") == 3
    assert d("pymtp_requests_total", endpoint=ep, outcome="client_error") == 1
    assert d("pymtp_requests_total", endpoint=ep, outcome="cancelled") == 1
    assert d("pymtp_generations_total") == 3  # the cancelled one is not counted
    assert d("pymtp_generated_tokens_total") == 12 + 8 + 2
    ext = r.model_extra["pymtp"], chunks[-1].model_extra["pymtp"]
    assert d("pymtp_draft_tokens_total") >= ext[0]["n_drafted"] + ext[1]["n_drafted"] > 0
    assert 0 < d("pymtp_draft_tokens_accepted_total") <= d("pymtp_draft_tokens_total")
    assert after[("pymtp_tokens_per_second", ())] > 0
    assert 0 < after[("pymtp_draft_acceptance_rate", ())] <= 1
    for gauge in ("pymtp_queue_depth", "pymtp_generations_running", "pymtp_requests_in_flight"):
        assert after[(gauge, ())] == 0  # nothing runs now
    assert d("pymtp_requests_total", endpoint="/v1/models", outcome="ok") == 0  # /metrics is not counted


def test_alternating_chat_users_resume_their_saved_caches(served, client):
    """Two users take turns: each one's next turn resumes the cache saved when the other took
    the model (/metrics counts the restores and the prompt tokens not decoded again)."""
    users = [
        [
            {"role": "system", "content": f"You are assistant number {i}, who answers with care."},
            {"role": "user", "content": f"Tell me about topic {i} in some detail, please."},
        ]
        for i in (1, 2)
    ]
    before = metrics_of(served.url)
    for turn in range(2):
        for msgs in users:
            r = client.chat.completions.create(
                model=MODEL, messages=msgs, max_tokens=40, extra_body={"ignore_eos": True}
            )
            msgs += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": "Go on."},
            ]
            ext = r.model_extra["pymtp"]
            if turn == 1:
                assert ext["reused_saved"] and ext["n_reused"] > r.usage.prompt_tokens // 2, ext
                assert r.usage.prompt_tokens_details.cached_tokens == ext["n_reused"]
    after = metrics_of(served.url)
    assert (
        after[("pymtp_prompt_cache_restores_total", ())] - before.get(("pymtp_prompt_cache_restores_total", ()), 0) == 2
    )
    assert after[("pymtp_prompt_tokens_reused_total", ())] > before.get(("pymtp_prompt_tokens_reused_total", ()), 0)


# ---- n > 1 ----


def test_n_choices_completion(client, served):
    one = client.completions.create(model=MODEL, prompt="def f(x):", max_tokens=8)
    r = client.completions.create(model=MODEL, prompt="def f(x):", max_tokens=8, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.text == one.choices[0].text for c in r.choices)  # greedy: the same each time
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    assert r.usage.completion_tokens == 3 * one.usage.completion_tokens
    ext = r.model_extra["pymtp"]
    assert len(ext["choices"]) == 3 and ext["n_drafted"] == sum(c["n_drafted"] for c in ext["choices"])


def test_n_choices_sample_with_seed_plus_i(client):
    # Plain decoding: a seeded speculative run can draw differently when the previous request left the
    # same prompt in the cache (the drafts, which the draws follow, differ), and choices run in turn.
    kw = dict(
        model=MODEL,
        prompt="Once",
        max_tokens=16,
        temperature=1.5,
        extra_body={"ignore_eos": True, "speculative": False},
    )
    r = client.completions.create(n=3, seed=7, **kw)
    singles = [client.completions.create(seed=7 + i, **kw).choices[0].text for i in range(3)]
    assert [c.text for c in r.choices] == singles
    assert len(set(singles)) > 1  # the seeds differ, so do the samples (on this fixture)


def test_n_choices_stream_chat(client):
    messages = [{"role": "user", "content": "Tell me a story"}]
    one = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8)
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=8, n=2, stream=True, stream_options={"include_usage": True}
        )
    )
    texts, roles, finals = {}, {}, {}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
            if ch.delta.role:
                roles[ch.index] = ch.delta.role
            if ch.finish_reason:
                finals[ch.index] = ch.finish_reason
    assert texts == {0: one.choices[0].message.content, 1: one.choices[0].message.content}
    assert roles == {0: "assistant", 1: "assistant"}
    assert finals == {0: one.choices[0].finish_reason, 1: one.choices[0].finish_reason}
    assert chunks[-1].usage.completion_tokens == 2 * one.usage.completion_tokens


def test_n_choices_stream_completion(client):
    one = client.completions.create(model=MODEL, prompt="The cat", max_tokens=6).choices[0].text
    chunks = list(client.completions.create(model=MODEL, prompt="The cat", max_tokens=6, n=3, stream=True))
    by = {}
    for c in chunks:
        for ch in c.choices:
            by[ch.index] = by.get(ch.index, "") + ch.text
    assert by == {0: one, 1: one, 2: one}
    assert [c.choices[0].index for c in chunks if c.choices[0].finish_reason] == [0, 1, 2]


def test_n_is_bounded(served):
    status, _, out = call(f"{served.url}/v1/completions", {"prompt": "hi", "n": 17})
    assert status == 400 and error_of(out)["param"] == "n"


# ---- the temperature default ----


def test_omitted_temperature_is_greedy_unless_the_server_says_otherwise(client, served):
    """pymtp's default (documented in the README): greedy when temperature is omitted, not OpenAI's 1."""
    greedy = pymtp.generate("Once", served.model, max_tokens=16, ignore_eos=True, speculative=False).text
    kw = dict(model=MODEL, prompt="Once", max_tokens=16, seed=3, extra_body={"ignore_eos": True, "speculative": False})
    assert client.completions.create(**kw).choices[0].text == greedy
    sampled = client.completions.create(temperature=1.0, **kw).choices[0].text
    assert sampled != greedy  # so the check above can fail
    with _Server(create_app(served.model, model_name=MODEL, defaults={"temperature": 1.0})) as srv:
        assert srv.client().completions.create(**kw).choices[0].text == sampled


def test_an_error_inside_a_stream_is_reported_and_counted(served):
    """An error after the stream started: an in-band error event, then [DONE]; /metrics counts it as an
    error although the status was 200."""
    from pymtp.errors import PymtpError

    app = create_app(served.model, model_name=MODEL)
    app.state.runner = ScriptedRunner(
        served.model, lambda job: [("piece", "partial"), ("error", PymtpError("the model broke down"))]
    )
    with _Server(app) as srv:
        status, _, text = call(f"{srv.url}/v1/completions", {"prompt": "hi", "stream": True})
        assert status == 200
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        assert events[0]["choices"][0]["text"] == "partial"
        assert error_of(events[-1])["type"] == "server_error" and "broke down" in events[-1]["error"]["message"]
        assert text.rstrip().endswith("data: [DONE]")
        m = metrics_of(srv.url)
        assert m[("pymtp_requests_total", (("endpoint", "/v1/completions"), ("outcome", "server_error")))] == 1
        assert ("pymtp_requests_total", (("endpoint", "/v1/completions"), ("outcome", "ok"))) not in m


def test_logit_bias_and_penalties_reach_the_sampler(served, client):
    prompt = "def f(x"
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=0)
    tokens = pymtp.generate(prompt, served.model, max_tokens=6, speculative=False).tokens
    # a bias of -100 on the greedy first token makes the model say something else
    other = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=6, temperature=0, logit_bias={str(tokens[0]): -100}
    )
    assert served.model.detokenize(tokens) == plain.choices[0].text
    assert other.choices[0].text != plain.choices[0].text
    # a large presence penalty keeps greedy output from repeating a token within the window
    pen = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0, presence_penalty=2.0, extra_body={"ignore_eos": True}
    )
    assert pen.choices[0].text
    status, _, body = call(served.url + "/v1/completions", {"model": MODEL, "prompt": prompt, "logit_bias": {"x": 1}})
    assert status == 400 and error_of(body)["param"] == "logit_bias"
    status, _, body = call(
        served.url + "/v1/completions", {"model": MODEL, "prompt": prompt, "logit_bias": {str(served.model.n_vocab): 1}}
    )
    assert status == 400 and "outside the vocabulary" in error_of(body)["message"]


def test_logprobs_of_the_chosen_tokens(served, client):
    import math

    r = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=8,
        temperature=0,
        logprobs=True,
        extra_body={"ignore_eos": True},
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    # (a token can be part of a UTF-8 character: its bytes join up, its text may not)
    assert b"".join(bytes(c.bytes) for c in content).decode("utf-8", "replace") == r.choices[0].message.content
    assert all(c.logprob <= 0 and math.isfinite(c.logprob) and c.top_logprobs == [] for c in content)
    c = client.completions.create(
        model=MODEL, prompt="def f(x", max_tokens=6, temperature=0, logprobs=0, extra_body={"ignore_eos": True}
    )
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 6 and all(x <= 0 for x in lp.token_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0])
    for body in ({"logprobs": False, "top_logprobs": 2}, {"logprobs": True, "top_logprobs": 21}):
        status, _, err = call(
            served.url + "/v1/chat/completions",
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **body},
        )
        assert status == 400 and error_of(err)["param"] == "top_logprobs", body


def test_top_logprobs(served, client):
    """The likeliest tokens of each row (greedy: the chosen one first, at its logprob), as
    pymtp.generate gives them; chat's top_logprobs and completions' logprobs=n."""
    msgs = [{"role": "user", "content": "hi"}]
    r = client.chat.completions.create(
        model=MODEL,
        messages=msgs,
        max_tokens=8,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body={"ignore_eos": True},
    )
    content = r.choices[0].logprobs.content
    assert len(content) == 8
    for c in content:
        assert len(c.top_logprobs) == 3 and c.top_logprobs[0].bytes == c.bytes
        assert abs(c.top_logprobs[0].logprob - c.logprob) < 1e-5
        assert c.top_logprobs[0].logprob >= c.top_logprobs[1].logprob >= c.top_logprobs[2].logprob
    ref = pymtp.generate(
        served.model.apply_chat_template(msgs), served.model, max_tokens=8, ignore_eos=True, top_logprobs=3
    )
    assert [[bytes(a.bytes) for a in c.top_logprobs] for c in content] == [
        [served.model.token_bytes(t) for t, _ in row] for row in ref.top_logprobs
    ]
    c = client.completions.create(
        model=MODEL, prompt="def f(x", max_tokens=6, temperature=0, logprobs=2, extra_body={"ignore_eos": True}
    )
    lp = c.choices[0].logprobs
    assert len(lp.top_logprobs) == 6 and all(len(d) <= 2 for d in lp.top_logprobs)
    assert all(abs(max(d.values()) - x) < 1e-5 for d, x in zip(lp.top_logprobs, lp.token_logprobs))
    # streamed: the same alternatives, spread over the chunks
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=msgs,
            max_tokens=8,
            temperature=0,
            logprobs=True,
            top_logprobs=3,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    streamed = [c for ch in chunks for choice in ch.choices if choice.logprobs for c in choice.logprobs.content]
    assert [[a.token for a in c.top_logprobs] for c in streamed] == [[a.token for a in c.top_logprobs] for c in content]


@pytest.mark.parametrize("stop", [None, ["("]])
def test_streamed_logprobs_equal_the_whole_responses(served, client, stop):
    """Streamed, every chunk carries the logprobs of the tokens generated since the last one:
    joined, they are the non-streamed response's, token for token (stop strings included)."""
    msgs = [{"role": "user", "content": "Write a function."}]
    kw = dict(model=MODEL, max_tokens=24, temperature=0, logprobs=True, stop=stop, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(messages=msgs, **kw).choices[0]
    chunks = list(client.chat.completions.create(messages=msgs, stream=True, **kw))
    streamed = [c for ch in chunks for choice in ch.choices if choice.logprobs for c in choice.logprobs.content]
    assert [(c.token, c.logprob) for c in streamed] == [(c.token, c.logprob) for c in whole.logprobs.content]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.message.content
    assert sum(1 for ch in chunks if ch.choices and ch.choices[0].logprobs) >= 2  # spread over chunks
    # completions: token_logprobs joined up the same way
    ck = dict(
        model=MODEL,
        prompt="def f(x",
        max_tokens=12,
        temperature=0,
        logprobs=0,
        stop=stop,
        extra_body={"ignore_eos": True},
    )
    whole = client.completions.create(**ck).choices[0].logprobs
    parts = [
        c.choices[0].logprobs
        for c in client.completions.create(stream=True, **ck)
        if c.choices and c.choices[0].logprobs
    ]
    assert [t for p in parts for t in p.token_logprobs] == whole.token_logprobs
    assert [t for p in parts for t in p.tokens] == whole.tokens


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_failed_step_is_a_500_logged_once_with_the_request_id(served, monkeypatch, caplog, parallel):
    """An engine failure inside a step is the server's, not the client's: a 500 naming the request
    id (also in x-request-id), and one error record with that id in the log."""
    from pymtp._native import InvalidArgumentError
    from pymtp.batch import Batch
    from pymtp.speculator import MTPSpeculator

    def broken(*a, **k):
        raise InvalidArgumentError("the kernel broke")

    monkeypatch.setattr(Batch if parallel > 1 else MTPSpeculator, "step", broken)
    with _Server(create_app(served.model, model_name=MODEL, parallel=parallel)) as srv:
        caplog.clear()
        status, hdrs, body = call(
            f"{srv.url}/v1/completions", {"prompt": "hi", "max_tokens": 4}, {"X-Request-Id": "trace-123"}
        )
        assert status == 500 and hdrs["x-request-id"] == "trace-123"
        err = error_of(body)
        assert err["type"] == "server_error" and "the kernel broke" in err["message"] and "trace-123" in err["message"]
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and "trace-123" in errors[0].getMessage() and errors[0].exc_info
        status, hdrs, _ = call(f"{srv.url}/v1/completions", {"prompt": "hi", "max_tokens": 4})
        assert status == 500 and hdrs["x-request-id"].startswith("req_")
