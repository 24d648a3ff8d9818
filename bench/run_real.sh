#!/usr/bin/env bash
# The "real" benchmark run recorded in bench/results/: the deep (1024-wide, +16 blocks)
# variant of a random glm4moe fixture with noise 0.1 (the trained default model was not
# ready yet), code + prose prompts, greedy and T=0.8, draft lengths 1-3, llama.cpp tools.
# Usage: bench/run_real.sh [OUT_DIR] [extra pymtp bench flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results/$(date +%Y%m%d-%H%M)}
shift || true
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:-src}
fixture=$(PYTHONPATH="$PYTHONPATH:tests" python3 -m pymtp_testing.fixtures glm4moe noise=0.1)
python3 -m pymtp.bench \
    --model "deep:$fixture" \
    --prompts both --n-prompts 1 --temps 0,0.8 --drafts 1,2,3 \
    --repeats 2 --max-tokens 48 --threads 1 \
    --out "$out" "$@" | tee "$out/table.txt"
