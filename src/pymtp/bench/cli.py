"""``pymtp bench`` / ``python -m pymtp.bench``: arguments, the run loop and the output files."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..session import Session
from .base import N_CTX, SCHEMA, SMOKE_TOKENS, BenchError, log, n_cores
from .llama_build import ensure_llama_tools
from .models import default_models, resolve_model
from .overhead import _wrapper_cost, profile_python_overhead, step_costs
from .prompts import Prompt, code_prompts, prose_prompts
from .report import format_table, plot, summarize
from .runners import Variant, _spec_arg, llama_command, make_variants, run_llama, run_pymtp
from .sampling import PRESETS, SamplingSetting, settings


def _csv(conv: Callable[[str], Any]) -> Callable[[str], list]:
    def parse(s: str) -> list:
        try:
            return [conv(x) for x in s.split(",") if x.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    about = sys.modules[__package__].__doc__ or ""  # the package's docstring: its first paragraph
    ap = argparse.ArgumentParser(
        prog="pymtp bench", description=about.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="PATH",
        help="GGUF to benchmark (repeatable); also 'default', 'deep' (its deep variant), "
        "'tiny', 'deep:SPEC' (the deep variant of SPEC), 'default-v151k', 'default-v248k' (the default "
        "model padded to 151,552 / 248,320 tokens), 'vocab:N:SPEC', 'echo-AGREE[-SIZE][-TYPE]' "
        "(default: the deep variant and the default model)",
    )
    ap.add_argument("--prompts", choices=("code", "prose", "both"), default="both")
    ap.add_argument("--n-prompts", type=int, default=3, help="prompts per set (default 3)")
    ap.add_argument(
        "--temps",
        type=_csv(float),
        default=[0.0, 0.8],
        help="temperatures, nothing else on (default 0,0.8; --sampling replaces them)",
    )
    ap.add_argument(
        "--sampling",
        type=_csv(str),
        default=None,
        metavar="NAMES",
        help=f"named sampling settings instead of --temps, for pymtp and llama.cpp alike: "
        f"{', '.join(PRESETS)} (qwen: T=0.7, top-p 0.8, top-k 20, repetition penalty 1.05)",
    )
    ap.add_argument("--drafts", type=_csv(int), default=[1, 2, 3, 4], help="fixed draft lengths (default 1,2,3,4)")
    ap.add_argument(
        "--heads",
        type=_csv(str),
        default=["chain"],
        metavar="MODES",
        help="models with several MTP heads: chain (head i drafts token i+1), first (head 0 "
        "drafts every token), or both: chain,first (default chain; first adds mtp-K-first)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="threads for every engine (default: all cores)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp's MTP driver and plain decoding")
    ap.add_argument("--llama-src", default=None, help="llama.cpp tree to build the tools from (default: pinned)")
    ap.add_argument(
        "--llama-bin", default=None, help="directory with prebuilt llama-speculative-simple and llama-completion"
    )
    ap.add_argument("--build-llama-tools", action="store_true", help="only build the llama.cpp tools, then exit")
    ap.add_argument(
        "--no-profile",
        action="store_true",
        help="skip the Python-overhead profile and the per-variant sampling/Python step costs",
    )
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--out", default="bench-out", help="output directory (default ./bench-out)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: the tiny bundled model, 1 prompt, 8 tokens, 1 repeat, no llama.cpp tools",
    )
    return ap


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cores": n_cores(),
        "cpu_count": os.cpu_count(),
    }
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from .._native import build_info  # loaded already: the runs use it

    info["pymtp_build"] = build_info()
    return info


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return _main(args)
    except BenchError as e:
        print(f"pymtp bench: {e}", file=sys.stderr)
        return 2


def _check_args(args: argparse.Namespace) -> None:
    """Apply --smoke's settings, and refuse settings that cannot run."""
    if args.smoke:
        args.repeats, args.max_tokens, args.n_prompts = 1, SMOKE_TOKENS, 1
        args.no_llama_cpp = True
        if args.prompts == "both":
            args.prompts = "code"
        if args.model is None:
            args.model = ["tiny"]
    for name in ("repeats", "max_tokens", "n_prompts"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be at least 1")
    if any(k < 1 for k in args.drafts):
        raise BenchError("--drafts must be positive")
    if not args.heads or any(h not in ("chain", "first") for h in args.heads):
        raise BenchError("--heads takes chain, first or chain,first")
    args.settings = settings(args.sampling, args.temps)
    if not args.settings:
        raise BenchError("no sampling settings: give --temps or --sampling")


def _main(args: argparse.Namespace) -> int:
    if args.build_llama_tools:
        print(json.dumps(ensure_llama_tools(args.llama_src, bin_dir=args.llama_bin), indent=2))
        return 0
    _check_args(args)
    threads = args.threads or n_cores()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    model_paths = [resolve_model(s) for s in args.model] if args.model else default_models()
    prompts: list[Prompt] = []
    if args.prompts in ("code", "both"):
        prompts += code_prompts(args.n_prompts)
    if args.prompts in ("prose", "both"):
        prompts += prose_prompts(args.n_prompts)

    llama = None if args.no_llama_cpp else ensure_llama_tools(args.llama_src, bin_dir=args.llama_bin)
    variants = make_variants(args.drafts, llama is not None, args.heads)

    result: dict[str, Any] = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": args.argv,
        "settings": {
            "threads": threads,
            "max_tokens": args.max_tokens,
            "repeats": args.repeats,
            "temps": [st.temperature for st in args.settings],
            "drafts": args.drafts,
            "sampling": [asdict(st) for st in args.settings],
            "prompts": args.prompts,
            "n_prompts": args.n_prompts,
            "n_ctx": N_CTX,
            "llama_cpp": llama is not None,
            "smoke": bool(args.smoke),
            "variants": [asdict(v) for v in variants],
        },
        "machine": _machine(),
        "llama_cpp": llama,
        "models": [],
        "prompts": [asdict(p) for p in prompts],
        "runs": [],
        "summary": [],
        "python_overhead": [],
        "step_costs": [],
    }
    if llama is not None:
        result["llama_cpp"]["example_commands"] = {
            v.name: llama_command(
                llama["bins"], v, Path("MODEL.gguf"), "PROMPT", args.settings[0], 0, args.max_tokens, threads
            )
            for v in variants
            if v.engine == "llama.cpp"
        }
    t_start = time.perf_counter()
    for mpath in model_paths:
        with Session(mpath, n_ctx=N_CTX, n_threads=threads) as session:
            _bench_model(session, mpath, args, threads, prompts, variants, llama, result)
    result["summary"] = summarize(result["runs"], variants, result["step_costs"])
    result["elapsed_s"] = time.perf_counter() - t_start
    try:
        result["machine"]["loadavg_end"] = list(os.getloadavg())
    except OSError:
        pass
    return _report(result, args, out)


def _bench_model(
    session: Session,
    mpath: Path,
    args: argparse.Namespace,
    threads: int,
    prompts: list[Prompt],
    variants: list[Variant],
    llama: dict[str, Any] | None,
    result: dict[str, Any],
) -> None:
    """Every run on one model (warm-up first, then repeats x prompts x variants), and its profile."""
    model, label, runs = session.model, mpath.stem, result["runs"]
    result["models"].append(
        {
            "label": label,
            "path": str(mpath),
            "architecture": model.architecture,
            "n_embd": model.n_embd,
            "n_layer": model.n_layer,
            "n_mtp_layers": model.n_mtp_layers,
            "mtp_loaded": model.mtp_loaded,
            "n_params": model.n_params,
            "size_bytes": model.size_bytes,
            "n_vocab": model.n_vocab,
        }
    )
    mvariants = [v for v in variants if not v.speculative or model.mtp_loaded]
    if len(mvariants) < len(variants):
        log(f"bench: {label} has no MTP head: only plain decoding")
    log(
        f"bench: {label} ({model.architecture}, n_embd {model.n_embd}, {model.n_layer} layers, "
        f"{model.n_params / 1e6:.1f}M params), {len(prompts)} prompts, threads {threads}"
    )

    def one(v: Variant, p: Prompt, st: SamplingSetting, seed: int, rep: int, n_tok: int, warmup: bool) -> None:
        rec: dict[str, Any] = {
            "model": label,
            "temperature": st.temperature,
            "sampling": st.name,
            "prompt": p.id,
            "kind": p.kind,
            "repeat": rep,
            "variant": v.name,
            "engine": v.engine,
            "n_draft": v.n_draft,
            "adaptive": v.adaptive,
            "seed": seed,
            "warmup": warmup,
        }
        try:
            if v.engine == "pymtp":
                rec.update(run_pymtp(session, v, p.text, st, seed, n_tok))
            else:
                assert llama is not None  # llama.cpp variants only with its tools
                rec.update(run_llama(llama["bins"], v, mpath, p.text, st, seed, n_tok, threads))
            rec["ok"] = True
        except (BenchError, subprocess.TimeoutExpired) as e:
            rec.update(ok=False, error=str(e)[-3000:])
            log(f"bench: {v.name} failed: {str(e)[:300]}")
        runs.append(rec)

    for st in args.settings:  # warm-up: every variant once, short, not summarized
        for v in mvariants:
            one(v, prompts[0], st, 0, -1, min(16, args.max_tokens), True)
    for st in args.settings:
        for rep in range(args.repeats):
            t_rep = time.perf_counter()
            for p in prompts:
                for v in mvariants:
                    one(v, p, st, 1000 + rep, rep, args.max_tokens, False)
            log(f"bench: {label} {st.name} repeat {rep + 1}/{args.repeats} ({time.perf_counter() - t_rep:.0f}s)")

    if args.no_profile:
        return
    try:  # every native call timed: its own pass, not in tok/s
        cost = _wrapper_cost()
        for st in args.settings:
            for v in mvariants:
                if v.engine == "pymtp":
                    spec = _spec_arg(v) or None
                    assert not isinstance(spec, bool)  # pymtp variants: a SpecConfig, or None (plain)
                    rec = step_costs(
                        session,
                        spec,
                        [p.text for p in prompts],
                        st.config(seed=2000),
                        max_tokens=args.max_tokens,
                        wrapper_cost=cost,
                    )
                    result["step_costs"].append(
                        {"model": label, "sampling": st.name, "temperature": st.temperature, "variant": v.name, **rec}
                    )
    except Exception as e:  # the profile must not lose the benchmark
        log(f"bench: step-cost profile failed: {e!r}")
    if model.mtp_loaded:
        for st in args.settings[:1]:
            try:
                prof = profile_python_overhead(
                    session, prompts[0].text, max_tokens=args.max_tokens, sampling=st.config(seed=0)
                )
                prof["model"], prof["sampling"] = label, st.name
                result["python_overhead"].append(prof)
            except Exception as e:  # the profile must not lose the benchmark
                log(f"bench: python-overhead profile failed: {e!r}")


def _report(result: dict[str, Any], args: argparse.Namespace, out: Path) -> int:
    """Write bench.json (and bench.png), print the table; 1 when every run failed."""
    jpath = out / "bench.json"
    jpath.write_text(json.dumps(result, indent=1, default=str))
    print(format_table(result["summary"], kinds=("all",) if args.prompts != "both" else ("all", "code", "prose")))
    walls = [
        r for r in result["summary"] if r["prompts"] == "all" and r["variant"] != "plain" and r.get("vs_plain_wall")
    ]
    if walls:
        print("\nprefill included (whole generate() calls; x plain, medians):")
        for r in walls:
            print(f"  {r['model'][:34]}  {r.get('sampling')}  {r['variant']}: {r['vs_plain_wall']:.2f}x plain")
    autos = [r for r in result["summary"] if r.get("vs_best_fixed") is not None]
    if autos:
        print("\nauto against plain and the best fixed draft length of this run (medians):")
        for r in autos:
            print(
                f"  {r['model'][:34]}  {r.get('sampling') or r['temperature']}  {r['prompts']}: "
                f"{r['vs_plain']:.2f}x plain, {r['vs_best_fixed']:.2f}x {r['best_fixed']}"
            )
    for prof in result["python_overhead"]:
        print(
            f"\nPython overhead per speculative step ({prof['model']}, {prof['sampling']}, adaptive): "
            f"{100 * prof['python_fraction']:.1f}% of step time "
            f"({prof['python_us_per_step']:.0f} us of {prof['step_us']:.0f} us per step; "
            f"SpecStats view: {100 * prof['specstats_python_fraction']:.1f}%)"
        )
    png = None if args.no_plot else plot(result, out / "bench.png")
    print(f"\nwrote {jpath} and {png}" if png else f"\nwrote {jpath}")
    runs = result["runs"]
    failed = [r for r in runs if not r.get("ok")]
    if failed:
        log(f"bench: {len(failed)} run(s) failed (see 'error' in {jpath})")
    return 1 if failed and len(failed) == len(runs) else 0
