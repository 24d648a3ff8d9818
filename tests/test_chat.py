"""pymtp.chat: chat-template formatting, end-of-turn stop strings, generation."""

from __future__ import annotations

import pytest
from conftest import CHATML

import pymtp
from pymtp.chat import chat, chat_prompt, chat_stop_strings, chat_stream, normalize_messages
from pymtp.errors import UnsupportedError


@pytest.fixture(scope="module")
def chat_model(gguf, tmp_path_factory):
    path = gguf("glm4moe", chat_template=CHATML)
    m = pymtp.load(path, n_ctx=512)
    yield m
    m.close()


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]


def test_normalize_messages():
    assert normalize_messages("hi") == [{"role": "user", "content": "hi"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert normalize_messages(parts) == [{"role": "user", "content": "ab"}]
    assert normalize_messages([{"role": "assistant", "content": None}]) == [{"role": "assistant", "content": ""}]
    with pytest.raises(ValueError):
        normalize_messages([])
    with pytest.raises(ValueError):
        normalize_messages([{"content": "no role"}])
    with pytest.raises(ValueError, match="only text"):
        normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_prompt_and_stop_strings(chat_model):
    assert chat_prompt(chat_model, MESSAGES) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat_stop_strings(chat_model) == ("<|im_end|>",)


@pytest.mark.parametrize(
    "name, marker",
    [("chatml", "<|im_end|>"), ("llama3", "<|eot_id|>"), ("gemma", "<end_of_turn>"), ("phi3", "<|end|>")],
)
def test_stop_strings_of_builtin_templates(models, name, marker):
    assert chat_stop_strings(models("glm4moe"), name) == (marker,)


def test_chat_matches_generate_on_the_formatted_prompt(chat_model):
    r = chat(MESSAGES, chat_model, max_tokens=12)
    prompt = chat_prompt(chat_model, MESSAGES)
    ref = pymtp.generate(prompt, chat_model, max_tokens=12, stop=["<|im_end|>"])
    assert r.text == ref.text and r.prompt_tokens == ref.prompt_tokens
    s = chat_stream(MESSAGES, chat_model, max_tokens=12)
    assert "".join(s) == r.text and s.result.tokens == r.tokens


def test_chat_passes_the_end_marker_as_stop(chat_model, monkeypatch):
    import sys

    mod = sys.modules["pymtp.chat"]  # (pymtp.chat may be the function once exported)
    seen = {}

    def fake_generate(prompt, model, **kw):
        seen.update(kw, prompt=prompt)
        return "ok"

    monkeypatch.setattr(mod, "generate", fake_generate)
    assert chat("hi", chat_model, stop="X", max_tokens=3) == "ok"
    assert seen["stop"] == ["X", "<|im_end|>"] and seen["max_tokens"] == 3
    assert seen["prompt"] == chat_model.tokenize(chat_prompt(chat_model, "hi"), parse_special=True)
    chat("hi", chat_model, stop_at_end_marker=False)
    assert seen["stop"] is None


def test_end_marker_stops_skip_special_tokens(chat_model, monkeypatch):
    import sys

    mod = sys.modules["pymtp.chat"]
    assert mod.end_marker_stops(chat_model) == ("<|im_end|>",)  # plain text in the fixture's vocabulary
    # <|eos|> is one end-of-generation token: it stops by itself, a stop string could never match it
    monkeypatch.setattr(mod, "chat_stop_strings", lambda m, t=None: ("<|eos|>", "<|im_end|>"))
    assert mod.end_marker_stops(chat_model) == ("<|im_end|>",)


def test_chat_stop_string_cuts_the_reply(chat_model):
    full = chat("hi", chat_model, max_tokens=12)
    cut = [c for c in full.text[2:] if c != "\ufffd"][0]
    r = chat("hi", chat_model, max_tokens=12, stop=cut)
    assert r.finish_reason == "stop" and r.text == full.text[: full.text.index(cut)]


def test_chat_without_template(models):
    m = models("glm4moe")
    with pytest.raises(UnsupportedError, match="chat template"):
        chat("hi", m, max_tokens=4)
    r = chat("hi", m, template="chatml", max_tokens=4, speculative=False)
    assert len(r.tokens) == 4
