"""Constrained decoding under speculation (pymtp.sampling.TokenConstraint), with a constraint
written here: the allowed tokens depend on the position (even positions: even token ids, odd
positions: odd ids), so every mask differs from the next and rollback matters.

* greedy constrained output with speculation equals greedy constrained plain decoding, token for
  token, on every fixture family and with both drafters, and every token obeys the constraint;
* constrained sampling with speculation matches the exact constrained distribution (chi-square,
  as in test_distribution.py), and a rule that masks only the head's q, not the target's p, fails;
* the output ends when the constraint is complete.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_distribution import (
    N_SAMPLES,
    N_THREADS,
    P_EXACT,
    Coverage,
    draw,
    exact_continuations,
    p_values,
    q_of,
    sample_continuations,
)

import pymtp
from pymtp import SamplingConfig, SpecConfig
from pymtp.sampling import Sampler


class Parity:
    """Position i of the output allows token ids with the parity of i; complete after `length`."""

    def __init__(self, n_vocab: int, length: int = 10_000) -> None:
        self.n_vocab, self.length = n_vocab, length
        self.tokens: list[int] = []
        words = (n_vocab + 31) // 32
        bits = np.zeros(words * 32, dtype=bool)
        self._masks = []
        for parity in (0, 1):
            bits[:] = False
            bits[parity:n_vocab:2] = True
            self._masks.append(np.packbits(bits.reshape(-1, 8)[:, ::-1]).view(np.uint32).copy())

    def allowed(self, pos: int, token: int) -> bool:
        return token % 2 == pos % 2

    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = self._masks[len(self.tokens) % 2]

    def accept(self, token: int) -> bool:
        if self.is_terminated() or not self.allowed(len(self.tokens), token):
            return False
        self.tokens.append(token)
        return True

    def rollback(self, n: int) -> None:
        assert 0 <= n <= len(self.tokens)
        del self.tokens[len(self.tokens) - n :]

    def is_terminated(self) -> bool:
        return len(self.tokens) >= self.length


def test_the_parity_mask_layout():
    c = Parity(70)
    m = np.zeros(3, dtype=np.uint32)
    c.fill_mask(m)
    from pymtp.sampling import mask_allows

    assert [t for t in range(70) if mask_allows(m, t)] == list(range(0, 70, 2))
    c.accept(4)
    c.fill_mask(m)
    assert [t for t in range(70) if mask_allows(m, t)] == list(range(1, 70, 2))


def test_a_draft_token_the_mask_allows_but_the_constraint_refuses_is_refused_by_its_row():
    """llguidance's mask allows a second end token after an accepted one, which accept refuses:
    the verify must not accept it (it did, and the settle then rolled back -1 tokens)."""
    from pymtp.constraint_state import ConstraintState
    from pymtp.sampling import mask_allows

    state = ConstraintState(Parity(70, length=2), 70, n_rows=4)  # complete after 2 tokens
    masks = state.verify_masks([0, 1, 2])  # the mask still allows even tokens at position 2
    assert state.n_tentative == 2
    assert not mask_allows(masks[2], 2) and mask_allows(masks[2], 4)  # only the refused token goes
    state.settle(2, 4)  # the row's choice, as the verify makes it
    assert state.n_tentative == 0 and state.constraint.tokens == [0, 1]


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "qwen3next", "step35"])
@pytest.mark.parametrize("drafter", ["mtp", "lookup"])
def test_greedy_constrained_speculation_equals_constrained_plain_decoding(models, family, drafter):
    s = models(family)
    prompt = s.tokenize("def f(x):\n    return x + 1\n\ndef f(x):\n")
    kw = dict(max_tokens=24, ignore_eos=True)
    plain = pymtp.generate(prompt, s, speculative=False, constraint=Parity(s.model.n_vocab), **kw)
    spec = pymtp.generate(
        prompt, s, speculative={"n_draft": 3, "drafter": drafter, "ngram": 2}, constraint=Parity(s.model.n_vocab), **kw
    )
    assert spec.tokens == plain.tokens
    assert all(t % 2 == i % 2 for i, t in enumerate(spec.tokens))
    unconstrained = pymtp.generate(prompt, s, speculative=False, **kw)
    assert unconstrained.tokens != plain.tokens  # the constraint changed something
    if drafter == "mtp":
        assert spec.stats.n_drafted > 0


def test_the_output_ends_when_the_constraint_is_complete(models):
    s = models("glm4moe")
    r = pymtp.generate("def f(x", s, max_tokens=40, ignore_eos=True, constraint=Parity(s.model.n_vocab, length=7))
    assert len(r.tokens) == 7 and r.finish_reason == "stop"


# ---- sampling -------------------------------------------------------------------------------------

TOP_K6 = SamplingConfig(temperature=1.0, top_k=6)


def _target_unmasked(self, target_rows, draft, draft_probs, history):
    """Wrong: the head's q is masked, the target's p is not (the engine's ConstraintState then
    settles on what this rule chose)."""
    free = Sampler(self.config, n_vocab=self.n_vocab)
    for i, d in enumerate(draft):
        p = free.probs(target_rows[i], history + list(draft[:i]))
        q = q_of(self, draft_probs, i, draft)
        if self.rng.random() * q[d] < p[d]:
            continue
        residual = np.maximum(p - q, 0.0)
        return i, draw(self.rng, residual / residual.sum() if residual.sum() > 0 else p)
    return len(draft), draw(self.rng, free.probs(target_rows[len(draft)], history + list(draft)))


@pytest.fixture(scope="module")
def constrained_case(gguf):
    with pymtp.load(gguf("glm4moe"), n_ctx=64, n_threads=N_THREADS) as s:
        prompt = s.tokenize("def f(x")
        yield s, prompt, exact_continuations(s.model, prompt, TOP_K6, 3, constraint=lambda: Parity(s.model.n_vocab))


def test_constrained_speculative_sampling_keeps_the_distribution(constrained_case):
    s, prompt, exact = constrained_case
    assert abs(sum(exact.values()) - 1.0) < 1e-6
    assert all(t % 2 == i % 2 for key in exact for i, t in enumerate(key))
    cov = Coverage()
    spec = SpecConfig(n_draft=2, adaptive=False)
    make = lambda: Parity(s.model.n_vocab)  # noqa: E731
    samples = sample_continuations(s, prompt, TOP_K6, spec, 3, N_SAMPLES, seed=3, coverage=cov, constraint=make)
    assert cov.rejections > 50 and cov.full_accepts > 20, cov
    assert min(p_values(samples, exact, 3)) > P_EXACT
    wrong = sample_continuations(
        s, prompt, TOP_K6, spec, 3, N_SAMPLES, seed=4, constraint=make, verify=_target_unmasked
    )
    assert min(p_values(wrong, exact, 3)) < P_EXACT


# ---- a JSON schema (pymtp.grammar over llguidance) on every fixture family --------------------------

FIXTURE_SCHEMA = {
    "type": "object",
    "properties": {"a": {"enum": ["x", "yy", "zzz"]}, "b": {"type": "integer", "minimum": 0, "maximum": 999}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "qwen3next", "step35", "deepseek2"])
def test_json_schema_greedy_output_is_the_same_with_speculation(models, family):
    import json

    import jsonschema

    from pymtp.grammar import Constraint

    s = models(family)
    c = Constraint(s.model, json_schema=FIXTURE_SCHEMA)
    prompt = s.tokenize('{"a": ')
    plain = pymtp.generate(prompt, s, max_tokens=200, speculative=False, constraint=c.matcher())
    spec = pymtp.generate(prompt, s, max_tokens=200, speculative={"n_draft": 3}, constraint=c.matcher())
    assert spec.tokens == plain.tokens
    assert spec.finish_reason == "stop"
    jsonschema.validate(json.loads(spec.text), FIXTURE_SCHEMA)
