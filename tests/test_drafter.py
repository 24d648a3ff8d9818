"""MTPDrafter's hand-off bookkeeping against a fake DraftContext (no model, no decoding), and
DraftPolicy on synthetic acceptance rates and costs.

The hand-off rule: the head at position p takes token x(p) with the target's hidden row h(p-1).
FakeDraft keeps, per head, what each KV position holds (token, hidden row) and which positions
are held, and refuses a decode that skips or repeats a position. Target rows are marked with
their position (h(p) is a row of p's), the head's own output rows with -(100 (head + 1) + p).
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from pymtp import SamplingConfig, SpecConfig
from pymtp.drafter import Draft, DraftPolicy
from pymtp.mtp_drafter import MTPDrafter
from pymtp.sampling import Q_IN_SLOTS, Sampler

N_EMBD = 4
N_VOCAB = 32


def H(p0: int, n: int = 1) -> np.ndarray:
    """The target's hidden rows of positions p0..p0+n-1 (row p is filled with p)."""
    return np.repeat(np.arange(p0, p0 + n, dtype=np.float32)[:, None], N_EMBD, axis=1)


def own(head: int, pos: int) -> float:
    """The mark of the hidden row the head itself outputs at pos."""
    return float(-(100 * (head + 1) + pos))


def head_next(head: int, token: int) -> int:
    """The token the fake head predicts after token."""
    return (3 * token + head + 1) % N_VOCAB


class FakeDraft:
    """Stands in for a DraftContext: records calls, keeps per-head KV contents by position."""

    is_draft = True

    def __init__(self, n_heads: int = 1, n_batch: int = 16, confidence: dict | None = None) -> None:
        self.model = SimpleNamespace(n_embd=N_EMBD, n_mtp_layers=n_heads)
        self.n_vocab = N_VOCAB
        self.n_batch = n_batch
        self.head = 0
        self.cells: set[int] = set()  # positions the KV holds
        self.layers = [dict() for _ in range(n_heads)]  # head -> pos -> (token, row mark)
        self.calls: list[tuple] = []
        self.confidence = confidence or {}  # head -> top probability of its rows
        self._logits = self._hidden = None

    seq_id = 0  # a context used whole is the handle of its sequence 0

    @property
    def ctx(self) -> FakeDraft:
        return self

    def decode_rows(self, tokens, pos, seq_ids, *, output=None, hidden=None) -> None:
        """The engine's decode: here rows of sequence 0, at consecutive positions."""
        assert set(seq_ids) == {0} and list(pos) == list(range(pos[0], pos[0] + len(pos)))
        self.decode(tokens, pos[0], hidden[0], hidden[1:] if len(tokens) > 1 else None, output=output)

    def set_head(self, head: int) -> None:
        self.calls.append(("set_head", head))
        self.head = head

    def seq_rm(self, p0: int, p1: int = -1, *, seq_id: int = 0) -> None:
        assert p1 == -1 and seq_id == 0
        self.calls.append(("seq_rm", p0))
        self.cells = {p for p in self.cells if p < p0}

    def decode(self, tokens, pos0, hidden_first, hidden_rest=None, *, seq_id=0, output=None) -> None:
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        rows = [np.asarray(hidden_first, dtype=np.float32).reshape(-1)]
        if n > 1:
            assert hidden_rest is not None and len(hidden_rest) >= n - 1
            rows += [np.asarray(hidden_rest[i]) for i in range(n - 1)]
        for r in rows:
            assert r.shape == (N_EMBD,) and np.all(r == r[0]), "a hidden row is torn"
        marks = [float(r[0]) for r in rows]
        for i, tok in enumerate(tokens):
            p = pos0 + i
            assert p >= 1, "position 0 has no earlier hidden row"
            assert p not in self.cells, f"position {p} decoded while held"
            # llama.cpp: a sequence goes on at the position after its last (an empty one anywhere)
            assert not self.cells or p - 1 in self.cells, f"position {p} decoded after a gap"
            self.cells.add(p)
            self.layers[self.head][p] = (tok, marks[i])
        flags = [1] * n if output is None else list(output)
        assert len(flags) == n
        out = [i for i in range(n) if flags[i]]
        conf = self.confidence.get(self.head, 0.99999)
        logits = np.zeros((len(out), N_VOCAB), dtype=np.float32)
        for j, i in enumerate(out):
            # the top token gets probability conf at temperature 1
            logits[j, head_next(self.head, tokens[i])] = np.log(conf * (N_VOCAB - 1) / (1 - conf))
        self._logits = logits
        self._hidden = np.array([[own(self.head, pos0 + i)] * N_EMBD for i in out], dtype=np.float32)
        self.calls.append(("decode", tokens, pos0, marks, flags))

    def logits(self) -> np.ndarray:
        return self._logits

    def hidden(self) -> np.ndarray:
        return self._hidden

    def decodes(self) -> list[tuple]:
        return [c[1:] for c in self.calls if c[0] == "decode"]


SAMPLED = SamplingConfig(temperature=1.0, seed=0)  # the fake's rows are peaked: sampling = argmax


def sampler(cfg: SamplingConfig = SAMPLED) -> Sampler:
    return Sampler(cfg)


def queued(d: MTPDrafter) -> list[tuple[int, float]]:
    """The queued tokens with the row mark each is paired with."""
    return [(t, float(d._rows[i][0])) for i, t in enumerate(d._feed)]


def pending(d: MTPDrafter) -> float | None:
    return float(d._rows[len(d._feed)][0]) if d._has_pending else None


# ---- observe(): what is queued with which row ----------------------------------------------------


def test_prefill_queues_each_token_with_the_row_before_it():
    d = MTPDrafter(FakeDraft())
    prompt = [10, 11, 12, 13]
    d.observe(prompt, 0, H(0, 4))
    # position 0 has no earlier row: the head starts at 1
    assert queued(d) == [(11, 0.0), (12, 1.0), (13, 2.0)]
    assert pending(d) == 3.0 and d._kv_end == 1
    assert d.ctx.calls == []  # nothing decoded yet: hand-off is lazy


def test_prefill_in_chunks_equals_one_prefill():
    a, b = MTPDrafter(FakeDraft()), MTPDrafter(FakeDraft())
    a.observe([10, 11, 12, 13, 14], 0, H(0, 5))
    b.observe([10, 11], 0, H(0, 2))
    b.observe([12, 13, 14], 2, H(2, 3))
    assert queued(a) == queued(b) == [(11, 0.0), (12, 1.0), (13, 2.0), (14, 3.0)]
    assert pending(a) == pending(b) == 4.0 and a._kv_end == b._kv_end == 1


def test_accepted_tokens_pair_with_the_pending_row_then_their_own():
    d = MTPDrafter(FakeDraft())
    d.observe([10, 11, 12], 0, H(0, 3))  # prompt body; 13 is the last prompt token
    # a plain step: the target decoded 13 at position 3 and chose a token (not fed yet)
    d.observe([13], 3, H(3))
    assert queued(d) == [(11, 0.0), (12, 1.0), (13, 2.0)] and pending(d) == 3.0
    # a verify of [20, d1, d2] at 4.. accepting d1: 20 pairs with the old pending row h(3)
    d.observe([20, 21], 4, H(4, 2))
    assert queued(d) == [(11, 0.0), (12, 1.0), (13, 2.0), (20, 3.0), (21, 4.0)] and pending(d) == 5.0


def test_a_full_queue_is_fed_before_it_overflows():
    ctx = FakeDraft(n_batch=4)  # room for 4 queued tokens + the pending row
    d = MTPDrafter(ctx)
    d.observe(list(range(10, 20)), 0, H(0, 10))
    assert [dec[:3] for dec in ctx.decodes()] == [
        ([11, 12, 13, 14], 1, [0.0, 1.0, 2.0, 3.0]),
        ([15, 16, 17, 18], 5, [4.0, 5.0, 6.0, 7.0]),
    ]
    assert list(ctx.decodes()[0][3]) == [0, 0, 0, 0]  # no logits needed: they only fill the KV
    assert queued(d) == [(19, 8.0)] and pending(d) == 9.0 and d._kv_end == 9


def test_reset_forgets_everything():
    ctx = FakeDraft()
    d = MTPDrafter(ctx)
    d.observe([10, 11, 12], 0, H(0, 3))
    d.reset()
    assert d._feed == [] and not d._has_pending and d._kv_end == 0
    assert ctx.calls == [("seq_rm", 0)]
    assert d.propose(12, 2, 3, sampler(), [10, 11, 12]).tokens == []  # nothing to pair the token with
    chained = FakeDraft(n_heads=3)
    MTPDrafter(chained).reset()
    assert chained.calls == [("set_head", 0), ("seq_rm", 0)]


# ---- propose(): one head --------------------------------------------------------------------------


def test_a_one_token_draft_is_one_call():
    ctx = FakeDraft()
    d = MTPDrafter(ctx)
    d.observe([10, 11, 12], 0, H(0, 3))
    draft = d.propose(13, 3, 1, sampler(), [10, 11, 12, 13])
    assert draft.tokens == [head_next(0, 13)]
    # the queued accepted tokens and the last token in one decode, logits of the last row only
    assert ctx.calls == [("decode", [11, 12, 13], 1, [0.0, 1.0, 2.0], [0, 0, 1])]


def test_one_head_feeds_the_queue_then_recurses_from_the_last_token_alone():
    ctx = FakeDraft()
    d = MTPDrafter(ctx)
    d.observe([10, 11, 12], 0, H(0, 3))
    s = sampler()
    draft = d.propose(13, 3, 3, s, [10, 11, 12, 13])
    t1 = head_next(0, 13)
    t2 = head_next(0, t1)
    assert draft.tokens == [t1, t2, head_next(0, t2)]
    # each token's q stays in the sampler's slot for its position, where verify reads it
    assert draft.q == Q_IN_SLOTS
    for i, t in enumerate(draft.tokens):
        q = s.slot_probs(i)
        assert abs(q.sum() - 1) < 1e-6 and q.argmax() == t
    assert ctx.calls == [
        # the queued accepted tokens, no logits; then the last token on its own (its hidden row
        # is the next draft's pairing row, and llama.cpp returns a decode's first rows)
        ("decode", [11, 12], 1, [0.0, 1.0], [0, 0]),
        ("decode", [13], 3, [2.0], [1]),
        # then one token per call, each with the head's own row of the position before
        ("decode", [t1], 4, [own(0, 3)], [1]),
        ("decode", [t2], 5, [own(0, 4)], [1]),
        # the head's own rows are dropped: the draft KV holds the text up to the last token
        ("seq_rm", 4),
    ]
    assert ctx.cells == {1, 2, 3} and d._kv_end == 4
    assert d._feed == [] and not d._has_pending  # the pending row was consumed


def test_drafting_stops_below_p_min():
    ctx = FakeDraft(confidence={0: 0.4})
    d = MTPDrafter(ctx)
    d.observe([10, 11, 12], 0, H(0, 3))
    draft = d.propose(13, 3, 3, sampler(), [10, 11, 12, 13], p_min=0.5)
    assert draft.tokens == [] and draft.confidence == []
    assert ctx.cells == {1, 2, 3}  # the accepted text is fed all the same
    confident = MTPDrafter(FakeDraft(confidence={0: 0.6}))
    confident.observe([10, 11, 12], 0, H(0, 3))
    draft = confident.propose(13, 3, 3, sampler(), [10, 11, 12, 13], p_min=0.5)
    assert len(draft.tokens) == len(draft.confidence) == 3 and draft.q == Q_IN_SLOTS
    assert all(abs(c - 0.6) < 1e-3 for c in draft.confidence)


# ---- propose(): chained heads ------------------------------------------------------------------------


def test_chained_heads_feed_every_head_then_draft_one_token_each():
    ctx = FakeDraft(n_heads=3)
    d = MTPDrafter(ctx)
    assert d.max_draft == 3
    d.observe([10, 11, 12], 0, H(0, 3))
    draft = d.propose(13, 3, 5, sampler(), [10, 11, 12, 13])  # asked for 5: one per head
    t1 = head_next(0, 13)
    t2 = head_next(1, t1)
    t3 = head_next(2, t2)
    assert draft.tokens == [t1, t2, t3]
    feed = ([11, 12], 1, [0.0, 1.0], [0, 0])
    assert ctx.calls == [
        # the queued tokens once per head (each head writes its own KV layer)
        ("set_head", 0),
        ("decode", *feed),
        ("set_head", 1),
        ("seq_rm", 1),
        ("decode", *feed),
        ("set_head", 2),
        ("seq_rm", 1),
        ("decode", *feed),
        # head i re-decodes [last, d1..di]: last with the pending row h(2), then the rows the
        # heads before it output
        ("set_head", 0),
        ("seq_rm", 3),
        ("decode", [13], 3, [2.0], [1]),
        ("set_head", 1),
        ("seq_rm", 3),
        ("decode", [13, t1], 3, [2.0, own(0, 3)], [0, 1]),
        ("set_head", 2),
        ("seq_rm", 3),
        ("decode", [13, t1, t2], 3, [2.0, own(0, 3), own(1, 4)], [0, 0, 1]),
        ("set_head", 0),
        ("seq_rm", 3),
    ]
    # last_token is not fed: it stays queued for observe() with the pending row
    assert ctx.cells == {1, 2} and d._kv_end == 3
    for layer in ctx.layers:
        assert {p: layer[p] for p in (1, 2)} == {1: (11, 0.0), 2: (12, 1.0)}


def test_heads_first_drafts_with_head_0_alone():
    """SpecConfig(heads="first") on a chained model: head 0 recurses on its own rows like a
    single-head model (drafts longer than the head count), and only head 0 is fed."""
    ctx = FakeDraft(n_heads=3)
    d = MTPDrafter(ctx)
    d.configure(SpecConfig(heads="first", draft_vocab=0))
    assert not d.chained and d.max_draft == 16
    d.observe([10, 11, 12], 0, H(0, 3))
    draft = d.propose(13, 3, 5, sampler(), [10, 11, 12, 13])
    assert len(draft.tokens) == 5
    assert all(c[0] != "set_head" or c[1] == 0 for c in ctx.calls)
    d.configure(SpecConfig(heads="chain", draft_vocab=0))  # back: the head KV starts over
    assert d.chained and d.max_draft == 3 and d._kv_end == 0


# ---- the invariant over many steps -------------------------------------------------------------------


def check_draft_kv(ctx: FakeDraft, text: list[int], n_past: int, chained: bool, start: int = 1) -> None:
    """After a draft, every head's KV holds the text from start (1, or the position after a
    reset) up to the last token (chained heads feed that one later), each token with the
    target's row of the position before."""
    end = n_past if chained else n_past + 1
    assert ctx.cells == set(range(start, end))
    for layer in ctx.layers if chained else ctx.layers[:1]:
        assert {p: layer[p] for p in range(start, end)} == {p: (text[p], float(p - 1)) for p in range(start, end)}


@pytest.mark.parametrize("n_heads", [1, 3])
@pytest.mark.parametrize("n_batch", [4, 64])
def test_hand_off_keeps_the_draft_kv_in_step_with_the_text(n_heads, n_batch):
    """Simulated speculation: a prompt fed in chunks, then drafts of 0-4 tokens with random accept
    counts (rejections, full accepts, plain steps) and a reset half-way (as after a failed step);
    after every draft the draft KV holds exactly the accepted text, paired with the right rows."""
    rng = np.random.default_rng(n_heads * 100 + n_batch)
    ctx = FakeDraft(n_heads=n_heads, n_batch=n_batch)
    d = MTPDrafter(ctx)
    s = sampler()
    text = [int(t) for t in rng.integers(0, N_VOCAB, size=11)]
    body = text[:-1]
    for p0 in range(0, len(body), 3):
        d.observe(body[p0 : p0 + 3], p0, H(p0, len(body[p0 : p0 + 3])))
    n_past, start = len(body), 1
    drafts = Counter()
    for step in range(80):
        if step == 40:
            d.reset()
            start = None  # the head starts again at the next token observed
        k = int(rng.integers(0, 5))
        draft = d.propose(text[-1], n_past, k, s, text) if k else Draft()
        if k and start is not None:
            assert len(draft.tokens) == min(k, d.max_draft)
            check_draft_kv(ctx, text, n_past, n_heads > 1, start)
        elif k:
            assert draft.tokens == []  # nothing observed since the reset: nothing to draft from
        n_acc = int(rng.integers(0, len(draft.tokens) + 1))
        accepted = [text[-1]] + draft.tokens[:n_acc]
        d.observe(accepted, n_past, H(n_past, len(accepted)))
        if start is None:
            start = n_past + 1
        drafts[(len(draft.tokens), n_acc)] += 1
        text += draft.tokens[:n_acc] + [int(rng.integers(0, N_VOCAB))]
        n_past += n_acc + 1
    # the run went through full accepts, rejections and plain steps
    assert drafts[(0, 0)] and sum(c for (n, a), c in drafts.items() if 0 < a == n) > 5
    assert sum(c for (n, a), c in drafts.items() if a < n) > 20


# ---- DraftPolicy ---------------------------------------------------------------------------------------


def best_length(rates, c_draft, c_verify, n_min=1):
    """The k of the policy's objective, from known per-position rates and costs."""

    def speed(k):
        return (1 + sum(np.prod(rates[: i + 1]) for i in range(k))) / (k * c_draft + c_verify(k))

    return max(range(n_min, len(rates) + 1), key=speed)


def feed(policy: DraftPolicy, accepted_counts, k, c_draft, c_verify) -> None:
    for n_acc in accepted_counts:
        policy.update(k, n_acc, c_draft * k, c_verify(k))


@pytest.mark.parametrize(
    "rates, c_draft, want",
    [
        ((0.9, 0.9, 0.1, 0.1), 0.02, 2),  # token 3 is rarely accepted: stop at 2
        ((0.95, 0.95, 0.95, 0.95), 0.02, 4),  # all accepted, drafts cheap: the longest
        ((0.95, 0.95, 0.95, 0.95), 1.0, 1),  # a draft token costs as much as a verify: the shortest
        ((0.3, 0.3, 0.3, 0.3), 0.2, 1),
    ],
)
def test_adaptive_length_maximizes_expected_speed(rates, c_draft, want):
    """Steps that drafted 4 with accept counts in the proportions of the given per-position rates
    (a window long enough that the estimates are plain averages): the policy picks the k that
    maximizes (1 + sum_i prod_{j<=i} a_j) / (k c_draft + c_verify(k))."""

    def c_verify(k):
        return 1.0 + 0.1 * k

    assert best_length(rates, c_draft, c_verify) == want
    # accept counts 0..4 in the proportions the rates give
    reach = np.concatenate([[1.0], np.cumprod(rates)])
    share = np.append(reach[:-1] * (1 - np.array(rates)), reach[-1])
    counts = np.round(share * 1000).astype(int)
    steps = [n for n, c in enumerate(counts) for _ in range(c)]
    np.random.default_rng(0).shuffle(steps)
    p = DraftPolicy(SpecConfig(n_draft=4, adaptive=True, adaptive_window=1024), 4)
    feed(p, steps, 4, c_draft, c_verify)
    assert p.next_length() == want
    np.testing.assert_allclose(p.last_rates, rates, atol=0.02)


def test_policy_adapts_to_acceptance_and_costs():
    cfg = SpecConfig(n_draft=4, adaptive=True, adaptive_window=8)
    # verify cost grows 10% per token, a draft token costs 2% of a verify: long drafts pay
    p = DraftPolicy(cfg, 4)
    for _ in range(20):
        p.update(4, 4, 0.02 * 4, 1.0 + 0.1 * 4)
    assert p.next_length() == 4
    for _ in range(20):  # nothing accepted any more: draft the minimum
        k = p.next_length()
        p.update(k, 0, 0.02 * k, 1.0 + 0.1 * k)
    assert p.next_length() == 1
    # accepted often, but a draft token costs as much as a verify: short drafts
    q = DraftPolicy(cfg, 4)
    for k in (1, 2, 3, 4) * 5:
        q.update(k, min(k, 1), 1.0 * k, 1.0 + 0.1 * k)
    assert q.next_length() == 1
    # rates per position: token 0 always accepted, token 1 never
    r = DraftPolicy(cfg, 4)
    for _ in range(20):
        r.update(3, 1, 0.01 * 3, 1.0 + 0.05 * 3)
    assert r.next_length() == 1 and r.last_rates[0] > 0.9 and r.last_rates[1] < 0.2


def test_adaptive_length_fits_the_verify_cost():
    """Verify times measured at several k: the fitted line, not the prior slope, sets the cost. A
    verify that costs 150% more per drafted token makes every draft beyond the first lose (the
    prior slope would choose 2)."""
    cfg = SpecConfig(n_draft=4, adaptive=True, adaptive_window=1024)
    p = DraftPolicy(cfg, 4)
    for k in (1, 2, 3, 4) * 25:
        p.update(k, min(k, 2), 0.0001 * k, 1.0 + 1.5 * k)  # tokens 1, 2 always accepted, 3 never
    # gain(1) / cost(1) = 2 / 2.5 beats gain(2) / cost(2) = 3 / 4
    assert p.next_length() == 1
    q = DraftPolicy(cfg, 4)
    for k in (1, 2, 3, 4) * 25:
        q.update(k, min(k, 2), 0.0001 * k, 1.0 + 0.01 * k)
    assert q.next_length() == 2


def test_adaptive_length_respects_n_min_and_the_cap():
    p = DraftPolicy(SpecConfig(n_draft=4, adaptive=True, n_min=2), 4)
    for _ in range(30):
        p.update(2, 0, 0.02 * 2, 1.2)
    assert p.next_length() == 2
    capped = DraftPolicy(SpecConfig(n_draft=8, adaptive=True), 3)
    for _ in range(30):
        capped.update(3, 3, 0.001, 1.0)
    assert capped.n_max == 3 and capped.next_length() == 3


def test_cooldown_after_a_full_rejection():
    p = DraftPolicy(SpecConfig(n_draft=4, adaptive=False, cooldown=4, cooldown_steps=2), 4)
    assert p.next_length() == 4
    p.update(4, 1, 0.1, 1.0)  # something accepted: no cooldown
    assert p.next_length() == 4
    p.update(4, 0, 0.1, 1.0)  # nothing accepted: cooldown for 2 steps
    assert p.next_length() == 0 and p.next_length() == 0
    assert p.next_length() == 4
    assert p.cooldown_steps_taken == 2
    p.update(0, 0)  # a plain step is not a rejection
    assert p.next_length() == 4
    partial = DraftPolicy(SpecConfig(n_draft=4, adaptive=False, cooldown=1, cooldown_steps=3), 4)
    partial.update(4, 0, 0.1, 1.0)
    assert [partial.next_length() for _ in range(4)] == [3, 3, 3, 4]
    off = DraftPolicy(SpecConfig(n_draft=4, adaptive=False), 4)  # cooldown 0: none
    off.update(4, 0, 0.1, 1.0)
    assert off.next_length() == 4 and off.cooldown_steps_taken == 0


def test_fixed_length_is_capped_by_the_heads():
    fixed = DraftPolicy(SpecConfig(n_draft=3, adaptive=False), 2)
    assert fixed.next_length() == 2  # capped by the model (chained heads)
    for _ in range(10):
        fixed.update(2, 0, 0.1, 1.0)  # a fixed length ignores acceptance
    assert fixed.next_length() == 2


# ---- on a real head: the recursion's hidden row ---------------------------------------------------


@pytest.mark.parametrize("plain_greedy", [True, False])
def test_the_recursion_pairs_each_draft_token_with_the_head_row_of_the_token_before(models, plain_greedy):
    """After a hand-off of several tokens, the second draft token must come from the head's hidden
    row of last_token. (llama.cpp's masked nextn mode returns the first rows of a decode, and the
    glm4moe MTP graph keeps every row: decoding the queue and last_token together gave the row of
    the queue's first token.) The reference decodes one token at a time."""
    import pymtp
    from pymtp.model import last_row_only

    s = models("glm4moe")
    prompt = s.tokenize("def f(x):\n    return x * 2 + 1")
    n = len(prompt)
    cfg = SamplingConfig() if plain_greedy else SamplingConfig(repetition_penalty=1.0001)
    with pymtp.TargetContext(s.model, n_ctx=64, n_batch=64, n_threads=1) as t:
        t.decode(prompt[:-1], 0)
        rows = t.hidden().copy()
        with pymtp.DraftContext(t, n_batch=64, n_threads=1) as ctx:
            d = MTPDrafter(ctx)
            d.observe(prompt[:-1], 0, rows)
            draft = d.propose(prompt[-1], n - 1, 2, Sampler(cfg, n_vocab=s.model.n_vocab), prompt)
        with pymtp.DraftContext(t, n_batch=64, n_threads=1) as ref:
            for p in range(1, n - 1):
                ref.decode([prompt[p]], p, rows[p - 1], output=last_row_only(1))
            ref.decode([prompt[-1]], n - 1, rows[n - 2])
            t1 = int(np.argmax(ref.logits()[-1]))
            ref.decode([t1], n, ref.hidden()[0].copy())
            x = ref.logits()[-1].astype(np.float64)
            t2 = int(np.argmax(x))
            conf2 = 1.0 / np.exp(x - x[t2]).sum()
    # the fixture head's argmax barely depends on the hidden row; its probabilities do
    assert draft.tokens == [t1, t2]
    assert abs(draft.confidence[1] - conf2) < 1e-4 * conf2, (draft.confidence, conf2)
