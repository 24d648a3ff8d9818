"""Round 10 (#29): greedy speculation on an echo fixture, simulated exactly (EchoMaps: which draft
the head gets right is known token by token), with step times from a cost table (round 8's
echo-70 trace, 1 thread, 2-core Zen 4), for fixed draft lengths and the auto policy of the tree on
PYTHONPATH. No timing noise: what a policy change does to the choice alone.

    PYTHONPATH=src PYMTP_LIBRARY=... python sim_echo.py [echo-70] [--tokens 48] [--repeats 2]
"""

from __future__ import annotations

import argparse

from pymtp import SpecConfig
from pymtp.bench.echo import EchoMaps
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.model import Model
from pymtp.policy import AutoPolicy, CostModel

MS = 1e-3
#: round 8's echo-70 trace (1 thread): one row 9.3 ms, c(n)/c(1) 1.04 1.18 1.51 1.92; drafts of
#: 1 / 2 / 3 / 4 tokens 2.2 / 3.4 / 4.2 / 4.6 ms
ROWS = {1: 9.3, 2: 9.67, 3: 10.97, 4: 14.04, 5: 17.86}
DRAFT = {0: 0.0, 1: 2.2, 2: 3.4, 3: 4.2, 4: 4.6}
OVERHEAD = 0.15  # ms a step outside the decodes
CONF = 0.78  # the head's top probability (greedy, T = 1), right or wrong


class Key:  # stands for the model in the policy's carried estimates
    pass


def step_ms(k: int) -> tuple[float, float]:
    return DRAFT[k], ROWS[k + 1]


def run(maps: EchoMaps, last: int, n_tokens: int, policy=None, k_fixed: int = 0) -> tuple[float, dict]:
    """Seconds of one generation and the draft lengths chosen."""
    text: list[int] = []
    total, ks = 0.0, {}
    while len(text) < n_tokens:
        x = text[-1] if text else last
        left = n_tokens - len(text) - 1
        k = min(policy.next_length(len(text)) if policy else k_fixed, left)
        if policy:
            policy.asked = k
        n_acc, d = 0, x
        while n_acc < k and maps.head_next[d] == maps.next[d]:
            n_acc += 1
            d = int(maps.head_next[d])
        t_draft, t_verify = step_ms(k)
        total += t_draft + t_verify + OVERHEAD
        if policy:
            policy.update(k, n_acc, t_draft * MS, t_verify * MS, confidence=[CONF] * k)
        ks[k] = ks.get(k, 0) + 1
        text += maps.greedy(x, n_acc + 1)
    return total * MS, ks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="echo-70")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n-prompts", type=int, default=1)
    ap.add_argument(
        "--prior-weight", type=float, default=None, help="(what-if) pseudo-counts of an unseen position's prior"
    )
    ap.add_argument("--per-prompt", action="store_true", help="each prompt's auto x its best fixed length")
    args = ap.parse_args()
    if args.prior_weight is not None:
        from pymtp import estimates

        w = args.prior_weight

        def rates(self, prior=None):
            out, prev = [], self.prior if prior is None else prior
            for a, r in zip(self.accepted, self.reached):
                prev = (a + w * prev) / (r + w)
                out.append(prev)
            return out

        estimates.Acceptance.rates = rates
    path = resolve_model(args.model)
    maps = EchoMaps.read(path)
    model = Model(path, mtp=False)
    prompts = code_prompts(args.n_prompts) + prose_prompts(args.n_prompts)
    lasts = [(p.kind, model.tokenize(p.text, add_special=True)[-1]) for p in prompts]
    costs = CostModel({n: t * MS for n, t in ROWS.items()}, DRAFT[1] * MS)
    key = Key()
    res: dict[str, dict[str, list[float]]] = {}
    chosen: dict[str, dict[int, int]] = {}
    for _ in range(args.repeats):
        for kind, last in lasts:
            for k in range(5):
                s, _ = run(maps, last, args.tokens, k_fixed=k)
                res.setdefault(kind, {}).setdefault(f"mtp-{k}" if k else "plain", []).append(args.tokens / s)
            pol = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=key, costs=costs)
            s, ks = run(maps, last, args.tokens, policy=pol)
            res[kind].setdefault("auto", []).append(args.tokens / s)
            for k, n in ks.items():
                chosen.setdefault(kind, {})[k] = chosen.get(kind, {}).get(k, 0) + n
    if args.per_prompt:
        # each prompt alone: its best fixed length, and auto against it (one deterministic text:
        # the best of 4 lengths on it is partly the luck of where its steps start)
        for i, (kind, last) in enumerate(lasts):
            fixed = {k: args.tokens / run(maps, last, args.tokens, k_fixed=k)[0] for k in range(1, 5)}
            pol = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=key, costs=costs)
            a = args.tokens / run(maps, last, args.tokens, policy=pol)[0]
            best = max(fixed, key=fixed.get)
            row = " ".join(f"{fixed[k]:6.1f}" for k in range(1, 5))
            print(
                f"{kind}{i}: mtp-1..4 {row}  auto {a:6.1f}  x best {a / fixed[best]:.3f} (mtp-{best})"
                f"  x mtp-2 {a / fixed[2]:.3f}"
            )
    for kind, r in res.items():
        best = max((v[-1], n) for n, v in r.items() if n.startswith("mtp"))
        line = "  ".join(f"{n} {sum(v) / len(v):6.1f}" for n, v in r.items())
        autos = " ".join(f"{x:.1f}" for x in r["auto"])
        print(
            f"{kind:6s} {line}   auto x best fixed {sum(r['auto']) / len(r['auto']) / best[0]:.3f} ({best[1]})"
            f"  auto per gen [{autos}]  k chosen {dict(sorted(chosen[kind].items()))}"
        )


if __name__ == "__main__":
    main()
