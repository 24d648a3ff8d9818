"""The auto policy on a fixed cost table with accepted tokens drawn per position: how much of the
best draft length's (true) tokens per second the lengths it chooses earn, steps 30-300, 10 seeds.

    PYTHONPATH=src python bench/results/policy-auto/round4/simulate.py
"""

import random
import statistics

from pymtp import SpecConfig
from pymtp.policy import AutoPolicy, CostModel

CASES = {
    # c(n) in seconds for n rows, a draft token's seconds (measured: the ~1.5B echo fixture, decodes
    # of the same row count in a row at position 100, 2 threads; echo-70: trace_policy's fixed runs)
    "echo-80-1.5b": ({1: 0.0491, 2: 0.0514, 3: 0.0643, 4: 0.0719}, 0.004),
    "echo-70": ({1: 0.0107, 2: 0.0154, 3: 0.0180, 4: 0.0220, 5: 0.0256}, 0.0018),
}
RATES = (
    [0.3] * 4,
    [0.5] * 4,
    [0.6] * 4,
    [0.7] * 4,
    [0.75] * 4,
    [0.8] * 4,
    [0.85] * 4,
    [0.8, 0.85, 0.5, 0.7],
    [0.7, 0.6, 0.55, 0.5],
)

for name, (table, c_draft) in CASES.items():
    n_max = max(table) - 1
    for rates in RATES:

        def true_tps(k, rates=rates, table=table, c_draft=c_draft):
            gain, reach = 1.0, 1.0
            for j in range(k):
                reach *= rates[j]
                gain += reach
            return gain / (table[k + 1] + k * c_draft)

        best = max(range(n_max + 1), key=true_tps)
        shares = []
        for seed in range(10):
            p = AutoPolicy(SpecConfig(policy="auto", n_draft=n_max), n_max, costs=CostModel.table(table, c_draft))
            rng = random.Random(seed)
            ks = []
            for _ in range(300):
                k = p.next_length(100)
                n = 0
                while n < k and rng.random() < rates[n]:
                    n += 1
                p.update(k, n, 0.0, 1.0)
                ks.append(k)
            shares.append(statistics.mean(true_tps(k) for k in ks[30:]) / true_tps(best))
        print(f"{name:13s} acceptance {rates[:n_max]}: best k {best}, auto earns {statistics.mean(shares):.3f} of it")
