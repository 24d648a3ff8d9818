#!/bin/bash
# Alternating rounds of the README's fixture bench: main's tree against another tree (same library),
# each run its own /work/tools/bench-quiet call, the order swapped each round.
#   tools/fixture_rounds.sh ROUNDS OUTDIR MAIN_SRC OTHER_SRC [LIB]
# Prints one line per run (round, order, tree, plain and mtp-3 tok/s medians, their ratio).
set -u
rounds=$1 out=$2 main_src=$3 other_src=$4 lib=${5:-/work/lib/m10/libpymtp.so}
py=/work/main/.venv/bin/python
mkdir -p "$out"
run() {  # run TAG SRC ROUND POS
  local dir="$out/r$3-$1"
  PYTHONPATH=$2 PYMTP_LIBRARY=$lib /work/tools/bench-quiet $py -m pymtp bench --model echo-80-1.5b \
    --prompts code --n-prompts 1 --temps 0 --drafts 3 --repeats 2 --max-tokens 32 --threads 2 \
    --no-llama-cpp --no-plot --no-profile --out "$dir" > "$dir.log" 2>&1
  $py - "$dir/bench.json" "$1" "$3" "$4" <<'PY'
import json, sys
import statistics
b = json.load(open(sys.argv[1]))
row = {r["variant"]: r for r in b["summary"] if r["prompts"] == "all"}
p, m = row["plain"]["tps_median"], row["mtp-3"]["tps_median"]
# prefill included: the whole generate() call (computed from the runs: older trees lack tps_wall)
wall = {v: statistics.median(r["n_tokens"] / r["wall_s"] for r in b["runs"] if r["variant"] == v and not r["warmup"])
        for v in ("plain", "mtp-3")}
print(f"round {sys.argv[3]} pos {sys.argv[4]} {sys.argv[2]:6s} plain {p:5.1f} mtp-3 {m:5.1f} ratio {m / p:.3f}"
      f"  prefill included {wall['mtp-3'] / wall['plain']:.3f}", flush=True)
PY
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run main "$main_src" "$r" 1; run branch "$other_src" "$r" 2
  else run branch "$other_src" "$r" 1; run main "$main_src" "$r" 2; fi
done
