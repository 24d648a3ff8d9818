"""Rollback: KVTrim and CheckpointTrim against fake contexts (which native calls, in which
order), the choice of rollback_for, and on real models of each kind (glm4moe: KV trim, qwen35:
n_rs_seq snapshots, qwen3next: checkpoint + re-decode) that a step failing half-way leaves a
generation that goes on to the plain greedy text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import pymtp
from pymtp import SamplingConfig, SpecConfig
from pymtp.rollback import N_RS_SNAPSHOTS, CheckpointTrim, KVTrim, n_rs_seq_for, rollback_for


class FakeContext:
    """A target or draft context that records the calls a rollback makes."""

    def __init__(self, *, recurrent: bool = False, n_rs_seq: int = 0, is_draft: bool = False) -> None:
        self.model = SimpleNamespace(is_recurrent=recurrent)
        self.n_rs_seq = n_rs_seq
        self.is_draft = is_draft
        self.calls: list[tuple] = []

    def seq_rm(self, p0: int, p1: int = -1, *, seq_id: int = 0) -> None:
        self.calls.append(("seq_rm", p0))

    def checkpoint_save(self, seq_id: int = 0) -> None:
        self.calls.append(("checkpoint_save",))

    def checkpoint_restore(self, seq_id: int = 0) -> None:
        self.calls.append(("checkpoint_restore",))

    def decode(self, tokens, pos0: int, *, seq_id: int = 0, output=None) -> None:
        self.calls.append(("decode", list(tokens), pos0, None if output is None else list(output)))


# ---- the verbs, on fakes ---------------------------------------------------------------------------


def test_kv_trim_drops_positions():
    ctx = FakeContext()
    r = KVTrim(ctx)
    assert r.kind == "kv"
    r.mark(5, [7, 8, 9])  # nothing to save
    assert ctx.calls == []
    r.trim(6)
    r.trim(0)
    assert ctx.calls == [("seq_rm", 6), ("seq_rm", 0)]


def test_checkpoint_trim_restores_then_decodes_the_kept_prefix_again():
    ctx = FakeContext(recurrent=True)
    r = CheckpointTrim(ctx)
    assert r.kind == "checkpoint"
    r.mark(5, [7, 8, 9])  # a verify of [last, d1, d2] at 5, 6, 7
    assert ctx.calls == [("checkpoint_save",)]
    r.trim(7)  # keep [last, d1]
    assert ctx.calls[1:] == [("checkpoint_restore",), ("seq_rm", 5), ("decode", [7, 8], 5, [0, 1])]


def test_checkpoint_trim_to_the_mark_decodes_nothing():
    ctx = FakeContext(recurrent=True)
    r = CheckpointTrim(ctx)
    r.mark(5, [7, 8, 9])
    r.trim(5)  # a step that failed: back to before the verify
    assert ctx.calls == [("checkpoint_save",), ("checkpoint_restore",), ("seq_rm", 5)]


def test_checkpoint_trim_keeping_everything_or_unmarked_does_nothing():
    ctx = FakeContext(recurrent=True)
    r = CheckpointTrim(ctx)
    r.trim(3)  # no mark: nothing decoded that could be dropped
    assert ctx.calls == []
    r.mark(5, [7, 8, 9])
    r.trim(8)  # all of it kept
    r.trim(9)
    assert ctx.calls == [("checkpoint_save",)]


def test_checkpoint_trim_restores_at_most_once_per_mark():
    ctx = FakeContext(recurrent=True)
    r = CheckpointTrim(ctx)
    r.mark(5, [7, 8, 9])
    r.trim(6)
    r.trim(5)  # the checkpoint is spent
    assert ctx.calls == [("checkpoint_save",), ("checkpoint_restore",), ("seq_rm", 5), ("decode", [7], 5, [1])]
    r.mark(6, [4, 2])  # the next verify marks again
    r.trim(6)
    assert ctx.calls[4:] == [("checkpoint_save",), ("checkpoint_restore",), ("seq_rm", 6)]


@pytest.mark.parametrize(
    "recurrent, n_rs_seq, is_draft, max_rollback, kind",
    [
        (False, 0, False, 4, "kv"),  # attention: drop KV cells
        (True, 4, False, 4, "kv"),  # hybrid with enough snapshots
        (True, 4, False, 5, "checkpoint"),  # ... but not for drafts this long
        (True, 0, False, 1, "checkpoint"),  # no snapshots
        (True, 0, True, 4, "kv"),  # a draft context only drops its own rows
        (False, 0, False, 0, "kv"),
    ],
)
def test_rollback_for_chooses_once_per_context(recurrent, n_rs_seq, is_draft, max_rollback, kind):
    ctx = FakeContext(recurrent=recurrent, n_rs_seq=n_rs_seq, is_draft=is_draft)
    r = rollback_for(ctx, max_rollback)
    assert r.kind == kind and r.ctx is ctx


def test_snapshots_asked_for():
    assert n_rs_seq_for(SimpleNamespace(is_recurrent=True, supports_rollback=True)) == N_RS_SNAPSHOTS
    assert n_rs_seq_for(SimpleNamespace(is_recurrent=True, supports_rollback=False)) == 0
    assert n_rs_seq_for(SimpleNamespace(is_recurrent=False, supports_rollback=False)) == 0


# ---- real models: a step that fails half-way --------------------------------------------------------

KINDS = {"glm4moe": "kv", "qwen35": "kv", "qwen3next": "checkpoint"}
N_NEW = 24


@pytest.fixture(scope="module")
def session(gguf):
    """session(family) -> a Session private to this module (the tests make steps fail on it).
    One decode thread: llama.cpp's threads spin, and these tiny models decode faster alone."""
    cache: dict[str, pymtp.Session] = {}

    def get(family: str) -> pymtp.Session:
        if family not in cache:
            cache[family] = pymtp.load(gguf(family), n_ctx=256, n_threads=1)
        return cache[family]

    yield get
    for s in cache.values():
        s.close()


class Boom(Exception):
    pass


def fail_on(obj, name: str, calls: set[int]) -> list[tuple]:
    """Make obj.name raise Boom on the given calls (counted from 1), and work otherwise.
    Returns the list the arguments of the failed calls go to."""
    real = getattr(obj, name)
    count, failed = [0], []

    def wrapper(*args, **kwargs):
        count[0] += 1
        if count[0] in calls:
            failed.append(args)
            raise Boom(f"{name} call {count[0]}")
        return real(*args, **kwargs)

    setattr(obj, name, wrapper)
    return failed


def plain(session, prompt, n):
    return pymtp.generate(prompt, session, max_tokens=n, speculative=False, ignore_eos=True).tokens


# where a step fails: (object, method, failing calls, check of the failed calls' arguments)
INJECTIONS = {
    # after the target's verify decode of a draft, before anything is accepted
    "verify": ("sampler", "verify", {3}, lambda failed: len(failed[0][1]) > 0),
    # in the hand-off, after the verify (call 1 is the prefill's)
    "hand-off": ("drafter", "observe", {4}, lambda failed: True),
    # while drafting, before the target decodes
    "draft": ("drafter", "plan", {2}, lambda failed: True),
    # twice running: the second failing step is a plain one (the drafter started over)
    "twice": ("sampler", "verify", {3, 4}, lambda failed: len(failed[0][1]) > 0 and len(failed[1][1]) == 0),
}


def cases(wheres):
    return [pytest.param(family, where) for family in KINDS for where in wheres]


@pytest.mark.parametrize("family, where", cases(INJECTIONS))
def test_a_failed_step_leaves_the_text_and_the_contexts_as_they_were(session, same_greedy, family, where):
    """Greedy generation step by step with steps made to fail: after each failure the text, n_past
    and the target's KV are as before the step, and the generation goes on to the plain text."""
    s = session(family)
    prompt = s.tokenize("def f(x):\n    return")
    owner, method, calls, check = INJECTIONS[where]
    with s.lock:
        sp = s.speculator(SamplingConfig(), SpecConfig(n_draft=3, adaptive=False))
        assert sp.rollback.kind == KINDS[family]
        sp.start(prompt)
        failed = fail_on(getattr(sp, owner), method, calls)
        end = len(prompt) + N_NEW
        while len(sp.tokens) < end:
            before = (list(sp.tokens), sp.n_past)
            try:
                sp.step(max_new=end - len(sp.tokens))
            except Boom:
                assert (sp.tokens, sp.n_past) == before
                assert sp.target.pos_max() == sp.n_past - 1
        got = sp.tokens[len(prompt) :]
    assert len(failed) == len(calls) and check(failed)
    same_greedy(s.model, prompt, got, plain(s, prompt, N_NEW))


@pytest.mark.parametrize("family, where", cases(["new generation"]))
def test_a_failure_at_the_start_of_a_new_generation(session, same_greedy, family, where):
    """One generation ends on a fully accepted draft; on the same speculator the next one's first
    step fails before its verify. Nothing of the first generation may come back."""
    s = session(family)
    first = s.tokenize("x = 1\ny = 2\n")
    second = s.tokenize("def f(x):\n    return")
    with s.lock:
        sp = s.speculator(SamplingConfig(), SpecConfig(n_draft=2, adaptive=False))
        sp.start(first)
        for _ in range(60):  # step until a draft is accepted in full
            r = sp.step()
            if r.drafted and r.n_accepted == len(r.drafted):
                break
        assert r.drafted and r.n_accepted == len(r.drafted)
        sp.start(second)
        fail_on(sp.drafter, "plan", {1})
        with pytest.raises(Boom):
            sp.step()
        assert sp.tokens == second and sp.target.pos_max() == len(second) - 2
        end = len(second) + N_NEW
        while len(sp.tokens) < end:
            sp.step(max_new=end - len(sp.tokens))
        got = sp.tokens[len(second) :]
    same_greedy(s.model, second, got, plain(s, second, N_NEW))
