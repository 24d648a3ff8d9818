"""What coupled sampling costs in acceptance and speed against the rejection rule.

Coupled sampling (SamplingConfig.sampling_rule, the default with a seed) keeps a draft token
only when it wins the target's race, which happens a little less often than rejection
sampling's min(1, p/q) keeps it. This runs the same seeded prompts under both rules (and plain
decoding), interleaved, and prints per rule the share of drafted tokens kept, tokens per step
and the median tokens/s ratio against plain decoding, plus whether each coupled text equals
its plain text (it must, on a CPU build).

    python tools/measure_coupling.py [--model default] [--sampling qwen,t0.8] [--seeds 6]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pymtp

SETTINGS = {
    "qwen": dict(temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05),
    "t0.8": dict(temperature=0.8),
    "t1.0-k40": dict(temperature=1.0, top_k=40),
}
PROMPTS = (
    "def fibonacci(n):",
    "The history of the printing press",
    "Write a short story about a robot who learns to paint.",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--sampling", default="qwen,t0.8,t1.0-k40")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--n-draft", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    m = pymtp.load(a.model, n_threads=a.threads)
    spec = {"policy": "fixed", "n_draft": a.n_draft}
    print(
        f"model {a.model}, fixed n_draft {a.n_draft}, {a.max_tokens} tokens, {a.seeds} seeds x {len(PROMPTS)} prompts"
    )
    for name in a.sampling.split(","):
        kw = dict(SETTINGS[name], max_tokens=a.max_tokens, ignore_eos=True)
        pymtp.generate(PROMPTS[0], m, max_tokens=8, **SETTINGS[name])  # warm
        kept = {r: [0, 0, 0] for r in ("coupled", "rejection")}  # drafted, kept, steps
        ratio: dict[str, list[float]] = {"coupled": [], "rejection": []}
        same = 0
        for seed in range(a.seeds):
            for prompt in PROMPTS:
                t0 = time.perf_counter()
                plain = pymtp.generate(prompt, m, seed=seed, speculative=False, sampling_rule="coupled", **kw)
                t_plain = time.perf_counter() - t0
                for rule in ("coupled", "rejection"):
                    t0 = time.perf_counter()
                    out = pymtp.generate(prompt, m, seed=seed, speculative=spec, sampling_rule=rule, **kw)
                    dt = time.perf_counter() - t0
                    k = kept[rule]
                    k[0] += out.stats.n_drafted
                    k[1] += out.stats.n_accepted
                    k[2] += out.stats.n_steps
                    ratio[rule].append((len(out.tokens) / dt) / (len(plain.tokens) / t_plain))
                    if rule == "coupled":
                        same += out.tokens == plain.tokens
        n = a.seeds * len(PROMPTS)
        for rule in ("coupled", "rejection"):
            d, acc, steps = kept[rule]
            print(
                f"{name:9s} {rule:9s} kept {acc / max(d, 1):.3f} of drafted, "
                f"{(a.max_tokens) * n / max(steps, 1):.2f} tokens/step, "
                f"speed vs plain median {statistics.median(ratio[rule]):.3f}"
            )
        print(f"{name:9s} coupled texts equal to plain: {same}/{n}")


if __name__ == "__main__":
    main()
