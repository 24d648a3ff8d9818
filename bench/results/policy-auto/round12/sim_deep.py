"""Round 12 (#29): where auto's last 2-3% on the deep profile goes, simulated (round 11's
sim_profile.py: acceptance drawn per draft position from the deep variant's conditional rates,
its step times; no timing noise), taken apart by what-ifs patched onto the policy.

Differences from sim_profile.py: the fixed lengths' expected time is one Monte Carlo mean per
kind and length (4,000 generations, the same for every variant), and auto is scored as a ratio
of means (best fixed expected time x generations / auto's total time; sim_profile's mean of
per-generation ratios is biased toward auto by Jensen's inequality). Processes run code, prose,
code, prose (the estimates carried), as a `pymtp bench` run orders them; the same seeds for
every variant (common random numbers).

    PYTHONPATH=src python sim_deep.py [--processes 300] [--variants main,oracle,...] [--rates]

Variants: main; oracle (the acceptance estimates replaced by the true conditional rates);
no-stretch (no k + 1 drafts); oracle+no-stretch; hold-off; window-N (adaptive_window N).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import random
import statistics

from pymtp import SpecConfig
from pymtp import estimates as est_mod
from pymtp import policy as pol_mod
from pymtp.policy import AutoPolicy, CostModel

_spec = importlib.util.spec_from_file_location(
    "sim_profile", pathlib.Path(__file__).parent.parent / "round11" / "sim_profile.py"
)
sp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sp)
MS, ROWS, DRAFT, PROFILES = sp.MS, sp.ROWS, sp.DRAFT, sp.PROFILES
ORDER = ("code", "prose", "code", "prose")


def fixed_means(tokens: int, n: int = 4000) -> dict[str, dict[int, float]]:
    return {
        kind: {
            k: statistics.mean(sp.gen(random.Random(10**6 + r), prof, tokens, k_fixed=k) for r in range(n))
            for k in range(1, 5)
        }
        for kind, prof in PROFILES.items()
    }


class Patch:
    """Set module attributes for the duration of a with-block."""

    def __init__(self, mod, **values):
        self.mod, self.values, self.saved = mod, values, {}

    def __enter__(self):
        for k, v in self.values.items():
            self.saved[k] = getattr(self.mod, k)
            setattr(self.mod, k, v)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            setattr(self.mod, k, v)


def run_variant(name: str, processes: int, tokens: int, window: int = 16):
    """auto's total time per kind, and the draft lengths it chose."""
    patches = []
    if "no-stretch" in name:
        patches.append(Patch(pol_mod, STRETCH_SEEN=0))
    if "carry-" in name:
        patches.append(Patch(est_mod, CARRY=float(name.split("carry-")[1].split("+")[0])))
    if "hold-off" in name:
        patches.append(Patch(pol_mod, HOLD_MARGIN=1.0))
    truth = {"profile": None}
    if "oracle" in name:
        real = est_mod.Acceptance.rates

        def rates(self, prior=None):
            p, est = truth["profile"], real(self, prior)
            if p is None or self.prior == 1.0:
                return est
            if "oracle-first" in name:  # the first position's rate known, the later ones estimated
                return [p[0]] + est[1:]
            if "oracle-shape" in name:  # each later position: the first one's estimate x the true ratio
                return [est[0]] + [min(1.0, est[0] * p[j] / p[0]) for j in range(1, len(est))]
            if "oracle-later" in name:
                return [est[0]] + list(p[1 : len(est)])
            return list(p[: len(self.reached)])

        patches.append(Patch(est_mod.Acceptance, rates=rates))
    if "reach-decay" in name:
        # each position's counts decay only on the steps that reached it
        def count(self, n_reached, n_passed, weight=1.0):
            d = self._decay
            self.reached = [x * d + weight if i < n_reached else x for i, x in enumerate(self.reached)]
            self.accepted = [
                x * d + weight * (i < n_passed) if i < n_reached else x for i, x in enumerate(self.accepted)
            ]

        patches.append(Patch(est_mod.Acceptance, count=count))
    if "pos-prior" in name:
        # per-position priors: a later position's pseudo-count is at its long-run rate on this
        # model (all generations of the process, undecayed), not at the rate of the position before
        m = float(name.split("pos-prior-")[1].split("+")[0]) if "pos-prior-" in name else 1.0
        real_count, long = est_mod.Acceptance.count, truth.setdefault("long", {})

        def count(self, n_reached, n_passed, weight=1.0):
            real_count(self, n_reached, n_passed, weight)
            if self.prior != 1.0:
                r, a = long.setdefault("r", [0.0] * 4), long.setdefault("a", [0.0] * 4)
                for i in range(min(n_reached, 4)):
                    r[i] += weight
                    a[i] += weight * (i < n_passed)

        def rates(self, prior=None):
            out, prev = [], self.prior if prior is None else prior
            r, a = long.get("r", [0.0] * 4), long.get("a", [0.0] * 4)
            for j, (acc, reached) in enumerate(zip(self.accepted, self.reached)):
                p0 = (a[j] + prev) / (r[j] + 1.0) if j and r[j] > 0 else prev
                prev = (acc + m * p0) / (reached + m)
                out.append(prev)
            return out

        patches.append(Patch(est_mod.Acceptance, count=count, rates=rates))
    if "cap" in name:
        # a running mean (no decay) until a position's count reaches the window, decayed after
        def count(self, n_reached, n_passed, weight=1.0):
            cap = 1.0 / (1.0 - self._decay)
            for i in range(len(self.reached)):
                if i >= n_reached:
                    continue  # (unreached: kept)
                x = self.reached[i]
                f = min(1.0, (cap - weight) / x) if x > 0 else 1.0
                self.reached[i] = x * f + weight
                self.accepted[i] = self.accepted[i] * f + weight * (i < n_passed)

        patches.append(Patch(est_mod.Acceptance, count=count))
    for p in patches:
        p.__enter__()
    try:
        total = {"code": 0.0, "prose": 0.0}
        by_gen = [0.0] * len(ORDER)
        ks: dict[str, dict[int, int]] = {"code": {}, "prose": {}}
        for seed in range(processes):
            costs = CostModel({n: t * MS for n, t in ROWS.items()}, DRAFT[1] * MS)
            key = sp.Key()
            truth.setdefault("long", {}).clear()  # (a new process: no long-run rates yet)
            for i, kind in enumerate(ORDER):
                truth["profile"] = PROFILES[kind]
                cfg = SpecConfig(policy="auto", n_draft=4, adaptive_window=window)
                pol = AutoPolicy(cfg, 4, model=key, costs=costs)
                t = sp.gen(random.Random(seed * 31 + i), PROFILES[kind], tokens, policy=pol)
                total[kind] += t
                by_gen[i] += t
                for c in pol.trace:
                    ks[kind][c.k] = ks[kind].get(c.k, 0) + 1
        return total, by_gen, ks
    finally:
        for p in reversed(patches):
            p.__exit__()


def mean_rates(processes: int, tokens: int) -> None:
    """The acceptance estimates auto drafts by, per generation of a process (mean over its steps)."""
    seen: dict[int, list[list[float]]] = {}
    for seed in range(processes):
        costs = CostModel({n: t * MS for n, t in ROWS.items()}, DRAFT[1] * MS)
        key = sp.Key()
        for i, kind in enumerate(ORDER):
            pol = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=key, costs=costs)
            choose = pol.next_length

            def next_length(*a, _choose=choose, _pol=pol, _i=i, **kw):
                k = _choose(*a, **kw)
                seen.setdefault(_i, []).append(list(_pol.last_rates))
                return k

            pol.next_length = next_length
            sp.gen(random.Random(seed * 31 + i), PROFILES[kind], tokens, policy=pol)
    for i, kind in enumerate(ORDER):
        est = [statistics.mean(r[j] for r in seen[i]) for j in range(4)]
        print(f"generation {i} ({kind}): estimated " + " ".join(f"{x:.2f}" for x in est) + f"  true {PROFILES[kind]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--variants", default="main,oracle,no-stretch,oracle+no-stretch,hold-off,window-32,window-64")
    ap.add_argument("--rates", action="store_true", help="print the estimates auto drafts by, and stop")
    args = ap.parse_args()
    if args.rates:
        mean_rates(args.processes, args.tokens)
        return
    fixed = fixed_means(args.tokens)
    best = {kind: min(v.values()) for kind, v in fixed.items()}
    for kind, v in fixed.items():
        print(f"fixed {kind}: " + " ".join(f"k={k} x best {best[kind] / t:.3f}" for k, t in v.items()))
    n_gen = args.processes * 2  # generations per kind
    for name in args.variants.split(","):
        window = int(name.split("window-")[1]) if "window-" in name else 16
        total, by_gen, ks = run_variant(name, args.processes, args.tokens, window)
        xs = {kind: best[kind] * n_gen / total[kind] for kind in total}
        per_gen = [best[kind] * args.processes / t for kind, t in zip(ORDER, by_gen)]
        hist = "  ".join(
            f"{kind} k " + "/".join(f"{ks[kind].get(k, 0) / sum(ks[kind].values()):.2f}" for k in range(5))
            for kind in ks
        )
        print(
            f"{name:24s} code {xs['code']:.3f} prose {xs['prose']:.3f}  by generation "
            + " ".join(f"{x:.3f}" for x in per_gen)
            + f"   {hist}"
        )


if __name__ == "__main__":
    main()
