#!/usr/bin/env python3
"""A longer fuzzing campaign than CI runs: corrupted GGUFs, loaded in a worker subprocess.

    PYTHONPATH=src python3 tools/fuzz_campaign.py --minutes 10 [--seed 1] [--families glm4moe,qwen35]

Each case takes a random-weight fixture of one family, applies one to three
mutations aimed at its header, KV metadata and tensor infos (tests/test_fuzz.py:
random_mutations), loads it with pymtp and, when it loads, generates a few
tokens with and without speculation. A case passes when the worker answers
with a result or a Python error of the allowed kinds; a worker that dies,
hangs or raises anything else is a finding: its mutations are written to
--out (JSON lines) so that a test can replay them.

Prints the number of cases tried, how they ended, and every finding.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load_fuzz_module():
    spec = importlib.util.spec_from_file_location("pymtp_test_fuzz", ROOT / "tests" / "test_fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--cases", type=int, default=0, help="stop after this many cases (0: only the time limit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", default="glm4moe,qwen35,step35,deepseek2,qwen3next,mimo2,qwen35moe")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds one case may take before it counts as a hang")
    ap.add_argument("--out", default="fuzz_findings.jsonl")
    args = ap.parse_args(argv)

    fz = _load_fuzz_module()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pymtp_testing: the checkout's test helpers
    from pymtp_testing import fixtures

    work = Path(tempfile.mkdtemp(prefix="pymtp-fuzz-"))
    layouts = {}
    for fam in args.families.split(","):
        path = fixtures.fixture_path(fam, cache_dir=work / "fixtures")
        regions, data_offset = fz.gguf_layout(path)
        layouts[fam] = (path.read_bytes(), regions, data_offset)

    rng = random.Random(args.seed)
    worker = fz.LoadWorker(timeout=args.timeout)
    outcomes: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    findings = []
    t_end = time.monotonic() + args.minutes * 60
    n = 0
    case_path = work / "case.gguf"
    fams = list(layouts)
    try:
        while time.monotonic() < t_end and (args.cases <= 0 or n < args.cases):
            fam = rng.choice(fams)
            data, regions, data_offset = layouts[fam]
            muts = fz.random_mutations(rng, regions, data_offset, len(data))
            case_path.write_bytes(fz.apply_mutations(data, muts))
            t0 = time.monotonic()
            ans = worker.run(str(case_path))
            dt = time.monotonic() - t0
            n += 1
            if ans.get("crashed"):
                kind = "hang" if ans["hung"] else f"crash(rc={ans['returncode']})"
                outcomes[kind] += 1
                findings.append({"family": fam, "mutations": muts, "kind": kind, "stderr": ans["stderr"][-1500:]})
                print(f"[{n}] {kind} {fam} {muts}\n{ans['stderr'][-800:]}", flush=True)
            elif not ans.get("ok") and not ans.get("allowed"):
                outcomes["bad-exception"] += 1
                findings.append({"family": fam, "mutations": muts, "kind": ans["exc"], "msg": ans["msg"]})
                print(f"[{n}] {ans['exc']}: {ans['msg']} {fam} {muts}", flush=True)
            elif ans.get("ok"):
                outcomes["loaded+generated"] += 1
            else:
                outcomes[f"refused@{ans['stage']}"] += 1
                errors[f"{ans['exc']}: {ans['msg'][:90]}"] += 1
            if dt > 5:
                print(f"[{n}] slow case ({dt:.1f} s) {fam} {muts}", flush=True)
            if n % 500 == 0:
                print(f"... {n} cases, {dict(outcomes)}", flush=True)
    finally:
        worker.close()

    print(f"\n{n} cases in {args.minutes:g} min (seed {args.seed}), worker started {worker.n_started} time(s)")
    for k, v in outcomes.most_common():
        print(f"  {v:6d}  {k}")
    print("most common refusals:")
    for k, v in errors.most_common(12):
        print(f"  {v:6d}  {k}")
    if findings:
        with open(args.out, "w") as f:
            for item in findings:
                f.write(json.dumps(item) + "\n")
        print(f"{len(findings)} finding(s) written to {args.out}")
    else:
        print("no findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
