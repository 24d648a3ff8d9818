#!/bin/bash
# rounds 5-8 of the echo group: main and policy3 HEAD only, alternating
set -e
round=$1
args="--model echo-100 --model echo-70 --model deep --prompts both --n-prompts 1 --sampling greedy,qwen --drafts 1,2,3,4"
order="main free"; [ $((round % 2)) = 0 ] && order="free main"
for side in $order; do
  case $side in main) src=/work/main/src;; free) src=/work/wt/policy3/src;; esac
  out=/tmp/p3/r3b/$side-echo-r$round
  rm -rf $out
  PYTHONPATH=$src PYMTP_LIBRARY=/work/lib/main/libpymtp.so /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench $args \
    --repeats 1 --max-tokens 48 --threads 1 --no-llama-cpp --no-profile --no-plot --out $out > $out.log 2>&1
  echo "$side echo r$round done $(date -u +%H:%M:%S)"
done
