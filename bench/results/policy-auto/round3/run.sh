#!/bin/bash
# round 3: main, policy3 at 6d4aae5 (keep rate, per-decode draft timing), policy3 HEAD (+ drafts without the cut),
# alternating whole `pymtp bench` runs (each under bench-quiet), the order rotating by round.
# usage: run3.sh GROUP ROUND
set -e
group=$1; round=$2
if [ $group = echo ]; then
  args="--model echo-100 --model echo-70 --model deep --prompts both --n-prompts 1 --sampling greedy,qwen --drafts 1,2,3,4"
else
  args="--model default --prompts both --n-prompts 2 --sampling greedy,qwen --drafts 1,2,3"
fi
case $((round % 3)) in 0) order="main keep free";; 1) order="keep free main";; 2) order="free main keep";; esac
for side in $order; do
  case $side in main) src=/work/main/src;; keep) src=/tmp/p3/wt-a/src  # a detached worktree at 6d4aae5;; free) src=/work/wt/policy3/src;; esac
  out=/tmp/p3/r3b/$side-$group-r$round
  rm -rf $out; mkdir -p /tmp/p3/r3b
  PYTHONPATH=$src PYMTP_LIBRARY=/work/lib/main/libpymtp.so /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench $args \
    --repeats 1 --max-tokens 48 --threads 1 --no-llama-cpp --no-profile --no-plot --out $out > $out.log 2>&1
  echo "$side $group r$round done $(date -u +%H:%M:%S)"
done
