"""The auto policy step by step, beside plain decoding and fixed draft lengths (issue #29).

For each auto generation: every step's chosen draft length (P: a probe, or the draft after one
that times a draft token), tokens accepted / drafted, the predicted step seconds (verify, draft
token, overhead) against the measured ones, and the expected tokens per second of each k; then
each variant's median tokens per second over the interleaved runs. Run it under the bench lock:

    flock /tmp/pymtp-bench.lock python tools/trace_policy.py --model echo-70 --tokens 48 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from pymtp import SpecConfig
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.bench.sampling import PRESETS
from pymtp.generate import generate
from pymtp.policy import AutoPolicy
from pymtp.session import Session
from pymtp.stats import SpecStats


class Tracer:
    """Wraps AutoPolicy.next_length / update to record what each step predicted and took."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self._next, self._update = AutoPolicy.next_length, AutoPolicy.update

    def __enter__(self) -> Tracer:
        tracer = self

        def next_length(policy, n_past=0, rows_before=0, tokens_before=0.0):
            k = tracer._next(policy, n_past, rows_before, tokens_before)
            gain, cost = policy.expected(n_past, rows_before, tokens_before, cut=policy.cutting)
            gain_other, cost_other = policy.expected(n_past, rows_before, tokens_before, cut=not policy.cutting)
            c = policy.costs
            policy._traced = dict(
                k=k,
                probe=policy.trace[-1].probe,
                cost=cost[k],
                verify=c.verify(rows_before + k + 1, n_past),
                draft=c.draft_cost(policy.mode),
                tps=[g / x for g, x in zip(gain, cost)],
                tps_other=[g / x for g, x in zip(gain_other, cost_other)],
                cutting=policy.cutting,
                rates_all=policy.acceptance_all.rates(),
                rates=policy.acceptance.rates(),
                # the verify of n rows over one row's, n = 2 .. K + 1
                shape=[
                    c.verify(rows_before + n, n_past) / c.verify(rows_before + 1, n_past)
                    for n in range(2, policy.n_max + 2)
                ],
            )
            return k

        def update(policy, n_drafted, n_accepted, t_draft=0.0, t_verify=0.0, confidence=None):
            d = dict(getattr(policy, "_traced", {}))
            d.update(nd=n_drafted, na=n_accepted, t_draft=t_draft, t_verify=t_verify, cut=policy.p_min)
            d["asked"] = policy.asked  # (the speculator's bound of k)
            d["kept"] = policy.kept.rates()
            d["t_step"] = time.perf_counter() - policy._t_chosen
            d["conf"] = list(confidence or ())
            # the verify's predicted seconds for the rows it had (a cut may drop some), before
            # the step teaches the costs
            d["verify_rows"] = policy.costs.verify(policy._rows_before + n_drafted + 1, policy._pos)
            tracer.steps.append(d)
            return tracer._update(policy, n_drafted, n_accepted, t_draft, t_verify, confidence=confidence)

        AutoPolicy.next_length, AutoPolicy.update = next_length, update  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc) -> None:
        AutoPolicy.next_length, AutoPolicy.update = self._next, self._update  # type: ignore[method-assign]


def show(steps: list[dict]) -> None:
    for i, d in enumerate(steps):
        print(
            f"{i:3d} k={d['k']}{'P' if d['probe'] else ' '} acc {d['na']}/{d['nd']}  "
            f"predicted {d['cost'] * 1e3:6.2f} ms (verify {d['verify'] * 1e3:5.2f}, draft/token "
            f"{d['draft'] * 1e3:4.2f})  measured {d['t_step'] * 1e3:6.2f} ms (verify {d['t_verify'] * 1e3:5.2f}, "
            f"draft {d['t_draft'] * 1e3:5.2f})  tok/s by k {[round(x) for x in d['tps']]} "
            f"({'under the cut' if d['cutting'] else 'no cut'}; the other: {[round(x) for x in d['tps_other']]})  "
            f"acceptance {[round(r, 2) for r in d['rates']]} kept {[round(r, 2) for r in d['kept']]} "
            f"of all (no cut) {[round(r, 2) for r in d['rates_all']]} cut {d['cut']:.2f} "
            f"c(n)/c(1) {[round(r, 2) for r in d['shape']]}"
        )


def add_stats(total: SpecStats, s: SpecStats) -> None:
    """Sum a generation's counters into total (steps, tokens, seconds, per-position counts)."""
    for f in ("n_steps", "n_drafted", "n_accepted", "n_emitted", "t_draft", "t_verify", "t_total"):
        setattr(total, f, getattr(total, f) + getattr(s, f))
    for mine, theirs in ((total.drafted_at, s.drafted_at), (total.accepted_at, s.accepted_at)):
        mine.extend([0] * (len(theirs) - len(mine)))
        for i, x in enumerate(theirs):
            mine[i] += x
    total.k_chosen.extend(s.k_chosen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="echo-70", help="a pymtp bench --model value")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sampling", default="greedy", choices=sorted(PRESETS))
    ap.add_argument("--drafts", default="1,2,3,4", help="fixed lengths; the longest is auto's K")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    args = ap.parse_args()
    drafts = [int(x) for x in args.drafts.split(",")]
    st = PRESETS[args.sampling]
    variants: dict[str, SpecConfig | bool] = {"plain": False}
    variants.update({f"mtp-{k}": SpecConfig(n_draft=k) for k in drafts})
    variants["auto"] = SpecConfig(policy="auto", n_draft=max(drafts))
    prompts = code_prompts(1) + prose_prompts(1)
    tps: dict[str, list[float]] = {v: [] for v in variants}
    totals: dict[str, SpecStats] = {v: SpecStats() for v in variants}
    verify_ratio: dict[int, list[float]] = {}  # auto: rows -> measured / predicted verify seconds
    with Session(resolve_model(args.model), n_ctx=2048, n_threads=args.threads) as s:
        kw = st.generate_kwargs()
        for spec in variants.values():  # warm-up (and the calibration), as pymtp bench does
            generate(prompts[0].text, s, max_tokens=16, seed=0, ignore_eos=True, speculative=spec, **kw)
        for rep in range(args.repeats):
            for p in prompts:
                for name, spec in variants.items():
                    with Tracer() as tr:
                        t0 = time.perf_counter()
                        r = generate(
                            p.text, s, max_tokens=args.tokens, seed=1000 + rep, ignore_eos=True, speculative=spec, **kw
                        )
                        wall = time.perf_counter() - t0
                    tps[name].append(len(r.tokens) / max(wall - r.stats.t_prefill, 1e-9))
                    add_stats(totals[name], r.stats)
                    if name == "auto":
                        print(f"--- repeat {rep} {p.kind}: auto {tps[name][-1]:.1f} tok/s, {r.stats.n_steps} steps")
                        if not args.quiet:
                            show(tr.steps)
                        for d in tr.steps:
                            if d["t_verify"] > 0:
                                verify_ratio.setdefault(d["nd"] + 1, []).append(d["t_verify"] / d["verify_rows"])
    print(f"\n{args.model} {args.sampling}, {args.tokens} tokens, threads {args.threads}: medians (runs)")
    plain = statistics.median(tps["plain"])
    for name, v in tps.items():
        m = statistics.median(v)
        print(f"{name:8s} {m:7.1f} tok/s  x plain {m / plain:4.2f}  {[round(x) for x in v]}")
    print("\nper variant, all runs: tokens per step, ms per step (verify, draft), acceptance by position")
    for name, t in totals.items():
        n = max(t.n_steps, 1)
        reach = [float("inf"), *t.accepted_at]  # (about) the steps that reached position i
        cond = [a / min(d, r) if min(d, r) else 0.0 for a, d, r in zip(t.accepted_at, t.drafted_at, reach)]
        ks = {k: t.k_chosen.count(k) for k in sorted(set(t.k_chosen))}
        print(
            f"{name:8s} {t.tokens_per_step:4.2f} tok/step  {t.t_total / n * 1e3:6.1f} ms/step (verify "
            f"{t.t_verify / n * 1e3:5.1f}, draft {t.t_draft / n * 1e3:4.1f})  acceptance {[round(x, 2) for x in cond]}"
            + (f"  k chosen {ks}" if ks else "")
        )
    print("auto, verify measured / predicted by rows (median, steps):", end="")
    for n, v in sorted(verify_ratio.items()):
        print(f"  {n}: {statistics.median(v):.2f} ({len(v)})", end="")
    print()


if __name__ == "__main__":
    main()
