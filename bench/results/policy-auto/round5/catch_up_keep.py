"""The head's catch-up after plain steps: how many of the plain steps' tokens to feed it
(pymtp.mtp_drafter.CATCH_UP_KEEP), acceptance against cost. The default model, greedy (the
text is the same for every variant, so the drafts after plain steps are drafted at the same
places), 1 thread: runs of GAP plain steps, each followed by a draft of K tokens (a probe), in
120-token generations of code and prose prompts; per variant the acceptance of those drafts
(per position) and the median seconds of their draft (the head's catch-up and its K tokens),
interleaved, REPEATS rounds (run under bench-quiet; catch_up_keep.txt: at e9f8fdd, where the
tokens queued before the plain steps were fed, here a draft's accepted tokens):

    PYTHONPATH=src python bench/results/policy-auto/round5/catch_up_keep.py [GAP] [K] [REPEATS]
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

GAP = int(sys.argv[1]) if len(sys.argv) > 1 else 24
K = int(sys.argv[2]) if len(sys.argv) > 2 else 2
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
TOKENS = 120
KEEPS = [0, 2, 4, 6, 8, 16, 10**6]  # 10**6: every token (the old catch-up)


class Scripted(DraftPolicy):
    def __init__(self, spec, n_max, script):
        super().__init__(spec, n_max)
        self.script = list(script)

    def next_length(self, n_past=0, rows_before=0, tokens_before=0.0):
        return self.script.pop(0) if self.script else 0


prompts = [p.text for p in code_prompts(2) + prose_prompts(2)]
script = [1] + ([0] * GAP + [K]) * 20  # the first draft feeds the head the prompt
with Session(resolve_model("default"), n_ctx=2048, n_threads=1) as s:
    toks = [s.tokenize(p) for p in prompts]
    acc = {k: [0] * K for k in KEEPS}
    drafted = {k: 0 for k in KEEPS}
    t = {k: [] for k in KEEPS}
    for rep in range(REPEATS):
        for prompt in toks:
            for keep in KEEPS if rep % 2 == 0 else KEEPS[::-1]:
                mtp_drafter.CATCH_UP_KEEP = keep
                sp = MTPSpeculator(s.target, s.draft, SamplingConfig(), SpecConfig(n_draft=K))
                sp.start(prompt)
                sp.policy = Scripted(sp.spec, K, script)
                n_step = 0
                while len(sp.tokens) - len(prompt) < TOKENS:
                    r = sp.step()
                    n_step += 1
                    if r.drafted and n_step > 1:  # the drafts after plain steps
                        t[keep].append(r.t_draft)
                        if rep == 0:
                            drafted[keep] += 1
                            for j in range(min(r.n_accepted, K)):
                                acc[keep][j] += 1
    print(f"default model, greedy, 1 thread, gap {GAP} plain steps, drafts of {K}, {len(prompts)} prompts")
    print(f"{'keep':>6} {'drafts':>6} " + " ".join(f"acc@{j + 1:<3}" for j in range(K)) + "  draft ms (median)")
    for keep in KEEPS:
        n = drafted[keep]
        rates = " ".join(f"{acc[keep][j] / n:6.3f}" for j in range(K))
        name = "all" if keep == 10**6 else str(keep)
        print(f"{name:>6} {n:6d} {rates}  {1e3 * statistics.median(t[keep]):8.2f}")
