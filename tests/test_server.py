"""The OpenAI-compatible server (pymtp.server) on a real uvicorn, driven by the official openai client.

Servers listen on 127.0.0.1 only (an ephemeral port), requests are few and short
(max_tokens <= 24 on the tiny fixtures), every client call has a timeout.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest
import uvicorn
from conftest import CHATML

import pymtp
from pymtp.chat import chat
from pymtp.server import create_app
from pymtp.server.runner import RunnerBase

TIMEOUT = 30


class _Server:
    """uvicorn in a background thread on 127.0.0.1:<free port>."""

    def __init__(self, app, lifespan: str = "on") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        cfg = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan=lifespan)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()

    def client(self):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=TIMEOUT)


class ScriptedRunner(RunnerBase):
    """A runner whose worker hands each choice the events script(job) gives, (kind, value) pairs,
    instead of running the model: the queue, tickets, cancels and responses are the real ones."""

    def __init__(self, session, script) -> None:
        super().__init__(session, None, 1, 64)
        self.script = script

    def _work(self) -> None:
        while (got := self.queue.take(1, wait=True)) is not None:
            for c in got:
                try:
                    for kind, value in self.script(c.job):
                        c.ticket.put(c.index, kind, value)
                finally:
                    self.queue.release()


@pytest.fixture(scope="module")
def chat_gguf(gguf, tmp_path_factory):
    return gguf("glm4moe", chat_template=CHATML)


@pytest.fixture(scope="module", params=[1, 4], ids=["one-at-a-time", "batched"])
def served(chat_gguf, request):
    """The server's tests run on both runners: one generation at a time (server.runner) and up
    to 4 in batched steps (server.batched)."""
    model = pymtp.load(chat_gguf, n_ctx=512)
    app = create_app(model, model_name="fixture-chat", parallel=request.param)
    with _Server(app) as srv:
        srv.parallel, srv.app = request.param, app
        srv.model = model
        yield srv
    model.close()


@pytest.fixture(scope="module")
def client(served):
    return served.client()


def post_raw(url: str, body: bytes | dict):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_models(client, served):
    models = client.models.list()
    assert [m.id for m in models.data] == ["fixture-chat"]
    card = models.data[0]
    assert card.owned_by == "pymtp"
    ext = card.model_extra["pymtp"]
    assert ext["architecture"] == "glm4moe" and ext["n_mtp_layers"] == 1 and ext["chat_template"] is True
    assert client.models.retrieve("fixture-chat").id == "fixture-chat"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_completion_matches_library(client, models):
    r = client.completions.create(model="fixture-chat", prompt="def f(x):", max_tokens=16, temperature=0)
    ref = pymtp.generate("def f(x):", models("glm4moe"), max_tokens=16)
    assert r.object == "text_completion"
    assert r.choices[0].text == ref.text
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 16 and r.usage.prompt_tokens == len(ref.prompt_tokens)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 16
    ext = r.model_extra["pymtp"]
    assert ext["speculative"] is True
    assert 0.0 <= ext["acceptance_rate"] <= 1.0
    assert ext["tokens_per_second"] > 0 and ext["mean_accepted"] >= 0
    assert isinstance(ext["acceptance_by_position"], list) and ext["acceptance_by_position"]


def test_draft_settings_per_request(client, models):
    """n_draft and p_min (extensions) size each request's drafts: p_min 1 drafts nothing, and the
    text stays the same."""
    kw = dict(model="fixture-chat", prompt="def f(x):", max_tokens=16, temperature=0)
    ref = client.completions.create(**kw, extra_body={"policy": "fixed"})  # auto may not draft on a fixture
    none = client.completions.create(**kw, extra_body={"p_min": 1.0})
    one = client.completions.create(**kw, extra_body={"n_draft": 1})
    assert none.choices[0].text == one.choices[0].text == ref.choices[0].text
    assert none.model_extra["pymtp"]["n_drafted"] == 0 < ref.model_extra["pymtp"]["n_drafted"]
    assert len(one.model_extra["pymtp"]["acceptance_by_position"]) == 1


def test_completion_plain_and_token_prompt(client, served):
    toks = served.model.tokenize("hello")
    r1 = client.completions.create(model="fixture-chat", prompt=toks, max_tokens=8, extra_body={"speculative": False})
    r2 = client.completions.create(model="fixture-chat", prompt="hello", max_tokens=8)
    assert r1.choices[0].text == r2.choices[0].text
    assert r1.model_extra["pymtp"]["speculative"] is False
    assert r1.model_extra["pymtp"]["acceptance_by_position"] == []


def test_completion_stream(client):
    full = client.completions.create(model="fixture-chat", prompt="The cat", max_tokens=20)
    chunks = list(
        client.completions.create(
            model="fixture-chat", prompt="The cat", max_tokens=20, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert "acceptance_rate" in finals[0].model_extra["pymtp"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20


def test_chat_completion(client, served):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    r = client.chat.completions.create(model="fixture-chat", messages=messages, max_tokens=12)
    ref = chat(messages, served.model, max_tokens=12)
    assert r.object == "chat.completion"
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content == ref.text
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.prompt_tokens == len(ref.prompt_tokens)
    assert "mean_accepted" in r.model_extra["pymtp"]


def test_chat_completion_stream(client):
    messages = [{"role": "user", "content": "Tell me a story"}]
    full = client.chat.completions.create(model="fixture-chat", messages=messages, max_completion_tokens=16)
    chunks = list(
        client.chat.completions.create(model="fixture-chat", messages=messages, max_completion_tokens=16, stream=True)
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    assert "acceptance_by_position" in chunks[-1].model_extra["pymtp"]


def test_bad_parameters_are_400(client, served):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="fixture-chat", prompt="hi", max_tokens=4, temperature=-1)
    assert e.value.status_code == 400
    assert "temperature" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="fixture-chat", messages=[{"role": "user", "content": "hi"}], n=17)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="fixture-chat", prompt="hi", max_tokens=0)
    status, body = post_raw(f"{served.url}/v1/completions", {"prompt": "hi", "top_p": 5})
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == "top_p"
    assert isinstance(body["error"]["message"], str)
    status, body = post_raw(f"{served.url}/v1/chat/completions", b"{not json")
    assert status == 400 and "error" in body
    status, body = post_raw(f"{served.url}/v1/completions", {"prompt": ["a", "b"]})
    assert status == 400 and body["error"]["param"] == "prompt"


def test_context_full_maps_to_length(client):
    r = client.completions.create(model="fixture-chat", prompt="z" * 500, max_tokens=24)
    assert r.choices[0].finish_reason == "length"
    assert r.model_extra["pymtp"]["finish_reason"] == "context"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="fixture-chat", prompt="z" * 600, max_tokens=4)
    assert "context" in str(e.value)


def test_concurrent_requests_get_what_each_gets_alone(client, served):
    """Concurrent requests (streamed or not) answer as if alone; with parallel > 1 they shared
    batched steps."""
    prompts = ["abc", "def f(x):", "The", "import"]
    refs = [
        client.completions.create(model="fixture-chat", prompt=p, max_tokens=16, extra_body={"ignore_eos": True})
        .choices[0]
        .text
        for p in prompts
    ]
    out: list = [None] * 4

    def one(i: int) -> None:
        kw = dict(model="fixture-chat", prompt=prompts[i], max_tokens=16, extra_body={"ignore_eos": True})
        if i % 2 == 0:
            out[i] = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices)
        else:
            out[i] = client.completions.create(**kw).choices[0].text

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert out == refs
    if served.parallel > 1:
        assert served.app.state.runner.max_batch >= 2


def test_chat_without_template_is_400(models):
    model = models("glm4moe")
    with _Server(create_app(model, model_name="x")) as srv:
        c = srv.client()
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        assert "chat template" in str(e.value)
        # a completion on the same server still works
        assert c.completions.create(model="x", prompt="hi", max_tokens=4).usage.completion_tokens == 4


def test_client_disconnect_mid_stream(client):
    ref = client.completions.create(model="fixture-chat", prompt="abc", max_tokens=16).choices[0].text
    s = client.completions.create(
        model="fixture-chat", prompt="The", max_tokens=400, stream=True, extra_body={"ignore_eos": True}
    )
    next(iter(s))
    s.close()  # the server stops that generation after its current step
    assert client.completions.create(model="fixture-chat", prompt="abc", max_tokens=16).choices[0].text == ref


def test_app_on_a_model_has_a_session_of_its_own(models):
    session = models("glm4moe")
    app = create_app(session.model, model_name="m")  # a Model, not a Session: wrapped in one
    own = app.state.session
    assert isinstance(own, pymtp.Session) and own is not session and own.model is session.model
    with _Server(app, lifespan="on") as srv:
        r = srv.client().completions.create(model="m", prompt="def f(x):", max_tokens=8)
        assert r.choices[0].text == pymtp.generate("def f(x):", session, max_tokens=8).text
        assert not own.closed
    assert own.closed and not session.model.closed  # closed at shutdown; the model stays the caller's
