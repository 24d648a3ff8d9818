"""pymtp.mtp_drafter after plain steps: the head is fed only the last CATCH_UP_KEEP tokens that
plain steps emitted (the rest is a closed gap in its KV), on an echo fixture whose head always
agrees: how many rows the draft after plain steps decodes, that the text stays lossless, and that
the head's positions stay right through drafts, rollbacks, a cut (truncate) and save / load."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import SamplingConfig, SpecConfig
from pymtp.bench.echo import EchoMaps, make_echo
from pymtp.fixed_policy import DraftPolicy
from pymtp.mtp_drafter import CATCH_UP_KEEP, MTPDrafter
from pymtp.speculator import MTPSpeculator


class Scripted(DraftPolicy):
    """Draft lengths from a list (then plain steps)."""

    def __init__(self, spec: SpecConfig, n_max: int, script: list[int]) -> None:
        super().__init__(spec, n_max)
        self.script = list(script)

    def next_length(self, n_past: int = 0, rows_before: int = 0, tokens_before: float = 0.0) -> int:
        return self.script.pop(0) if self.script else 0


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    path = make_echo(tmp_path_factory.mktemp("echo_gap") / "echo-1.gguf", 1.0)
    sess = pymtp.load(path, n_ctx=1024)
    yield sess, EchoMaps.read(path)
    sess.close()


def speculator(sess, prompt: list[int], script: list[int]) -> MTPSpeculator:
    sp = MTPSpeculator(sess.target, sess.draft, SamplingConfig(), SpecConfig(n_draft=4))
    sp.start(prompt)
    sp.policy = Scripted(sp.spec, 4, script)
    return sp


def head_rows(monkeypatch, drafter: MTPDrafter) -> list[int]:
    """Rows of each draft decode from now on (the head's greedy recursion aside: one row per
    drafted token, in C)."""
    rows: list[int] = []
    real = drafter.ctx.decode_rows

    def counting(tokens, *args, **kw):
        rows.append(len(tokens))
        return real(tokens, *args, **kw)

    monkeypatch.setattr(drafter.ctx, "decode_rows", counting)
    return rows


def head_end(d: MTPDrafter) -> int:
    """The head's KV end, as a target position."""
    return d.ctx.pos_max() + 1 + d._shift


def test_a_draft_after_40_plain_steps_feeds_the_head_a_few_tokens(echo, monkeypatch):
    sess, maps = echo
    prompt = sess.tokenize("def f(x):")
    sp = speculator(sess, prompt, [2] + [0] * 40 + [3])
    d = sp.drafter
    assert isinstance(d, MTPDrafter)
    sp.step()  # the prompt is fed with the first draft
    for _ in range(40):
        assert not sp.step().drafted
    rows = head_rows(monkeypatch, d)
    r = sp.step()
    # the last CATCH_UP_KEEP tokens of the plain steps, then the last token (a draft of more
    # than one token decodes it on its own); the old catch-up fed the first draft's 2 accepted
    # tokens and all 40 plain steps' tokens: 2 + 40 + 1 rows
    assert rows == [CATCH_UP_KEEP, 1]
    assert d.skipped == 2 + 40 - CATCH_UP_KEEP
    assert r.drafted and r.n_accepted == len(r.drafted) == 3  # the head still agrees after the gap
    assert sp.tokens[len(prompt) :] == maps.greedy(prompt[-1], len(sp.tokens) - len(prompt))


def test_short_runs_of_plain_steps_and_the_prompt_are_fed_whole(echo, monkeypatch):
    sess, _ = echo
    prompt = sess.tokenize("def f(x): return x + 1 if x else 2")
    sp = speculator(sess, prompt, [0] * CATCH_UP_KEEP + [1])
    for _ in range(CATCH_UP_KEEP):
        sp.step()
    rows = head_rows(monkeypatch, sp.drafter)
    sp.step()
    # the prompt body (but its first token, which pairs with no row), the plain steps, the last
    assert sum(rows) == (len(prompt) - 2) + CATCH_UP_KEEP + 1
    assert sp.drafter.skipped == 0


def test_positions_stay_right_through_gaps_drafts_and_rollbacks(echo):
    """Runs of plain steps between drafts (each a gap), drafts of every length: the head's KV
    ends where the text does after every draft, and the text is the echo's greedy one."""
    sess, maps = echo
    prompt = sess.tokenize("def f(x):")
    script = [0] * 20 + [2, 4, 1] + [0] * 15 + [3] + [0] * 9 + [4, 4] + [0] * 30 + [1, 0, 2]
    sp = speculator(sess, prompt, script)
    d = sp.drafter
    gaps = 0
    for _ in range(len(script)):
        r = sp.step()
        if r.drafted:
            assert r.n_accepted == len(r.drafted)
            # the head holds every position up to the last token (as a target position)
            assert head_end(d) == sp.n_past - len(r.emitted) + 1
            gaps += 1
    # every run of plain steps but its last CATCH_UP_KEEP tokens is skipped, and what was queued
    # before it: the prompt (but its first token and its last, which the first plain step hands
    # off), a draft's accepted tokens
    queued_before = [len(prompt) - 2, 1, 3, 4]
    runs = [20, 15, 9, 30]
    assert d.skipped == sum(q + n - CATCH_UP_KEEP for q, n in zip(queued_before, runs))
    assert sp.tokens[len(prompt) :] == maps.greedy(prompt[-1], len(sp.tokens) - len(prompt))


def gapped(sess) -> MTPSpeculator:
    """A text of a draft, 30 plain steps and two drafts (a gap in the head's KV)."""
    sp = speculator(sess, sess.tokenize("def f(x):"), [2] + [0] * 30 + [2, 2])
    for _ in range(33):
        sp.step()
    assert sp.drafter._gap_at is not None and sp.drafter._shift == 2 + 30 - CATCH_UP_KEEP
    return sp


def test_a_prompt_that_cuts_the_text_above_the_gap_reuses_it_and_stays_lossless(echo):
    sess, maps = echo
    sp = gapped(sess)
    d = sp.drafter
    cut = d._gap_at + d._shift + 2  # a target position past the skipped ones
    wrong = (sp.tokens[cut] + 1) % sess.model.n_vocab
    prompt = sp.tokens[:cut] + [wrong]
    sp.start(prompt)
    assert sp.stats.n_reused == cut - 1  # (the target hands the head the row before the cut)
    assert d._shift == 2 + 30 - CATCH_UP_KEEP and head_end(d) == cut
    sp.policy = Scripted(sp.spec, 4, [3, 0, 0, 2, 4])
    for _ in range(5):
        r = sp.step()
        assert r.n_accepted == len(r.drafted)
    assert sp.tokens[len(prompt) :] == maps.greedy(wrong, len(sp.tokens) - len(prompt))


def test_a_prompt_that_cuts_the_text_inside_the_gap_reuses_the_targets_prefix_and_stays_lossless(echo):
    """A new prompt that shares the text up to a position the head skipped: the target keeps that
    whole prefix (it went back to the gap before), and the head's gap ends at the cut."""
    sess, maps = echo
    sp = gapped(sess)
    d = sp.drafter
    gap = d._gap_at
    cut = gap + 3  # a target position among the skipped ones
    wrong = (sp.tokens[cut] + 1) % sess.model.n_vocab
    prompt = sp.tokens[:cut] + [wrong]
    sp.start(prompt)
    # the head skips the token at the cut too: the target decodes nothing again
    assert sp.stats.n_reused == cut and not d.row_before_cut
    assert (d._gap_at, d._shift) == (gap, 3) and head_end(d) == cut
    sp.policy = Scripted(sp.spec, 4, [3, 0, 0, 2, 4])
    drafted = []
    for _ in range(5):
        r = sp.step()
        assert r.n_accepted == len(r.drafted)
        drafted.append(len(r.drafted))
    # (the first step has no row to pair with its last token: it decodes plainly)
    assert drafted == [0, 0, 0, 2, 4] and d._shift == 4
    assert sp.tokens[len(prompt) :] == maps.greedy(wrong, len(sp.tokens) - len(prompt))


def test_a_cut_inside_the_gap_ends_the_gap_there_and_save_load_keep_the_shift(echo):
    sess, _ = echo
    d = gapped(sess).drafter
    saved = d.save()  # (feeds the queue first)
    gap, shift, end = d._gap_at, d._shift, d._kv_end
    assert head_end(d) == end
    assert (saved.shift, saved.gap_at) == (shift, gap)
    kept = d.truncate(end - 2)
    assert kept == end - 2 and head_end(d) == kept and d._shift == shift
    d.load(saved)
    assert head_end(d) == end and (d._shift, d._gap_at) == (shift, gap)
    kept = d.truncate(gap + 3)  # inside the skipped positions: the target keeps them all
    assert kept == gap + 3 and d._shift == 3 and d._gap_at == gap and d.ctx.pos_max() + 1 == gap
    assert head_end(d) == kept
    d.truncate(gap - 1)  # below the gap: the positions are the target's again
    assert d._shift == 0 and d._gap_at is None and head_end(d) == gap - 1
