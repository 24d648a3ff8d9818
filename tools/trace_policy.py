"""The auto policy step by step, beside plain decoding and fixed draft lengths (issue #29).

For each auto generation: every step's chosen draft length (P: a probe, or the draft after one
that times a draft token), tokens accepted / drafted, the predicted step seconds (verify, draft
token, overhead) against the measured ones, and the expected tokens per second of each k; then
each variant's median tokens per second over the interleaved runs. Run it under the bench lock:

    flock /tmp/pymtp-bench.lock python tools/trace_policy.py --model echo-70 --tokens 48 --repeats 3

--streams N: a Batch of N texts (the prompts of tools/measure_streams.py) in one process instead,
plain, auto and the fixed lengths interleaved: every auto step's lengths (P: one text probed),
tokens accepted, the batch's predicted step seconds (the last text's choice prices the whole
verify and draft) against the measured ones; then the seconds of a verify and of the drafting
phase by rows, and the net seconds auto's drafting steps cost against plain steps of the run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from pymtp import Batch, GenerationConfig, SpecConfig, engine
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


STREAM_PROMPTS = [
    "def fibonacci(n):",
    "The history of the printing press",
    "import json\n\ndef load(path):",
    "class Stack:\n    def push(self, x):",
    "Once upon a time",
    "SELECT name FROM users WHERE",
    "def quicksort(xs):",
    "The three laws of motion are",
]


class BatchTracer:
    """Records each batched step: the lengths plan_batch chose (and whether one was a probe),
    the predicted seconds of the whole step, and the measured draft, verify and step seconds."""

    def __init__(self) -> None:
        self.steps: list[dict] = []
        self._plan, self._observe, self._step = engine.plan_batch, engine._observe_shared_costs, engine.step

    def __enter__(self) -> BatchTracer:
        tracer = self

        def plan(seqs, max_new):
            ks = tracer._plan(seqs, max_new)
            last = seqs[-1].policy
            d = tracer.steps[-1]
            d.update(ks=list(ks))
            for sp, k in zip(seqs, ks):
                t = getattr(sp.policy, "trace", None)
                d["probe"] = d["probe"] or bool(k and t and t[-1].probe)
            # each drafting text's estimates: acceptance at position 1 (of kept tokens; of all
            # tokens), keep rate at position 1, whether under the cut, and the cut
            d["why"] = [
                (
                    round(sp.policy.acceptance.rates()[0], 2),
                    round(sp.policy.acceptance_all.rates()[0], 2),
                    round(sp.policy.kept.rates()[0], 2),
                    sp.policy.cutting,
                    round(sp.policy.p_min, 2),
                )
                for sp, k in zip(seqs, ks)
                if k and isinstance(sp.policy, AutoPolicy)
            ]
            if isinstance(last, AutoPolicy) and last.trace:
                # the step as the costs price it: one verify of every row, the head's decodes
                # (one per draft position, shared by the texts drafting there), the overhead
                # (a probe's catch-up on missed tokens is not in it)
                c, mode = last.costs, last.mode
                n_pos, n_tok = max(ks), sum(ks)
                draft = c.draft_cost(mode) * (n_pos + c.draft_share(mode) * (n_tok - n_pos))
                mean_pos = sum(sp.n_past for sp in seqs) / len(seqs)
                d["predicted"] = c.verify(len(ks) + n_tok, mean_pos) + draft + c.overhead(n_tok > 0, mode)
            return ks

        def observe(seqs, drafts, t_draft, t_verify):
            tracer.steps[-1].update(nd=[len(x.tokens) for x in drafts], t_draft=t_draft, t_verify=t_verify)
            return tracer._observe(seqs, drafts, t_draft, t_verify)

        def step(seqs, max_new):
            tracer.steps.append({"ks": [0] * len(seqs), "probe": False, "predicted": 0.0})
            t0 = time.perf_counter()
            out = tracer._step(seqs, max_new)
            tracer.steps[-1].update(wall=time.perf_counter() - t0, acc=[r.n_accepted for r in out], n=len(seqs))
            return out

        engine.plan_batch, engine._observe_shared_costs, engine.step = plan, observe, step  # type: ignore[assignment]
        return self

    def __exit__(self, *exc) -> None:
        engine.plan_batch, engine._observe_shared_costs, engine.step = self._plan, self._observe, self._step  # type: ignore[assignment]


def streams_main(args, drafts: list[int]) -> None:
    """--streams N: see the module docstring."""
    variants: dict[str, SpecConfig | None] = {"plain": None, "auto": SpecConfig(policy="auto", n_draft=max(drafts))}
    variants.update({f"mtp-{k}": SpecConfig(policy="fixed", n_draft=k) for k in drafts})
    tps: dict[str, list[float]] = {v: [] for v in variants}
    by_rows: dict[tuple[str, int], list[tuple[float, float]]] = {}
    net: list[tuple[float, float, float]] = []  # auto runs: (extra seconds, tokens gained, run seconds)
    ratios: dict[str, list[float]] = {}  # auto's steps of N texts, by kind: measured / predicted
    with Session(resolve_model(args.model), n_ctx=2048, n_threads=args.threads) as s:
        prompts = [s.tokenize(STREAM_PROMPTS[i % len(STREAM_PROMPTS)]) for i in range(args.streams)]

        def once(spec, tokens):
            with Batch(s, args.streams, n_ctx=1024, spec=None) as b, BatchTracer() as tr:
                limits = GenerationConfig(max_tokens=tokens, ignore_eos=True)
                items = [b.add(p, spec=spec, limits=limits) for p in prompts]
                t0 = time.perf_counter()
                b.run()
                wall = time.perf_counter() - t0
            return sum(len(it.result.tokens) for it in items) / wall, tr.steps, wall

        for spec in variants.values():  # warm-up (and the calibration)
            once(spec, 8)
        for rep in range(args.repeats):
            for name, spec in variants.items():
                rate, steps, wall = once(spec, args.tokens)
                tps[name].append(rate)
                for d in steps:
                    if "nd" in d:
                        by_rows.setdefault((name, len(d["nd"]) + sum(d["nd"])), []).append(
                            (d["t_verify"], d["t_draft"])
                        )
                if name != "auto":
                    continue
                full = [d for d in steps if d.get("n") == args.streams]
                plain_s = statistics.median([d["wall"] for d in full if not any(d["ks"])] or [float("nan")])
                drafting = [d for d in full if any(d["ks"])]
                extra = sum(d["wall"] - plain_s for d in drafting)
                gained = sum(sum(d["acc"]) for d in drafting)
                net.append((extra, gained * plain_s / args.streams, wall))
                for d in full:
                    if d["predicted"] > 0:
                        kind = "probe" if d["probe"] else "drafting" if any(d["ks"]) else "plain"
                        ratios.setdefault(kind, []).append(d["wall"] / d["predicted"])
                print(
                    f"--- repeat {rep}: auto {rate:.1f} tok/s, {len(steps)} steps, {len(drafting)} of the "
                    f"{len(full)} steps of {args.streams} texts drafted ({sum(d['probe'] for d in drafting)} probes): "
                    f"{extra * 1e3:.0f} ms beyond plain steps ({plain_s * 1e3:.1f} ms), their accepted tokens worth "
                    f"{net[-1][1] * 1e3:.0f} ms"
                )
                if not args.quiet:
                    for i, d in enumerate(steps):
                        if any(d["ks"]) or i < 2:
                            print(
                                f"{i:3d} k={d['ks']}{'P' if d['probe'] else ' '} acc {d.get('acc')} predicted "
                                f"{d['predicted'] * 1e3:6.2f} ms measured {d.get('wall', 0) * 1e3:6.2f} (verify "
                                f"{d.get('t_verify', 0) * 1e3:5.2f}, draft {d.get('t_draft', 0) * 1e3:5.2f}) drafted "
                                f"{d.get('nd')} (acceptance, of all, kept, under the cut, cut) {d.get('why')}"
                            )
    print(f"\n{args.model}, {args.streams} streams, {args.tokens} tokens each, threads {args.threads}: medians (runs)")
    plain = statistics.median(tps["plain"])
    for name, v in tps.items():
        m = statistics.median(v)
        print(f"{name:8s} {m:7.1f} tok/s  x plain {m / plain:4.2f}  {[round(x) for x in v]}")
    print("verify and draft ms by rows (median, steps):")
    for (name, n), v in sorted(by_rows.items(), key=lambda x: (x[0][1], x[0][0])):
        print(
            f"  {name:8s} {n:3d} rows: verify {statistics.median(x[0] for x in v) * 1e3:6.2f}, draft "
            f"{statistics.median(x[1] for x in v) * 1e3:5.2f} ({len(v)})"
        )
    extra, worth, total = (sum(x[i] for x in net) for i in range(3))
    print(
        f"auto's drafting steps: {extra / total:.1%} of its time beyond plain steps, "
        f"their tokens worth {worth / total:.1%}"
    )
    for kind, v in sorted(ratios.items()):
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        print(
            f"auto's {kind} steps of {args.streams} texts: measured / predicted seconds "
            f"median {q[1]:.2f} (quartiles {q[0]:.2f}-{q[2]:.2f}, {len(v)} steps)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="echo-70", help="a pymtp bench --model value")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sampling", default="greedy", choices=sorted(PRESETS))
    ap.add_argument("--drafts", default="1,2,3,4", help="fixed lengths; the longest is auto's K")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    ap.add_argument("--streams", type=int, default=0, help="N texts in one Batch (greedy) instead of one")
    args = ap.parse_args()
    drafts = [int(x) for x in args.drafts.split(",")]
    if args.streams:
        return streams_main(args, drafts)
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
