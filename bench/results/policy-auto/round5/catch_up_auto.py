"""The head's catch-up in the auto policy, on one tree: plain decoding, auto held at plain steps
(a cost table where drafting always loses: no probe either), auto (the head fed the last
CATCH_UP_KEEP tokens after plain steps, the catch-up priced so) and auto-feed-all (every missed
token fed and priced per plain step, as before round 5), interleaved, the default model, greedy
or Qwen's sampling settings, 48 tokens, ROUNDS rounds of a code and a prose prompt, medians.
Each auto variant keeps its own calibrated costs and carried estimates (they learn from their
own steps). Run under bench-quiet:

    PYTHONPATH=src python bench/results/policy-auto/round5/catch_up_auto.py [THREADS] [ROUNDS] [greedy|qwen]
"""

import statistics
import sys
import time

import pymtp.estimates as estimates
import pymtp.mtp_drafter as mtp_drafter
import pymtp.policy as policy
from pymtp import SpecConfig
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.bench.sampling import PRESETS
from pymtp.costs import CATCH_UP_KEEP, calibrate
from pymtp.generate import generate
from pymtp.policy import CostModel, use_costs
from pymtp.session import Session

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
SAMPLING = sys.argv[3] if len(sys.argv) > 3 else "greedy"
ALL = 10**6

prompts = [p.text for p in code_prompts(1) + prose_prompts(1)]
variants = ["plain", "auto-held", "auto", "auto-feed-all"]
kw = PRESETS[SAMPLING].generate_kwargs()
with Session(resolve_model("default"), n_ctx=2048, n_threads=THREADS) as s:
    model = s.target.model
    dear = CostModel.table({1: 0.017, 2: 0.06, 3: 0.1, 4: 0.14}, 0.01)
    costs = {v: calibrate(model, 4, n_threads=THREADS) for v in ("auto", "auto-feed-all")}
    carried = {v: {} for v in variants}
    res = {v: [] for v in variants}
    drafted = {v: [] for v in variants}
    for rep in range(-1, ROUNDS):
        for p in prompts:
            for name in variants if rep % 2 == 0 else variants[::-1]:
                keep = ALL if name == "auto-feed-all" else CATCH_UP_KEEP
                mtp_drafter.CATCH_UP_KEEP = policy.CATCH_UP_KEEP = keep
                use_costs(model, costs.get(name, dear), THREADS)
                estimates._CARRIED[model] = carried[name]
                spec = False if name == "plain" else SpecConfig(policy="auto")
                t0 = time.perf_counter()
                r = generate(p, s, max_tokens=48, seed=rep + 1, ignore_eos=True, speculative=spec, **kw)
                wall = time.perf_counter() - t0
                if rep >= 0:
                    res[name].append(len(r.tokens) / (wall - r.stats.t_prefill))
                    drafted[name].append(r.stats.n_drafted)
    print(f"default model, {SAMPLING}, {THREADS} thread(s), 48 tokens, {ROUNDS} rounds x 2 prompts, medians")
    base = statistics.median(res["plain"])
    for name in variants:
        m = statistics.median(res[name])
        n = statistics.median(drafted[name])
        print(f"{name:14s} {m:6.1f} tok/s  x plain {m / base:.3f}  drafted tokens per run {n}")
