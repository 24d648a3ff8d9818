"""Plain decoding against auto held at plain steps (a cost table where drafting always loses, so
no probe either) and auto with its own costs, interleaved, on the default model, 1 thread, 48
tokens, 8 rounds of a code and a prose prompt, medians (run under bench-quiet, once per tree:
round 4's script, its path aside):

    PYTHONPATH=/tmp/p6/snap-SIDE/src python bench/results/policy-auto/round5/plain_steps.py
"""

import statistics
import time

from pymtp import SpecConfig
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.generate import generate
from pymtp.policy import CostModel, costs_for, use_costs
from pymtp.session import Session

prompts = [p.text for p in code_prompts(1) + prose_prompts(1)]
with Session(resolve_model("default"), n_ctx=2048, n_threads=1) as s:
    variants = {"plain": False, "auto": SpecConfig(policy="auto"), "auto-held": SpecConfig(policy="auto")}
    dear = CostModel.table({1: 0.017, 2: 0.06, 3: 0.1, 4: 0.14}, 0.01)
    own = costs_for(s.target.model, 4, 1)
    res = {v: [] for v in variants}
    steps = {v: [] for v in variants}
    for rep in range(-1, 8):
        for p in prompts:
            for name, spec in variants.items():
                use_costs(s.target.model, dear if name == "auto-held" else own, 1)
                t0 = time.perf_counter()
                r = generate(p, s, max_tokens=48, seed=rep + 1, ignore_eos=True, speculative=spec)
                wall = time.perf_counter() - t0
                if rep >= 0:
                    res[name].append(len(r.tokens) / (wall - r.stats.t_prefill))
                    steps[name].append(r.stats.n_drafted)
    for name in variants:
        m = statistics.median(res[name])
        ratio = m / statistics.median(res["plain"])
        print(
            f"{name:10s} {m:6.1f} tok/s  x plain {ratio:.3f}  drafted tokens per run {statistics.median(steps[name])}"
        )
