"""Prefix reuse: a Session keeps its KV caches between generations, and the next prompt decodes
only what it does not share with the cached text. Greedy output with reuse equals the output
of a fresh start, on every family (hybrids included), and a wrong reuse would be caught."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import SpecConfig
from pymtp.speculator import MTPSpeculator
from pymtp_testing.fixtures import FAMILIES

FAMILIES_ALL = [*FAMILIES, "glm4moe-nomtp"]
RECURRENT = {"qwen35", "qwen35moe", "qwen3next"}
N = 10


def fresh(session: pymtp.Session, prompt: list[int], **kw) -> pymtp.GenerationResult:
    """The same generation on new contexts (nothing cached)."""
    with pymtp.Session(session.model, n_ctx=session.n_ctx) as s:
        return pymtp.generate(prompt, s, **kw)


def spec_kw(session) -> dict:
    # fixed drafts: the auto policy's choices follow measured seconds, and these tests compare runs
    spec = SpecConfig(policy="fixed") if session.model.mtp_loaded else False
    return {"speculative": spec, "max_tokens": N, "ignore_eos": True}


@pytest.mark.parametrize("family", FAMILIES_ALL)
def test_reuse_equals_fresh_start(family, models, same_greedy):
    s = models(family)
    kw = spec_kw(s)
    p1 = s.tokenize("def parse(line):\n    ")
    r1 = pymtp.generate(p1, s, **kw)
    cached = len(p1) + len(r1.tokens) - 1  # what the target KV holds after turn 1

    # 1. The next prompt extends the cached text (a chat's next turn).
    p2 = p1 + r1.tokens + s.tokenize("\n\nclass Reader:", add_special=False)
    r2 = pymtp.generate(p2, s, **kw)
    assert r2.stats.n_reused == cached and r2.stats.reuse_miss == ""
    same_greedy(s, p2, r2.tokens, fresh(s, p2, **kw).tokens)

    # 2. It shares only part of the cached text.
    p3 = p2[: len(p1) + 2] + s.tokenize(" return None  # done", add_special=False)
    r3 = pymtp.generate(p3, s, **kw)
    if family in RECURRENT:
        assert r3.stats.n_reused == 0 and "recurrent state" in r3.stats.reuse_miss
    else:
        assert 0 < r3.stats.n_reused <= len(p1) + 2 and "diverges" in r3.stats.reuse_miss
    same_greedy(s, p3, r3.tokens, fresh(s, p3, **kw).tokens)

    # 3. It shares nothing.
    p4 = s.tokenize("import os\nimport sys\n")
    p4 = p4 if p4[0] != p3[0] else p4[1:]
    r4 = pymtp.generate(p4, s, **kw)
    assert r4.stats.n_reused == 0
    same_greedy(s, p4, r4.tokens, fresh(s, p4, **kw).tokens)
    same_greedy.assert_ties_rare()


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "step35"])
def test_alternating_conversations(family, models, same_greedy):
    s = models(family)
    kw = spec_kw(s)
    convs = [s.tokenize("def add(a, b):"), s.tokenize("# A tiny web server\nimport")]
    for _turn in range(3):
        for i, conv in enumerate(convs):
            r = pymtp.generate(conv, s, **kw)
            same_greedy(s, conv, r.tokens, fresh(s, conv, **kw).tokens)
            convs[i] = conv + r.tokens + s.tokenize("\n", add_special=False)
    same_greedy.assert_ties_rare()


@pytest.fixture(scope="module")
def tiny():
    with pymtp.load("tiny", n_ctx=512) as s:  # a trained model: its output depends on the context
        yield s


def test_a_wrong_reuse_is_caught(tiny, same_greedy, monkeypatch):
    """Control: a speculator that keeps the whole cache for a prompt the cache does not prefix
    gives output a fresh start does not, and the comparison above would fail on it."""
    s = tiny
    kw = spec_kw(s)

    def claim_everything(self, prompt):
        return min(self.n_past, len(prompt) - 1), ""

    monkeypatch.setattr(MTPSpeculator, "reusable_prefix", claim_everything)
    caught = 0
    for text in ("def parse(line):", "class Stack:\n    def push(self, x):", "for i in range(10):"):
        pymtp.generate(s.tokenize(text), s, **kw)
        other = s.tokenize("while True:\n    line = input()")
        wrong = pymtp.generate(other, s, **kw).tokens
        with pytest.raises(AssertionError):
            same_greedy(s, other, wrong, fresh(s, other, **kw).tokens)
        caught += 1
    assert caught == 3


def test_foreign_writes_void_the_cache(models, same_greedy):
    s = models("glm4moe")
    s.prompt_cache.clear()  # saved texts of earlier tests would serve the prompt
    kw = spec_kw(s)
    p = s.tokenize("def parse(line):")
    r1 = pymtp.generate(p, s, **kw)
    s.target.seq_rm(3)  # someone else cuts the KV
    p2 = p + r1.tokens
    r2 = pymtp.generate(p2, s, **kw)
    assert r2.stats.n_reused == 0 and "something else" in r2.stats.reuse_miss
    same_greedy(s, p2, r2.tokens, fresh(s, p2, **kw).tokens)


def test_plain_and_speculative_do_not_share_a_cache(models, same_greedy):
    s = models("glm4moe")
    p = s.tokenize("def parse(line):")
    pymtp.generate(p, s, max_tokens=N, speculative=True)
    r = pymtp.generate(p, s, max_tokens=N, speculative=False)
    assert r.stats.n_reused == 0  # a new speculator: full prefill
    r2 = pymtp.generate(p, s, max_tokens=N, speculative=False)
    assert r2.stats.n_reused == len(p) - 1
    assert r2.tokens == r.tokens


def test_chat_turns_prefill_only_the_new_messages(gguf):
    from conftest import CHATML

    with pymtp.load(gguf("glm4moe"), n_ctx=512) as s:
        msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
        r1 = pymtp.chat(msgs, s, template=CHATML, max_tokens=6, ignore_eos=True)
        msgs += [{"role": "assistant", "content": r1.text}, {"role": "user", "content": "more"}]
        r2 = pymtp.chat(msgs, s, template=CHATML, max_tokens=6, ignore_eos=True)
        assert r2.stats.n_reused >= len(r1.prompt_tokens) - 1
        assert r2.stats.n_reused < len(r2.prompt_tokens)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="RSS read from /proc")
def test_memory_stays_bounded_over_1000_alternating_conversations(gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=256, n_threads=1) as s:
        _alternate_1000(s)


def _alternate_1000(s):
    system = "# Helpers for the parser module, shared by both conversations\n"
    own = (
        "def add(a, b):\n    # add two numbers and return the sum of both\n    return a + b\n",
        "class Stack:\n    def __init__(self):\n        self.items = []  # the stack's items\n",
    )
    convs = [s.tokenize(system + text) for text in own]
    for i in range(50):  # warm up allocators and caches
        pymtp.generate(convs[i % 2], s, max_tokens=2)
    before = _rss_mb()
    for i in range(1000):
        r = pymtp.generate(convs[i % 2], s, max_tokens=2)
        # each comes back from its saved text (the other one was live), cut before the output
        # at its prompt's end, whose row the head kept: nothing is decoded again
        assert r.stats.reused_saved and r.stats.n_reused == len(convs[i % 2]) - 1
    assert len(s.prompt_cache) == 1
    growth = _rss_mb() - before
    print(f"RSS growth over 1000 alternating conversations: {growth:.1f} MB")
    assert growth < 16, f"RSS grew {growth:.1f} MB"


def test_plain_steps_keep_the_prefix_for_the_next_turn(models, same_greedy):
    """Steps that draft nothing (the auto policy's k = 0, here with costs that make drafting lose)
    leave the head's inputs queued; the next prompt that extends the text keeps the prefix."""
    from pymtp.policy import CostModel, use_costs

    s = models("glm4moe")
    s.prompt_cache.clear()
    use_costs(s.model, CostModel.table({1: 1.0, 2: 50.0}, c_draft=50.0))
    try:
        kw = {"speculative": SpecConfig(policy="auto"), "max_tokens": 6, "ignore_eos": True}
        p1 = s.tokenize("def parse(line):\n    return line.split()\n\n")
        r1 = pymtp.generate(p1, s, **kw)
        assert r1.stats.n_drafted == 0
        p2 = p1 + r1.tokens + s.tokenize("\n# next", add_special=False)
        r2 = pymtp.generate(p2, s, **kw)
    finally:
        use_costs(s.model, None)
    assert r2.stats.n_reused >= len(p1) + len(r1.tokens) - 2, r2.stats.reuse_miss
    same_greedy(s, p2, r2.tokens, fresh(s, p2, **{**spec_kw(s), "max_tokens": 6}).tokens)
