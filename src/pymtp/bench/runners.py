"""The variants the bench compares and one run of each: pymtp in process, llama.cpp's
tools as subprocesses with the same settings."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..config import SpecConfig
from ..generate import generate
from ..session import Session
from ..stats import GenerationResult
from .base import N_CTX, BenchError
from .llama_log import parse_llama_output
from .sampling import SamplingSetting, from_temperature


@dataclass(frozen=True)
class Variant:
    name: str
    engine: str  # "pymtp" | "llama.cpp"
    n_draft: int | None  # None: plain decoding
    adaptive: bool = False
    heads: str = "chain"  # SpecConfig.heads (models with several MTP heads)
    policy: str = "fixed"  # SpecConfig.policy: fixed, adaptive, auto (n_draft: its longest draft)

    @property
    def speculative(self) -> bool:
        return self.n_draft is not None


def make_variants(drafts: Sequence[int], llama_cpp: bool, heads: Sequence[str] = ("chain",)) -> list[Variant]:
    vs = [Variant("plain", "pymtp", None)]
    for h in heads:
        vs += [Variant(f"mtp-{k}" + ("" if h == "chain" else f"-{h}"), "pymtp", k, heads=h) for k in drafts]
    longest = max(drafts, default=SpecConfig().n_draft)
    vs.append(Variant("mtp-adaptive", "pymtp", longest, adaptive=True, policy="adaptive"))
    vs.append(Variant("mtp-auto", "pymtp", longest, policy="auto"))
    if llama_cpp:
        vs += [Variant(f"llama-mtp-{k}", "llama.cpp", k) for k in drafts]
        vs.append(Variant("llama-plain", "llama.cpp", None))
    return vs


def _spec_arg(v: Variant) -> SpecConfig | bool:
    if not v.speculative:
        return False
    return SpecConfig(n_draft=v.n_draft, adaptive=v.adaptive, heads=v.heads, policy=v.policy)


def _setting(temp: float | SamplingSetting) -> SamplingSetting:
    return temp if isinstance(temp, SamplingSetting) else from_temperature(temp)


def run_pymtp(
    session: Session, v: Variant, prompt: str, temp: float | SamplingSetting, seed: int, max_tokens: int
) -> dict[str, Any]:
    """One generate() of v; temp: a temperature (nothing else on) or a SamplingSetting."""
    t0 = time.perf_counter()
    r = generate(
        prompt,
        session,
        max_tokens=max_tokens,
        seed=seed,
        ignore_eos=True,
        speculative=_spec_arg(v),
        **_setting(temp).generate_kwargs(),
    )
    r = cast(GenerationResult, r)  # one prompt, one result
    wall = time.perf_counter() - t0
    st = r.stats
    n = len(r.tokens)
    t_dec = max(wall - st.t_prefill, 1e-9)
    return {
        "n_tokens": n,
        "n_prompt": st.n_prompt,
        "wall_s": wall,
        "t_prefill": st.t_prefill,
        "t_decode": t_dec,
        "tps": n / t_dec,
        # the whole call, prefill included: what a caller of generate() waits for (tps leaves out
        # the prefill, where a variant's own start work may hide: see the package docstring)
        "tps_wall": n / max(wall, 1e-9),
        "tps_steps": st.tokens_per_second,
        "n_steps": st.n_steps,
        "n_drafted": st.n_drafted,
        "n_accepted": st.n_accepted,
        "n_emitted": st.n_emitted,
        "drafted_at": list(st.drafted_at),
        "accepted_at": list(st.accepted_at),
        "t_draft": st.t_draft,
        "t_verify": st.t_verify,
        "t_python": st.t_python,
        "t_total": st.t_total,
        "acceptance_rate": st.acceptance_rate,
        "mean_accepted": st.mean_accepted,
        "tokens_per_step": st.tokens_per_step,
        "finish_reason": r.finish_reason,
        # the auto policy: the draft length of each step, its predicted and measured tok/s (means)
        **(
            {
                "k_chosen": list(st.k_chosen),
                "tps_predicted_mean": sum(st.tps_predicted) / len(st.tps_predicted),
                "tps_measured_mean": sum(st.tps_measured) / len(st.tps_measured),
            }
            if st.k_chosen
            else {}
        ),
    }


def llama_command(
    bins: dict[str, str],
    v: Variant,
    model: Path,
    prompt: str,
    temp: float | SamplingSetting,
    seed: int,
    max_tokens: int,
    threads: int,
    n_ctx: int = N_CTX,
) -> list[str]:
    common = [
        "-m",
        str(model),
        "-p",
        prompt,
        "-n",
        str(max_tokens),
        "-c",
        str(n_ctx),
        "-t",
        str(threads),
        "-tb",
        str(threads),
        *_setting(temp).llama_args(),
        "--seed",
        str(seed),
        "--ignore-eos",
    ]
    if v.speculative:
        return [
            bins["llama-speculative-simple"],
            *common,
            "--spec-type",
            "draft-mtp",
            "--spec-draft-n-max",
            str(v.n_draft),
            "--spec-draft-n-min",
            "0",
            "--spec-draft-p-min",
            "0",
            "-lv",
            "4",
        ]
    return [bins["llama-completion"], *common, "-no-cnv", "--no-display-prompt", "-lv", "4"]


def run_llama(
    bins: dict[str, str],
    v: Variant,
    model: Path,
    prompt: str,
    temp: float | SamplingSetting,
    seed: int,
    max_tokens: int,
    threads: int,
    timeout: float = 600,
) -> dict[str, Any]:
    cmd = llama_command(bins, v, model, prompt, temp, seed, max_tokens, threads)
    # llama.cpp logs from a worker thread; once in a while the tail of the log (the timings)
    # is lost at exit although the run succeeded: run it again once.
    for attempt in range(2):  # noqa: B007 (read after the loop)
        t0 = time.perf_counter()
        p = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace", timeout=timeout
        )
        wall = time.perf_counter() - t0
        log = p.stderr + "\n" + p.stdout
        parsed = parse_llama_output(log)
        if p.returncode != 0:
            raise BenchError(f"{Path(cmd[0]).name} exited with {p.returncode}: {p.stderr[-2000:]}")
        if ("decoded" if v.speculative else "eval") in parsed:
            break
    rec: dict[str, Any] = {"wall_s": wall, "returncode": p.returncode, "llama": parsed, "attempts": attempt + 1}
    if v.speculative:
        dec = parsed.get("decoded")
        if not dec:
            raise BenchError(f"no 'decoded N tokens' line in the llama-speculative-simple log: {p.stderr[-2000:]}")
        rec.update(n_tokens=dec["n"], t_decode=dec["s"], tps=dec["tps"])
        if "encoded" in parsed:
            rec.update(n_prompt=parsed["encoded"]["n"], t_prefill=parsed["encoded"]["s"])
        n_drafted, n_acc = parsed.get("n_drafted", 0), parsed.get("n_accept", 0)
        spec = parsed.get("spec", {})
        steps = spec.get("calls_accept") or 0
        rec.update(
            n_drafted=n_drafted,
            n_accepted=n_acc,
            n_steps=steps,
            acceptance_rate=n_acc / n_drafted if n_drafted else 0.0,
            mean_accepted=n_acc / steps if steps else 0.0,
            tokens_per_step=spec.get("mean_acc_len", 1 + n_acc / steps if steps else 0.0),
            acc_rate_pos=spec.get("acc_rate_pos", []),
        )
    else:
        ev = parsed.get("eval")
        if not ev:
            raise BenchError(f"no 'eval time' line in the llama-completion log: {p.stderr[-2000:]}")
        t = (ev["ms"] + parsed.get("sampling_ms", 0.0)) / 1e3
        rec.update(n_tokens=ev["n"], t_decode=t, tps=ev["n"] / t if t > 0 else 0.0, tps_eval_only=ev["tps"])
        if "prompt_eval" in parsed:
            rec.update(n_prompt=parsed["prompt_eval"]["n"], t_prefill=parsed["prompt_eval"]["ms"] / 1e3)
    return rec
