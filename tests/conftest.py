"""Shared test fixtures: random-weight GGUFs of every MTP family, made at test time."""

from __future__ import annotations

import io

import numpy as np
import pytest

import pymtp
from pymtp._native import build_info
from pymtp_testing import fixtures

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="session")
def gguf(fixture_dir):
    """gguf(family, **overrides) -> path of a seeded random-weight model."""

    def make(family: str, **overrides):
        return fixtures.fixture_path(family, cache_dir=fixture_dir, **overrides)

    return make


@pytest.fixture(scope="session")
def models(gguf):
    """models(family) -> a Model shared by the session's tests (do not close it)."""
    cache: dict[str, pymtp.Model] = {}

    def get(family: str) -> pymtp.Model:
        if family not in cache:
            cache[family] = pymtp.load(gguf(family), n_ctx=512)
        return cache[family]

    def fresh() -> None:
        """Every model from fresh contexts and an empty prompt cache: a prefix an earlier test
        cached was decoded in another batch shape, and prefills of more than 8 rows lie outside
        the bit-exact contract (docs/design/exactness.md)."""
        for m in cache.values():
            m.prompt_cache.clear()
            if m.draft is not None:
                m.draft.close()
            m.target.close()

    get.fresh = fresh  # type: ignore[attr-defined]
    yield get
    for m in cache.values():
        m.close()


#: Greedy decoding by two paths (plain: one row per decode; speculative: k+1 rows per verify
#: decode) gives the same tokens on a CPU build: its kernels give a row the same bits alone and
#: in any batch (patches 0004 and 0005, tests/test_batch_invariance.py), so the runs must be
#: equal with no allowance (the bit-exact contract, docs/design/exactness.md).
#: On a GPU backend the kernels for one row and for several differ (ggml-cuda: mmvq for one
#: row, mmq for a batch): on an H100 the same row moved by up to 5.7e-3 between batch shapes,
#: and greedy runs parted where the top two logits were 0.010-0.025 apart; there runs may part
#: where both tokens are within GREEDY_TIE_EPS of the top logit.
GPU_BUILD = any(b in build_info().partition("backends:")[2].split() for b in ("CUDA", "VULKAN", "METAL"))
GREEDY_TIE_EPS = 5e-2 if GPU_BUILD else 0.0
#: How far one row's logits may move when the same tokens are decoded in batches of another
#: shape: not at all on the CPU backend (patches 0004 and 0005 for batches of up to 8 rows), to
#: float16 rounding on a GPU backend.
SAME_ROW_ATOL = 2e-2 if GPU_BUILD else 0.0
#: At most this fraction of the compared runs may part at a near-tie (measured: none).
MAX_TIE_FRACTION = 0.05


class GreedyComparison:
    """``compare(model, prompt, got, want)``: greedy continuations of one prompt by two paths are
    equal token for token. On a GPU build they may also part at a near-tie: at the first
    difference both tokens are within GREEDY_TIE_EPS of the target's top logit there (after the
    repetition penalty), and the texts may differ from there on; ``assert_ties_rare()`` then
    bounds how many of the compared runs were cut short that way. Any other difference fails."""

    def __init__(self) -> None:
        self.runs = 0
        self.ties: list[tuple] = []

    def __call__(self, model, prompt, got, want, repetition_penalty: float = 1.0) -> None:
        self.runs += 1
        got, want = list(got), list(want)
        if got == want:
            return
        n = min(len(got), len(want))
        i = next((j for j in range(n) if got[j] != want[j]), n)
        assert i < n, f"one run is a prefix of the other: {got} vs {want}"
        assert GPU_BUILD, f"greedy runs part at token {i} ({got[i]} vs {want[i]}): a CPU build allows no near-tie"
        seq = list(prompt) + want[:i]
        with pymtp.TargetContext(model, n_ctx=len(seq) + 1, n_batch=len(seq)) as t:
            out = np.zeros(len(seq), dtype=np.uint8)
            out[-1] = 1
            t.decode(seq, 0, output=out)
            row = t.logits()[0].copy()
        if repetition_penalty != 1.0:  # the penalized logits greedy decoding compared
            recent = list(set(seq[-pymtp.SamplingConfig().repetition_window :]))
            row[recent] = np.where(row[recent] > 0, row[recent] / repetition_penalty, row[recent] * repetition_penalty)
        gaps = (float(row.max() - row[got[i]]), float(row.max() - row[want[i]]))
        assert max(gaps) <= GREEDY_TIE_EPS, (
            f"greedy runs part at token {i} ({got[i]} vs {want[i]}), {gaps} below the top logit: not a near-tie"
        )
        self.ties.append((i, got[i], want[i], gaps))

    def assert_ties_rare(self) -> None:
        assert len(self.ties) <= MAX_TIE_FRACTION * self.runs, f"{len(self.ties)} of {self.runs} runs: {self.ties}"


@pytest.fixture
def same_greedy():
    """A GreedyComparison for the test."""
    return GreedyComparison()


class CtrlCAfterFirstWrite(io.StringIO):
    """A stdout on which Ctrl-C (KeyboardInterrupt) comes right after the first text is
    written: during a reply (input("") writes its empty prompt, which does not count)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        n = super().write(text)
        if text:
            self.writes.append(text)
            if len(self.writes) == 1:
                raise KeyboardInterrupt
        return n
