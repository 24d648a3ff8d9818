"""Time one sampled row at real vocabulary sizes: pymtp's former numpy sampler against the
native one (pymtp.sampling.Sampler over sampler.cpp), interleaved, medians.

    python tools/measure_sampling.py [--repeats 200]

A row here is what a plain decoding step or one draft token costs: the transform of one logits
row and a draw. Rows are random logits (normal, sd 3): flatter than a trained model's, so the
nucleus is wide (top-p's worst case).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # pymtp_testing: the checkout's test helpers

from pymtp import SamplingConfig
from pymtp.sampling import Sampler
from pymtp_testing.reference_sampling import reference_draw, reference_probs

SETTINGS = {
    "greedy": dict(temperature=0.0),
    "T=0.8": dict(temperature=0.8),
    "T=0.8 top-p 0.95 top-k 40": dict(temperature=0.8, top_p=0.95, top_k=40),
    "Qwen: T=0.7 top-p 0.8 top-k 20 rep 1.05": dict(temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05),
    "T=1.0 top-p 0.95 (no top-k)": dict(temperature=1.0, top_p=0.95),
}
VOCABS = (4096, 151_552, 248_320)


def numpy_row(row, history, cfg, rng) -> int:
    if cfg["temperature"] == 0.0:
        return int(np.argmax(row))
    p = reference_probs(
        row,
        history,
        temperature=cfg["temperature"],
        top_k=cfg.get("top_k", 0),
        top_p=cfg.get("top_p", 1.0),
        penalty=cfg.get("repetition_penalty", 1.0),
    )
    return reference_draw(rng, p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    gen = np.random.default_rng(0)
    history = gen.integers(0, 4096, size=64).tolist()
    print(f"{'vocabulary':>10} | {'settings':<42} | {'numpy ms':>9} | {'native ms':>9} | speed-up")
    for n_vocab in VOCABS:
        rows = (gen.standard_normal((8, n_vocab)) * 3).astype(np.float32)
        for name, cfg in SETTINGS.items():
            native = Sampler(SamplingConfig(seed=1, **cfg), n_vocab=n_vocab)
            rng = np.random.default_rng(1)
            t_np, t_c = [], []
            for i in range(args.repeats):
                row = rows[i % len(rows)]
                t0 = time.perf_counter()
                numpy_row(row, history, cfg, rng)
                t1 = time.perf_counter()
                native.choose(row, history)
                t2 = time.perf_counter()
                t_np.append(t1 - t0)
                t_c.append(t2 - t1)
            a, b = statistics.median(t_np) * 1e3, statistics.median(t_c) * 1e3
            print(f"{n_vocab:>10,} | {name:<42} | {a:9.3f} | {b:9.3f} | {a / b:7.1f}x")


if __name__ == "__main__":
    main()
