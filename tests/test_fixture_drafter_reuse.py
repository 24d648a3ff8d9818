"""A generation that switches a Session between plain and speculative decoding gets a new MTP
drafter (pymtp.session.Session.speculator); the trimmed draft vocabulary its draft context holds
already is taken as it is, not set and probed again (pymtp.mtp_drafter._VOCAB_SET): the bench
switches at every run, and this setup sat inside its timed region. Whatever set the context's
vocabulary since is seen, and the drafts stay the same."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import DraftContext
from pymtp.draft_vocab import frequent_tokens
from pymtp.mtp_drafter import MTPDrafter

SPEC = {"n_draft": 3, "draft_vocab": 100}
PROMPT = "def f(x):\n    return x + 1\n\ndef g(y):\n"


@pytest.fixture
def counted(monkeypatch):
    """Counts of DraftContext.set_vocab calls and of MTPDrafter probe decodes."""
    calls = {"set_vocab": 0, "probe": 0}
    set_vocab, probe = DraftContext.set_vocab, MTPDrafter._probe

    def counting_set_vocab(self, ids):
        calls["set_vocab"] += 1
        return set_vocab(self, ids)

    def counting_probe(self):
        calls["probe"] += 1
        return probe(self)

    monkeypatch.setattr(DraftContext, "set_vocab", counting_set_vocab)
    monkeypatch.setattr(MTPDrafter, "_probe", counting_probe)
    return calls


def _generate(session, spec):
    return pymtp.generate(PROMPT, session, max_tokens=16, ignore_eos=True, speculative=spec)


def test_a_new_drafter_takes_the_vocabulary_its_context_holds(gguf, counted, same_greedy):
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as s:
        first = _generate(s, SPEC)
        assert counted["probe"] == 1
        plain = _generate(s, False)  # the next speculative generation makes a new drafter
        before = dict(counted)
        again = _generate(s, SPEC)
        assert counted == before  # neither set nor probed again
        n = len(frequent_tokens(s.model, 100))
        assert first.stats.draft_vocab == again.stats.draft_vocab == n
        assert s._ensure_contexts()[1].vocab_size == n
        assert again.tokens == first.tokens
        same_greedy(s, s.tokenize(PROMPT), again.tokens, plain.tokens)


def test_a_vocabulary_changed_since_is_set_again(gguf, counted):
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as s:
        first = _generate(s, SPEC)
        _generate(s, False)
        s._ensure_contexts()[1].set_vocab([])  # someone else's change to the shared context
        probes = counted["probe"]
        again = _generate(s, SPEC)
        assert counted["probe"] == probes + 1
        assert again.stats.draft_vocab == first.stats.draft_vocab == len(frequent_tokens(s.model, 100))
        # and another size asked for is another vocabulary
        _generate(s, False)
        other = _generate(s, {**SPEC, "draft_vocab": 50})
        assert other.stats.draft_vocab == len(frequent_tokens(s.model, 50))
        assert s._ensure_contexts()[1].vocab_size == len(frequent_tokens(s.model, 50))


def test_chained_heads_keep_the_whole_vocabulary_across_switches(gguf):
    with pymtp.load(gguf("step35"), n_ctx=256) as s:
        for _ in range(2):
            assert _generate(s, SPEC).stats.draft_vocab == 0
            _generate(s, False)
