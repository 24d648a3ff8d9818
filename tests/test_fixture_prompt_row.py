"""The same prompt again with MTP drafting: the target decodes nothing at the start. The head at
position p pairs the token at p with the target's hidden row of p - 1; a start that keeps the
cached prompt used to re-decode its last position to hand that row over (one trunk decode a
generation: a retry, another sample, every bench repeat). MTPDrafter.keep_row_at keeps the row at
the prompt's end, through the prompt cache too; a cut anywhere else still re-decodes."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import TargetContext

PROMPT = "def f(x):\n    return x + 1\n\ndef g(y):\n"
SPEC = {"n_draft": 3}


@pytest.fixture
def decodes(monkeypatch):
    """Row counts of every target decode."""
    seen: list[int] = []
    decode = TargetContext.decode

    def counting(self, tokens, *a, **k):
        seen.append(len(tokens))
        return decode(self, tokens, *a, **k)

    monkeypatch.setattr(TargetContext, "decode", counting)
    return seen


def _start_decodes(session, prompt, decodes) -> list[int]:
    decodes.clear()
    session.speculator(None, pymtp.SpecConfig(**SPEC)).start(prompt)
    return list(decodes)


# qwen35 (a hybrid) resumes at its recurrent PromptMark, which never re-decoded: it checks that path stays exact
@pytest.mark.parametrize("family", ["glm4moe", "qwen35"])
def test_the_same_prompt_again_decodes_nothing_and_stays_exact(gguf, decodes, same_greedy, family):
    with pymtp.load(gguf(family), n_ctx=256) as s:
        prompt = s.tokenize(PROMPT)
        want = pymtp.generate(prompt, s, max_tokens=16, ignore_eos=True, speculative=False).tokens
        first = pymtp.generate(prompt, s, max_tokens=16, ignore_eos=True, speculative=SPEC)
        assert _start_decodes(s, prompt, decodes) == []
        again = pymtp.generate(prompt, s, max_tokens=16, ignore_eos=True, speculative=SPEC)
        assert again.stats.n_reused == len(prompt) - 1 and again.stats.n_drafted > 0
        same_greedy(s, prompt, first.tokens, want)
        same_greedy(s, prompt, again.tokens, want)
        # through the prompt cache: plain decoding in between stashes the MTP text
        pymtp.generate(prompt, s, max_tokens=16, ignore_eos=True, speculative=False)
        assert _start_decodes(s, prompt, decodes) == []
        same_greedy(s, prompt, pymtp.generate(prompt, s, max_tokens=16, ignore_eos=True, speculative=SPEC).tokens, want)


def test_a_cut_elsewhere_still_hands_the_row_over(gguf, decodes, same_greedy):
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as s:
        prompt = s.tokenize(PROMPT)
        pymtp.generate(prompt, s, max_tokens=16, ignore_eos=True, speculative=SPEC)
        shorter = prompt[:-3]  # keeps fewer positions than the prompt's end: the row is not known
        assert _start_decodes(s, shorter, decodes) == [1]
        got = pymtp.generate(shorter, s, max_tokens=16, ignore_eos=True, speculative=SPEC).tokens
        want = pymtp.generate(shorter, s, max_tokens=16, ignore_eos=True, speculative=False).tokens
        same_greedy(s, shorter, got, want)
