"""Acceptance and batch costs of the default model per trunk type x MTP-head type.

    python tools/measure_quant.py [--types F16,Q8_0,Q4_0,Q4_1,Q4_K_M] [--head-types F16,Q8_0,same]
                                  [--repeats 15] [--out build/quant.json] [--no-costs]

For each combination, from the assembled default (F16 trunk + F16 head) through
pymtp.quantize (the head's tensors at the head type, "same" = the trunk's type):

* acceptance at draft length 1, teacher-forced (pymtp.train.evaluate_head): held-out
  standard-library code and held-out text the trunk wrote greedily; kept per file in
  <work>/quant/<file>.acceptance.json, so a --no-costs run beside other work, then a run on
  a quiet machine for the costs, measure each once;
* c_verify(n)/c_1: one target decode of n rows (logits for all) against one row, n = 2..5,
  after a 100-token context; c_draft/c_1: one draft-head decode of one row; c_1 in ms.
  Files are measured interleaved, repeat by repeat, and medians reported;
* the bound for greedy speculation at draft length k from these numbers, with acceptance
  a per position assumed independent: (1 + a + ... + a^k) / (c_verify(k+1)/c_1 + k c_draft/c_1).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import pymtp
from pymtp import default_model
from pymtp.train import corpus, data
from pymtp.train.evaluate_head import WINDOW, teacher_forced


def build(src: Path, out_dir: Path, trunk_type: str, head_type: str) -> Path:
    out = out_dir / f"default-{trunk_type}-{head_type}.gguf"
    if trunk_type == "F16" and head_type == "F16":
        return src
    if not out.exists():
        pymtp.quantize(src, out, type=trunk_type, mtp_type=None if head_type == trunk_type else head_type)
    return out


def acceptance(path: Path, texts_path: Path, n_code: int, keep_dir: Path) -> dict:
    cached = keep_dir / f"{path.name}.acceptance.json"
    key = {"file_mtime": path.stat().st_mtime, "texts": str(texts_path.resolve()), "n_code": n_code}
    kept = json.loads(cached.read_text()) if cached.exists() else {}
    if kept.get("key") == key:
        return kept["acceptance"]
    m = pymtp.Model(path)
    _, held = data.split_files()
    code = []
    for rel in held:
        t = data.read_text(rel)
        if t:
            code.append((m.tokenize(t, add_special=False)[:WINDOW], 1))
        if len(code) == n_code:
            break
    gen = [(g["prompt"] + g["completion"], len(g["prompt"])) for g in corpus.read_texts(texts_path) if g["held_out"]]
    a, n = teacher_forced(m, code)
    b, nb = teacher_forced(m, gen)
    m.close()
    result = {"k1_code": a / n, "k1_trunk_greedy": b / nb}
    cached.write_text(json.dumps({"key": key, "acceptance": result}) + "\n")
    return result


def costs(paths: list[Path], repeats: int) -> dict[Path, dict]:
    ctxs = []
    for p in paths:
        m = pymtp.Model(p)
        t = pymtp.TargetContext(m, n_ctx=512, n_batch=128)
        d = pymtp.DraftContext(t)
        toks = m.tokenize(data.read_text(data.split_files()[1][0]) or "x = 1\n" * 200, add_special=False)[:110]
        t.decode(toks[:100], 0)
        h = t.hidden().copy()
        d.decode(toks[1:100], 0, h[0], h[1:-1], output=[0] * 98 + [1])
        ctxs.append((p, m, t, d, toks, h))
    times = {p: {n: [] for n in range(1, 6)} | {"draft": []} for p in paths}
    for _ in range(repeats):
        for p, _m, t, d, toks, h in ctxs:
            for n in range(1, 6):
                t0 = time.perf_counter()
                t.decode(toks[100 : 100 + n], 100)
                t.logits()
                times[p][n].append(time.perf_counter() - t0)
                t.seq_rm(100)
            t0 = time.perf_counter()
            d.decode([toks[100]], 99, h[-1])
            d.logits()
            times[p]["draft"].append(time.perf_counter() - t0)
            d.seq_rm(99)
    out = {}
    for p, m, t, d, _, _ in ctxs:
        c1 = float(np.median(times[p][1]))
        out[p] = {
            "c1_ms": round(c1 * 1e3, 2),
            "draft_over_c1": round(float(np.median(times[p]["draft"])) / c1, 3),
            **{f"verify{n}_over_c1": round(float(np.median(times[p][n])) / c1, 3) for n in range(2, 6)},
        }
        d.close()
        t.close()
        m.close()
    return out


def bound(a: float, c: dict, k: int) -> float:
    return sum(a**i for i in range(k + 1)) / (c[f"verify{k + 1}_over_c1"] + k * c["draft_over_c1"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="F16,Q8_0,Q4_0,Q4_1,Q4_K_M")
    ap.add_argument("--head-types", default="F16,Q8_0,same")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--n-code", type=int, default=20)
    ap.add_argument("--work", default="build/pymtp-head", help="the trunk texts from python -m pymtp.train")
    ap.add_argument(
        "--texts",
        default="texts2.jsonl",
        help="the trunk texts in --work whose held-out items are measured (texts.jsonl: stage 1's)",
    )
    ap.add_argument("--out", default="build/quant.json")
    ap.add_argument("--no-costs", action="store_true", help="measure (and keep) acceptance only")
    args = ap.parse_args()
    src = default_model.resolve(None)
    out_dir = Path(args.work) / "quant"
    out_dir.mkdir(parents=True, exist_ok=True)
    combos = []
    for t in args.types.split(","):
        for h in args.head_types.split(","):
            if (t, t if h == "same" else h) not in combos:
                combos.append((t, t if h == "same" else h))
    files = {c: build(src, out_dir, *c) for c in combos}
    rows = []
    for (t, h), path in files.items():
        acc = acceptance(path, Path(args.work) / args.texts, args.n_code, out_dir)
        rows.append(
            {
                "trunk": t,
                "head": h,
                "file_mb": round(path.stat().st_size / 1e6, 1),
                **{k: round(v, 4) for k, v in acc.items()},
            }
        )
        print(rows[-1], flush=True)
    if args.no_costs:
        return
    cost = costs(list(files.values()), args.repeats)
    for r, (_key, path) in zip(rows, files.items()):
        r.update(cost[path])
        r["bound_k1"] = round(bound(r["k1_trunk_greedy"], r, 1), 3)
        r["bound_k3"] = round(bound(r["k1_trunk_greedy"], r, 3), 3)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    keys = [
        "trunk",
        "head",
        "file_mb",
        "k1_code",
        "k1_trunk_greedy",
        "c1_ms",
        "draft_over_c1",
        "verify2_over_c1",
        "verify4_over_c1",
        "bound_k1",
        "bound_k3",
    ]
    print("| " + " | ".join(keys) + " |")
    print("|" + " --- |" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
