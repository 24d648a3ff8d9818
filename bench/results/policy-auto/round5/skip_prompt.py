"""Whether a draft after plain steps may skip the prompt too (the head's prefill): acceptance of
the drafts after runs of plain steps, the default model, greedy (the same text for every
variant), 1 thread, 8 prompts (4 code, 4 prose), TOKENS tokens each, GAP plain steps before each
draft of K tokens, the first step plain too (auto at plain steps from the start):

* fed: the prompt and the last CATCH_UP_KEEP tokens of the plain steps (pymtp.mtp_drafter at
  e9f8fdd; written out here);
* skipped: only the last CATCH_UP_KEEP tokens of the queue, prompt or not (the rule shipped
  since: pymtp.mtp_drafter);
* all: every queued token (the catch-up before round 5).

Prints per variant the drafts, acceptance per position and the median draft seconds of the
first draft (the one that feeds the prompt) and of the later ones (run under bench-quiet):

    PYTHONPATH=src python bench/results/policy-auto/round5/skip_prompt.py [GAP] [K] [TOKENS]
"""

import statistics
import sys

import pymtp.mtp_drafter as mtp_drafter
from pymtp import SamplingConfig, SpecConfig
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.fixed_policy import DraftPolicy
from pymtp.session import Session
from pymtp.speculator import MTPSpeculator

GAP = int(sys.argv[1]) if len(sys.argv) > 1 else 16
K = int(sys.argv[2]) if len(sys.argv) > 2 else 2
TOKENS = int(sys.argv[3]) if len(sys.argv) > 3 else 200
Drafter = mtp_drafter.MTPDrafter
skip_queue = Drafter._skip_missed


def fed_rule(self):
    """Drop the plain steps' queued tokens but the last CATCH_UP_KEEP; what was queued before
    them (the prompt) is fed."""
    keep = mtp_drafter.CATCH_UP_KEEP
    n_skip = self._step_run - keep
    if n_skip <= 0:
        return
    n = len(self._feed)
    a = n - self._step_run
    if self._gap_at is None:
        self._gap_at = self._kv_end + a
    self._rows[a : n - n_skip + 1] = self._rows[a + n_skip : n + 1]
    del self._feed[a : a + n_skip]
    self._kv_end += n_skip
    self._shift += n_skip
    self._step_run = keep
    self.skipped += n_skip


def no_skip(self):
    pass


VARIANTS = {"fed": fed_rule, "skipped": skip_queue, "all": no_skip}


class Scripted(DraftPolicy):
    def __init__(self, spec, n_max, script):
        super().__init__(spec, n_max)
        self.script = list(script)

    def next_length(self, n_past=0, rows_before=0, tokens_before=0.0):
        return self.script.pop(0) if self.script else 0


prompts = [p.text for p in code_prompts(4) + prose_prompts(4)]
script = ([0] * GAP + [K]) * 100
with Session(resolve_model("default"), n_ctx=2048, n_threads=1) as s:
    toks = [s.tokenize(p) for p in prompts]
    acc = {v: [0] * K for v in VARIANTS}
    drafted = {v: 0 for v in VARIANTS}
    t_first = {v: [] for v in VARIANTS}
    t_later = {v: [] for v in VARIANTS}
    for prompt in toks:
        for name, rule in VARIANTS.items():
            Drafter._skip_missed = rule
            sp = MTPSpeculator(s.target, s.draft, SamplingConfig(), SpecConfig(n_draft=K))
            sp.start(prompt)
            sp.policy = Scripted(sp.spec, K, script)
            first = True
            while len(sp.tokens) - len(prompt) < TOKENS:
                r = sp.step()
                if r.drafted:
                    (t_first if first else t_later)[name].append(r.t_draft)
                    first = False
                    drafted[name] += 1
                    for j in range(min(r.n_accepted, K)):
                        acc[name][j] += 1
    print(
        f"default model, greedy, 1 thread, {len(prompts)} prompts "
        f"({statistics.median(map(len, toks))} tokens, median), "
        f"{TOKENS} tokens, {GAP} plain steps before each draft of {K}"
    )
    print(
        f"{'variant':>8} {'drafts':>6} " + " ".join(f"acc@{j + 1:<3}" for j in range(K)) + "  first draft ms  later ms"
    )
    for name in VARIANTS:
        n = drafted[name]
        rates = " ".join(f"{acc[name][j] / n:6.3f}" for j in range(K))
        print(
            f"{name:>8} {n:6d} {rates}  {1e3 * statistics.median(t_first[name]):14.2f}  "
            f"{1e3 * statistics.median(t_later[name]):8.2f}"
        )
