"""Round 11 (#29): auto against fixed lengths where acceptance depends on the draft position (a
random draw per position, conditional rates from a profile), with round 10's deep-variant step
times: what the echo fixtures (one agreement at every position) cannot show. A process runs
code, prose, code, prose (the estimates carried); the mean over many processes.

    PYTHONPATH=src python sim_profile.py [--processes 200]
"""

from __future__ import annotations

import argparse
import random
import statistics

from pymtp import SpecConfig
from pymtp.policy import AutoPolicy, CostModel

MS = 1e-3
ROWS = {1: 7.86, 2: 7.70, 3: 8.73, 4: 10.53, 5: 12.65}  # round 10's deep trace (sim_sources.py)
DRAFT = {0: 0.0, 1: 1.5, 2: 2.2, 3: 2.9, 4: 3.5}
#: the deep variant's greedy acceptance, conditional per position (round 11's main-deep-r1.log,
#: mtp-4: code 0.71 0.47 0.35 0.29, prose 0.92 0.75 0.67 0.67 of the steps)
PROFILES = {"code": [0.71, 0.66, 0.74, 0.83], "prose": [0.92, 0.82, 0.89, 1.0]}


class Key:
    pass


def gen(rng, profile, n_tokens, policy=None, k_fixed=0):
    done, total = 0, 0.0
    while done < n_tokens:
        left = n_tokens - done - 1
        k = min(policy.next_length(done) if policy else k_fixed, left)
        if policy:
            policy.asked = k
        n_acc = 0
        while n_acc < k and rng.random() < profile[n_acc]:
            n_acc += 1
        t_draft, t_verify = DRAFT[k], ROWS[k + 1]
        total += t_draft + t_verify + 0.15
        if policy:
            policy.update(k, n_acc, t_draft * MS, t_verify * MS, confidence=[0.78] * k)
        done += n_acc + 1
    return total * MS


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=48)
    args = ap.parse_args()
    ratios: dict[str, list[float]] = {"code": [], "prose": []}
    for seed in range(args.processes):
        costs = CostModel({n: t * MS for n, t in ROWS.items()}, DRAFT[1] * MS)
        key = Key()
        for kind in ("code", "prose", "code", "prose"):
            prof = PROFILES[kind]
            fixed = [
                statistics.mean(gen(random.Random(seed * 7919 + r), prof, args.tokens, k_fixed=k) for r in range(20))
                for k in range(1, 5)
            ]
            p = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=key, costs=costs)
            a = gen(random.Random(seed), prof, args.tokens, policy=p)
            ratios[kind].append(min(fixed) / a)
    for kind, r in ratios.items():
        print(f"{kind}: auto x best fixed (expected time) mean {statistics.mean(r):.3f}  n {len(r)}")


if __name__ == "__main__":
    main()
