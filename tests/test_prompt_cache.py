"""Saved texts (pymtp.prompt_cache): several conversations cached per session within a byte
budget, hybrids resuming from the end of their last prompt, and a cache written to disk and
read back by another session. Greedy output always equals a fresh start."""

from __future__ import annotations

import numpy as np
import pytest
from test_reuse import FAMILIES_ALL, RECURRENT, fresh, spec_kw

import pymtp
from pymtp import prompt_cache, speculator
from pymtp.errors import PymtpError
from pymtp_testing.fixtures import FAMILIES

CONVERSATIONS = ("def add(a, b):", "# A tiny web server\nimport", "class Stack:\n    def push(self, x):")


@pytest.fixture
def session(gguf):
    """A fresh session per test: saved texts of other tests stay out."""
    made = []

    def make(family: str, **kw) -> pymtp.Session:
        made.append(pymtp.load(gguf(family), n_ctx=512, **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize("family", FAMILIES_ALL)
def test_alternating_conversations_come_back_from_the_cache(family, session, same_greedy):
    s = session(family)
    kw = spec_kw(s)
    convs = [s.tokenize(c) for c in CONVERSATIONS]
    held = [0] * len(convs)  # what the target KV held after each one's last turn
    for turn in range(3):
        for i, conv in enumerate(convs):
            r = pymtp.generate(conv, s, **kw)
            same_greedy(s, conv, r.tokens, fresh(s, conv, **kw).tokens)
            if turn > 0:  # its text was saved when another took over
                assert r.stats.reused_saved and r.stats.n_reused == held[i], (turn, i, r.stats)
            held[i] = len(conv) + len(r.tokens) - 1
            convs[i] = conv + r.tokens + s.tokenize("\n", add_special=False)
    assert len(s.prompt_cache) == len(convs) - 1  # the live one is not among them
    same_greedy.assert_ties_rare()


@pytest.mark.parametrize("family", sorted(RECURRENT))
def test_a_hybrid_resumes_from_the_end_of_its_prompt(family, session, same_greedy):
    s = session(family)
    kw = spec_kw(s)
    p = s.tokenize("def parse(line):\n    ")
    r1 = pymtp.generate(p, s, **kw)
    # the same prompt again (another sample, a regenerated reply), then one that shares the
    # prompt but not the reply: both decode only the last prompt token, from the snapshot
    other = p + s.tokenize(" return", add_special=False)
    assert other[len(p)] != r1.tokens[0] or other[len(p) + 1 :] != r1.tokens[1 : len(other) - len(p)]
    for prompt in (p, other):
        r = pymtp.generate(prompt, s, **kw)
        assert r.stats.n_reused == len(p) - 1, r.stats
        same_greedy(s, prompt, r.tokens, fresh(s, prompt, **kw).tokens)
    # a prompt that diverges inside the last prompt has no snapshot: a full prefill, said so
    cut = p[: len(p) - 3] + s.tokenize(" x = 1", add_special=False)
    r = pymtp.generate(cut, s, **kw)
    assert r.stats.n_reused == 0 and "recurrent state" in r.stats.reuse_miss
    same_greedy(s, cut, r.tokens, fresh(s, cut, **kw).tokens)
    same_greedy.assert_ties_rare()


def test_the_cache_stays_within_its_budget(session):
    s = session("glm4moe", cache_mb=1)
    kw = spec_kw(s)
    convs = [s.tokenize(f"{chr(65 + i)} = [1, 2, 3]\n" * 8) for i in range(12)]
    pymtp.generate(convs[0], s, **kw)
    one = s.prompt_cache.nbytes + s.speculator(spec=pymtp.SpecConfig()).save().nbytes
    s.prompt_cache.max_bytes = 4 * one + one // 2  # room for four texts like it
    sizes = []
    for conv in convs[1:]:
        pymtp.generate(conv, s, **kw)
        assert s.prompt_cache.nbytes <= s.prompt_cache.max_bytes
        sizes.append(len(s.prompt_cache))
    assert sizes[-1] == 4  # the budget is full: the oldest went out
    assert pymtp.generate(convs[0], s, **kw).stats.n_reused == 0
    r = pymtp.generate(convs[-2], s, **kw)
    # the prompt stops inside the saved text, at its own end: the head kept that position's row,
    # so nothing is decoded again (MTPDrafter.keep_row_at)
    assert r.stats.reused_saved and r.stats.n_reused == len(convs[-2]) - 1


def test_no_prompt_cache_keeps_only_the_live_text(session):
    s = session("glm4moe", cache_mb=0)
    kw = spec_kw(s)
    a, b = (s.tokenize(c) for c in CONVERSATIONS[:2])
    for conv in (a, b):
        pymtp.generate(conv, s, **kw)
    assert len(s.prompt_cache) == 0
    assert pymtp.generate(a, s, **kw).stats.n_reused == 0


def test_a_wrong_restore_is_caught(session, same_greedy, monkeypatch):
    """Control: a cache that hands out a saved text for a prompt it does not prefix gives
    output a fresh start does not, and the comparison above would fail on it."""
    with pymtp.load("tiny", n_ctx=512) as s:  # a trained model: its output depends on the context
        kw = spec_kw(s)
        a, b = s.tokenize("def parse(line):"), s.tokenize("while True:\n    line = input()")
        c = s.tokenize("for i in range(10):")
        pymtp.generate(a, s, **kw)
        pymtp.generate(b, s, **kw)  # a is saved
        monkeypatch.setattr(
            prompt_cache.PromptCache, "best", lambda self, *args: (next(iter(self._texts), None), 10**6)
        )
        monkeypatch.setattr(
            speculator,
            "usable_prefix",
            lambda tokens, n_past, mark, recurrent, prompt, min_cut=0: (min(n_past, len(prompt) - 1), ""),
        )
        wrong = pymtp.generate(c, s, **kw)  # a's cache, taken for a prompt it does not prefix
        assert wrong.stats.reused_saved and wrong.stats.n_reused > 0
        with pytest.raises(AssertionError):
            same_greedy(s, c, wrong.tokens, fresh(s, c, **kw).tokens)


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "step35"])
def test_a_saved_conversation_resumes_in_another_session(family, gguf, tmp_path, same_greedy):
    path = gguf(family)
    with pymtp.load(path, n_ctx=512) as s:
        kw = spec_kw(s)
        p = s.tokenize("def parse(line):\n    ")
        r1 = pymtp.generate(p, s, **kw)
        saved = s.save_state(tmp_path / "conv.npz")
    with pymtp.load(path, n_ctx=512) as s2:  # an agent that restarted
        assert s2.load_state(saved) == len(p) + len(r1.tokens) - 1
        p2 = p + r1.tokens + s2.tokenize("\nclass Reader:", add_special=False)
        r2 = pymtp.generate(p2, s2, **kw)
        assert r2.stats.reused_saved and r2.stats.n_reused == len(p) + len(r1.tokens) - 1
        same_greedy(s2, p2, r2.tokens, fresh(s2, p2, **kw).tokens)


def test_a_saved_file_is_checked_before_llama_cpp_reads_it(gguf, tmp_path):
    with pymtp.load(gguf("glm4moe"), n_ctx=512) as s:
        with pytest.raises(pymtp.UnsupportedError, match="generated nothing"):
            s.save_state(tmp_path / "none.npz")
        kw = spec_kw(s)
        p = s.tokenize("def parse(line):")
        pymtp.generate(p, s, **kw)
        good = s.save_state(tmp_path / "conv.npz")
        pymtp.generate(s.tokenize("import os"), s, **kw)  # another text is live now
        (tmp_path / "junk.npz").write_bytes(b"not a numpy file")
        with pytest.raises(ValueError, match="not a pymtp saved text"):
            s.load_state(tmp_path / "junk.npz")
        with np.load(good) as z:
            arrays = {k: z[k] for k in z.files}
        # bytes that pass the checks but that llama.cpp refuses: an error, and the session goes on
        bad = dict(arrays, target=arrays["target"][: len(arrays["target"]) // 2])
        np.savez(tmp_path / "torn.npz", **bad)
        s.load_state(tmp_path / "torn.npz")
        p2 = p + s.tokenize(" return", add_special=False)
        with pytest.raises(PymtpError, match="rejected the saved state"):
            pymtp.generate(p2, s, **kw)
        r = pymtp.generate(p2, s, **kw)
        assert r.stats.n_reused == 0 and len(r.tokens) == kw["max_tokens"]
    with pymtp.load(gguf("qwen35"), n_ctx=512) as other:
        with pytest.raises(ValueError, match="another model"):
            other.load_state(good)
    with pymtp.load(gguf("glm4moe"), n_ctx=16) as small:
        with pytest.raises(ValueError, match="do not fit this context"):
            small.load_state(good)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f in ("glm4moe", "qwen35")])
def test_plain_decoding_reuses_saved_texts_too(family, session, same_greedy):
    s = session(family)
    a, b = (s.tokenize(c) for c in CONVERSATIONS[:2])
    ra = pymtp.generate(a, s, max_tokens=6, speculative=False)
    pymtp.generate(b, s, max_tokens=6, speculative=False)
    a2 = a + ra.tokens
    r = pymtp.generate(a2, s, max_tokens=6, speculative=False)
    assert r.stats.reused_saved and r.stats.n_reused == len(a) + len(ra.tokens) - 1
    same_greedy(s, a2, r.tokens, fresh(s, a2, max_tokens=6, speculative=False).tokens)


@pytest.mark.parametrize("family", ["step35", "mimo2"])
def test_sliding_window_texts_are_cut_only_where_the_window_allows(family, session, same_greedy):
    """llama.cpp saves a sliding-window layer's last n_swa positions only: a restored text can
    be extended, not cut (a cut would decode against keys that are gone)."""
    s = session(family)
    assert s.model.n_swa > 0
    p = s.tokenize("def f(x):\n    return x + 1\n\ndef f(x):\n")
    kw = dict(max_tokens=24, ignore_eos=True)
    assert len(p) > s.model.n_swa
    first = pymtp.generate(p, s, speculative=False, **kw)  # saved when the MTP run takes over
    pymtp.generate(p, s, speculative=True, **kw)
    r = pymtp.generate(p, s, speculative=False, **kw)  # would cut the saved text at len(p) - 1
    assert not r.stats.reused_saved and r.stats.n_reused == 0
    same_greedy(s, p, r.tokens, first.tokens)
    ext = p + r.tokens  # extends the live text: kept whole
    pymtp.generate(s.tokenize("import os"), s, speculative=False, **kw)
    r2 = pymtp.generate(ext, s, speculative=False, **kw)
    assert r2.stats.reused_saved and r2.stats.n_reused == len(ext) - 1
    same_greedy(s, ext, r2.tokens, fresh(s, ext, speculative=False, **kw).tokens)


def test_state_bytes_round_trip_and_an_empty_state_empties_the_sequence(gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=512) as s:
        t = s.target
        t.seq_rm(0)
        empty = t.get_state()
        t.decode(s.tokenize("def f(x):"), 0)
        full = t.get_state()
        held = t.pos_max()
        t.set_state(empty)  # llama.cpp alone would leave the sequence as it was
        assert t.pos_max() == -1
        t.set_state(full)
        assert t.pos_max() == held and t.pos_min() == 0
        with pytest.raises(PymtpError, match="rejected"):
            t.set_state(full[:20])
        assert t.pos_max() == -1  # a refused state leaves the sequence empty, as documented
