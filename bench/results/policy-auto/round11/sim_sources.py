"""Round 11 (#29): what each exploration source of the auto policy costs, simulated exactly on an
echo fixture (round 10's sim_echo.py: which draft the head gets right is known token by token; no
timing noise). Each row turns one source off (a what-if, by patching the policy's constants) and
reports auto against the best fixed length of the same texts, as a `pymtp bench` run orders them
(code, prose, code, prose, ... in one process: the estimates carry from one generation to the
next).

    PYTHONPATH=src PYMTP_LIBRARY=... python sim_sources.py [echo-70] [--table echo|deep] [--n-prompts 1]

Sources: `stretch` (a draft one token longer than the best, every PROBE_FIRST steps until its rows
were timed STRETCH_SEEN times), `free` (a draft without the confidence cut, as often), `hold` (the
last length stays until another earns HOLD_MARGIN more), `prior` (a process's first generation
starts from PRIOR_RATE; `prior` off: an earlier generation of another text warmed the estimates).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib

from pymtp import SpecConfig
from pymtp import policy as pol_mod
from pymtp.bench.echo import EchoMaps
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.model import Model
from pymtp.policy import AutoPolicy, CostModel

_spec = importlib.util.spec_from_file_location(
    "sim_echo", pathlib.Path(__file__).parent.parent / "round10" / "sim_echo.py"
)
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)

MS = 1e-3
TABLES = {
    # round 8's echo-70 trace (1 thread): see round10/sim_echo.py
    "echo": (dict(sim.ROWS), dict(sim.DRAFT)),
    # round 10's deep-variant trace (traces/deep-greedy-p11b.txt): c(1) 7.86 ms, c(n)/c(1) 0.98
    # 1.11 1.34 1.61; drafts of 1-4 tokens 1.5 / 2.2 / 2.9 / 3.5 ms (rows nearly free up to 3)
    "deep": ({1: 7.86, 2: 7.70, 3: 8.73, 4: 10.53, 5: 12.65}, {0: 0.0, 1: 1.5, 2: 2.2, 3: 2.9, 4: 3.5}),
}
OFF = {  # a source off: the constants that disable it
    "stretch": {"STRETCH_SEEN": 0},  # (then every PROBE_MAX = 64 steps: never in 48 tokens)
    "free": {"FREE_SEEN": 0.0},
    "hold": {"HOLD_MARGIN": 1.0},
}


def evaluate(maps, lasts, tokens, repeats, table, off=(), warm=False):
    rows, draft = TABLES[table]
    sim.ROWS.clear(), sim.ROWS.update(rows)
    sim.DRAFT.clear(), sim.DRAFT.update(draft)
    saved = {}
    for src in off:
        for name, v in OFF.get(src, {}).items():
            saved[name] = getattr(pol_mod, name)
            setattr(pol_mod, name, v)
    try:
        costs = CostModel({n: t * MS for n, t in rows.items()}, draft[1] * MS)
        key = sim.Key()
        if warm:  # an earlier generation of another text (the last prompt, reversed order)
            p = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=key, costs=costs)
            sim.run(maps, lasts[-1][1] + 1, tokens, policy=p)
        fixed: dict[str, dict[int, float]] = {}
        auto: dict[str, list[float]] = {}
        ks: dict[int, int] = {}
        for _ in range(repeats):
            for kind, last in lasts:
                for k in range(1, 5):
                    s, _ = sim.run(maps, last, tokens, k_fixed=k)
                    fixed.setdefault(kind, {}).setdefault(k, 0.0)
                    fixed[kind][k] += s
                p = AutoPolicy(SpecConfig(policy="auto", n_draft=4), 4, model=key, costs=costs)
                s, chosen = sim.run(maps, last, tokens, policy=p)
                auto.setdefault(kind, []).append(s)
                for k, n in chosen.items():
                    ks[k] = ks.get(k, 0) + n
    finally:
        for name, v in saved.items():
            setattr(pol_mod, name, v)
    out = {}
    for kind in fixed:
        best = min(fixed[kind].values())  # seconds of all texts of this kind at the best length
        out[kind] = best / sum(auto[kind])
    return out, dict(sorted(ks.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="echo-70")
    ap.add_argument("--table", default="echo", choices=sorted(TABLES))
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n-prompts", type=int, default=1)
    args = ap.parse_args()
    path = resolve_model(args.model)
    maps = EchoMaps.read(path)
    model = Model(path, mtp=False)
    prompts = code_prompts(args.n_prompts) + prose_prompts(args.n_prompts)
    lasts = [(p.kind, model.tokenize(p.text, add_special=True)[-1]) for p in prompts]
    print(
        f"# {args.model}, {args.table} costs, {args.n_prompts} prompt(s) a kind x {args.repeats}, {args.tokens} tokens"
    )
    cases = [
        ("as is", (), False),
        ("stretch off", ("stretch",), False),
        ("free off", ("free",), False),
        ("hold off", ("hold",), False),
        ("warm start", (), True),
        ("stretch+free off", ("stretch", "free"), False),
        ("all off, warm", ("stretch", "free", "hold"), True),
    ]
    for name, off, warm in cases:
        r, ks = evaluate(maps, lasts, args.tokens, args.repeats, args.table, off, warm)
        cells = "  ".join(f"{kind} {v:.3f}" for kind, v in r.items())
        print(f"{name:18s} auto x best fixed: {cells}   k chosen {ks}")


if __name__ == "__main__":
    main()
