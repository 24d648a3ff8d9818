"""Batch costs of the default model's target decode, patched build against stock (issue #28).

    python tools/measure_batch_cost.py --stock /work/lib/main/libpymtp.so \\
        --patched build-k1/libpymtp.so [--types F16,Q8_0,Q4_K_M] [--positions 100,2000]
        [--repeats 15] [--out build/batch_cost.json] [--also NAME=LIB ...]

--types takes the default model's types or NAME=FILE.gguf for a model file as it is (the 1.5B
echo fixture: echo80=~/.cache/pymtp/echo/echo-a80-1.5b-q4_k_m-*.gguf).

c(n) is one target decode of n rows (logits for every row, as a verification step) after
`position` tokens of context; c(n)/c(1) for n = 1..8. Each library runs in a worker process
of its own (PYMTP_LIBRARY), holding every model and context ready; the parent asks for one
timed decode at a time, alternating library, type, position and n within each repeat, so the
two builds see the same machine. Medians over the repeats. Also printed: plain decoding in
tokens/s (1/c(1)), and c(1) against the bandwidth floor (the bytes of the weights one decode
reads ÷ the read bandwidth torch measures on this machine with the same thread count).
Run it under the bench lock: flock /tmp/pymtp-bench.lock python tools/measure_batch_cost.py ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

N_MAX = 8


# ---------------------------------------------------------------------------------------------
# worker: one library, every model, answers "TYPE POS N" with the milliseconds of one decode
# ---------------------------------------------------------------------------------------------


def worker(paths: dict[str, str], positions: list[int], threads: int | None) -> None:
    import pymtp

    n_ctx = max(positions) + N_MAX + 8
    rng = np.random.default_rng(0)
    ctxs = {}
    for name, path in paths.items():
        m = pymtp.Model(path)
        for pos in positions:
            t = pymtp.TargetContext(m, n_ctx=n_ctx, n_batch=512, n_threads=threads)
            toks = [int(x) for x in rng.integers(200, min(40000, m.n_vocab), pos + N_MAX)]
            for p0 in range(0, pos, 512):
                t.decode(toks[p0 : min(pos, p0 + 512)], p0)
            ctxs[(name, pos)] = (m, t, toks)
    print("ready", flush=True)
    for line in sys.stdin:
        name, pos, n = line.split()
        pos, n = int(pos), int(n)
        _, t, toks = ctxs[(name, pos)]
        out = np.ones(n, dtype=np.uint8)
        t0 = time.perf_counter()
        t.decode(toks[pos : pos + n], pos, output=out)
        dt = time.perf_counter() - t0
        t.seq_rm(pos)
        print(f"{dt * 1e3:.4f}", flush=True)


class Worker:
    def __init__(self, lib: str, paths: dict[str, str], positions: list[int], threads: int | None) -> None:
        env = dict(os.environ, PYMTP_LIBRARY=str(Path(lib).resolve()))
        arg = json.dumps({"paths": paths, "positions": positions, "threads": threads})
        self.p = subprocess.Popen(
            [sys.executable, __file__, "--worker", arg],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"worker for {lib} did not start: {line!r}")

    def time(self, name: str, pos: int, n: int) -> float:
        self.p.stdin.write(f"{name} {pos} {n}\n")
        self.p.stdin.flush()
        return float(self.p.stdout.readline())

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait()


# ---------------------------------------------------------------------------------------------
# parent
# ---------------------------------------------------------------------------------------------


def model_paths(types: list[str], work: Path) -> dict[str, str]:
    import pymtp
    from pymtp import default_model

    src = default_model.assembled("F16")
    out = {}
    for t in types:
        name, sep, file = t.partition("=")
        if sep:  # NAME=FILE.gguf: a model file as it is (e.g. the 1.5B echo fixture)
            out[name] = str(Path(file).expanduser())
            continue
        if t == "F16":
            out[t] = str(src)
            continue
        p = work / f"default-{t}.gguf"
        if not p.exists():
            pymtp.quantize(src, p, type=t, mtp_type=None)
        out[t] = str(p)
    return out


def decode_weight_bytes(path: str) -> int:
    """Bytes of the weights one target decode reads: the trunk's blocks and the output matrix
    (the token embedding when the output is tied); not the MTP blocks, not embedding lookups."""
    import gguf

    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    n_block = int(r.fields[f"{arch}.block_count"].contents())
    nn = r.fields.get(f"{arch}.nextn_predict_layers")
    n_trunk = n_block - (int(nn.contents()) if nn is not None else 0)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    total = sum(b for name, b in names.items() if name.startswith("blk.") and int(name.split(".")[1]) < n_trunk)
    total += names.get("output.weight", names["token_embd.weight"])
    return total


def read_bandwidth(threads: int) -> float:
    """GB/s of a summing read over 512 MB with `threads` threads (median of 7)."""
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
    x.sum()
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        x.sum()
        ts.append(time.perf_counter() - t0)
    return x.numel() * 4 / float(np.median(ts)) / 1e9


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stock", help="libpymtp.so built from the stock pinned tree (required)")
    ap.add_argument("--patched", help="libpymtp.so built with the small-batch patch (required)")
    ap.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="NAME=LIB",
        help="another libpymtp.so timed in the same run (repeatable), e.g. an earlier patch",
    )
    ap.add_argument("--types", default="F16,Q8_0,Q4_K_M", help="default model types, or NAME=FILE.gguf")
    ap.add_argument("--positions", default="100,2000")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="decode threads (default: pymtp's)")
    ap.add_argument("--work", default="build/batch_cost", help="where the quantized copies are kept")
    ap.add_argument("--out", default=None, help="write the medians as JSON here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        w = json.loads(a.worker)
        worker(w["paths"], w["positions"], w["threads"])
        return
    if not a.stock or not a.patched:
        ap.error("--stock and --patched are required")

    types = [t.partition("=")[0] for t in a.types.split(",")]
    positions = [int(p) for p in a.positions.split(",")]
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    paths = model_paths(a.types.split(","), work)
    libs = {"stock": a.stock, "patched": a.patched}
    for spec in a.also:
        name, sep, lib = spec.partition("=")
        if not sep or not name or name in libs:
            ap.error(f"--also {spec!r}: expected NAME=LIB with a new NAME")
        libs[name] = lib
    workers = {k: Worker(v, paths, positions, a.threads) for k, v in libs.items()}
    times = {(lib, t, p, n): [] for lib in libs for t in types for p in positions for n in range(1, N_MAX + 1)}
    order = [(t, p, n) for t in types for p in positions for n in range(1, N_MAX + 1)]
    rng = np.random.default_rng(1)
    for r in range(a.repeats):
        for i in rng.permutation(len(order)):
            t, p, n = order[i]
            for lib in list(libs) if r % 2 == 0 else list(libs)[::-1]:
                times[(lib, t, p, n)].append(workers[lib].time(t, p, n))
    for w in workers.values():
        w.close()

    from pymtp.model import default_threads

    threads = a.threads or default_threads()
    bw = read_bandwidth(threads)
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(f"# {cpu_name()}, {threads} threads; medians of {a.repeats}, interleaved; read bandwidth {bw:.1f} GB/s")
    result = {"cpu": cpu_name(), "threads": threads, "repeats": a.repeats, "read_GBps": bw, "rows": []}
    head = " ".join(f"c({n})/c(1)" for n in range(2, N_MAX + 1))
    print(f"{'type':7} {'pos':>5} {'build':8} {'c(1) ms':>8} {head}  tok/s  c(1)/floor")
    for t in types:
        floor_ms = decode_weight_bytes(paths[t]) / (bw * 1e9) * 1e3
        for p in positions:
            for lib in libs:
                c1 = med[(lib, t, p, 1)]
                ratios = [med[(lib, t, p, n)] / c1 for n in range(2, N_MAX + 1)]
                print(
                    f"{t:7} {p:5d} {lib:8} {c1:8.2f} "
                    + " ".join(f"{x:9.2f}" for x in ratios)
                    + f"  {1e3 / c1:5.0f}  {c1 / floor_ms:9.2f}"
                )
                result["rows"].append(
                    {
                        "type": t,
                        "position": p,
                        "build": lib,
                        "c1_ms": c1,
                        "ratios": dict(zip(range(2, N_MAX + 1), ratios)),
                        "tokens_per_s": 1e3 / c1,
                        "floor_ms": floor_ms,
                    }
                )
            print(
                f"{'':7} {'':5} {'p/s':8} {med[('patched', t, p, 1)] / med[('stock', t, p, 1)]:8.2f}  "
                "(patched c(1) / stock c(1))"
            )
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
