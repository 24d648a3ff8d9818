"""The Python a speculative step costs, before against after a change, in one process.

    python tools/measure_step_python.py --before SRC_DIR:LIBRARY --after SRC_DIR:LIBRARY
        [--model tiny] [--mode plain|N] [--temperature 0] [--steps 150] [--pairs 40] [--real]

Each side is a source tree (SRC_DIR/src/pymtp) and its libpymtp.so (its pymtp.h beside it);
both are imported into this process, under two package names, and stepped alternately, so
that both see the same machine load. The target's decodes are stubbed out after a real first
step (the logits of that step are read again by every later step): what is left of a step's
time is its Python and the cheap native calls (logits view, the sampler's verify). Drafting
modes (--mode N: drafts of N, fixed) keep the head's decodes real. --real keeps every decode
and reports CPU seconds instead. Prints per side the minimum and median microseconds per
step over the pairs, the median of the per-pair after/before ratios and the difference of
the minima (the least disturbed figure on a loaded machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def import_tree(name: str, spec: str) -> ModuleType:
    """pymtp from SRC_DIR/src under the package name `name`, bound to LIBRARY."""
    src, _, lib = spec.partition(":")
    pkg = Path(src) / "src" / "pymtp"
    header = Path(lib).with_name("pymtp.h")
    if not header.exists():
        raise SystemExit(f"{header} is missing: the library's header must sit beside it")
    os.environ["PYMTP_LIBRARY"], os.environ["PYMTP_HEADER"] = lib, str(header)
    s = importlib.util.spec_from_file_location(name, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
    assert s is not None and s.loader is not None
    module = importlib.util.module_from_spec(s)
    sys.modules[name] = module
    s.loader.exec_module(module)
    return module


def stepper(pkg: ModuleType, args: argparse.Namespace) -> Callable[[], float]:
    """A function that runs args.steps steps of a fresh generation; returns us per step."""
    native: Any = sys.modules[pkg.__name__ + "._native"]
    session = pkg.load(args.model, n_ctx=1024, n_threads=1)
    spec = None
    if args.mode != "plain":
        fields: dict[str, Any] = {"n_draft": int(args.mode)}
        if "policy" in pkg.SpecConfig.model_fields:
            fields["policy"] = "fixed"
        spec = pkg.SpecConfig(**fields)
    sp = session.speculator(pkg.SamplingConfig(temperature=args.temperature, seed=1), spec)
    stub = {"on": False}
    target = sp.target._handle()

    def stubbed(real: Callable[..., int]) -> Callable[..., int]:
        return lambda *a: 0 if stub["on"] and a[0] == target else real(*a)

    for name in ("pymtp_decode", "pymtp_decode_rows"):  # the entry points before and after #31
        if hasattr(native.lib._raw, name):
            native.lib.__dict__[name] = stubbed(getattr(native.lib, name))
    prompt = session.tokenize("def fibonacci(n):")
    clock = time.process_time if args.real else time.perf_counter

    def run() -> float:
        stub["on"] = False
        sp.start(prompt)
        sp.step()  # a real decode: the logits every stubbed step reads
        stub["on"] = not args.real
        try:
            t = clock()
            for _ in range(args.steps):
                sp.step()
            return (clock() - t) / args.steps * 1e6
        finally:
            stub["on"] = False

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, metavar="SRC:LIB")
    ap.add_argument("--after", required=True, metavar="SRC:LIB")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--mode", default="plain", help="plain, or N: fixed drafts of N")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--real", action="store_true", help="keep the target's decodes (CPU time per step)")
    args = ap.parse_args()
    if args.mode != "plain" and not args.real:
        raise SystemExit("stubbed target decodes work for plain steps only: add --real for drafts")
    before = stepper(import_tree("pymtp", args.before), args)
    after = stepper(import_tree("pymtp_after", args.after), args)
    before(), after()  # warm up
    b: list[float] = []
    a: list[float] = []
    for i in range(args.pairs):  # alternate which side goes first
        if i % 2:
            b.append(before())
            a.append(after())
        else:
            a.append(after())
            b.append(before())
    ratio = statistics.median(x / y for x, y in zip(a, b))
    what = "CPU us/step (real decodes)" if args.real else "us/step, target decode stubbed"
    print(f"{args.model} {args.mode} T={args.temperature}: {what}, {args.pairs} pairs of {args.steps} steps")
    print(f"  before min {min(b):9.2f}  median {statistics.median(b):9.2f}")
    print(f"  after  min {min(a):9.2f}  median {statistics.median(a):9.2f}")
    print(f"  after/before median of pair ratios {ratio:.3f}; after - before of the minima {min(a) - min(b):+.2f} us")


if __name__ == "__main__":
    main()
