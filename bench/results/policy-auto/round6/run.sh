#!/bin/bash
# round 6 (#29): main against the policy7 branch, whole `pymtp bench` runs alternating (the order
# flipping by round), each under bench-quiet; both trees are `git archive` snapshots
# (/tmp/p7/snap-SIDE) loading the same native library (/work/lib/m7).
# usage: run.sh GROUP ROUND        GROUP: echo70 (echo-70, greedy), default (greedy and Qwen's settings)
set -e
group=$1; round=$2
lib=${PYMTP_LIBRARY:-/work/lib/m7/libpymtp.so}
case $group in
  echo70) args="--model echo-70 --prompts both --n-prompts 1 --sampling greedy --drafts 1,2,3,4 --repeats 1 --max-tokens 48 --threads 1";;
  default) args="--model default --prompts both --n-prompts 2 --sampling greedy,qwen --drafts 1,2,3 --repeats 1 --max-tokens 48 --threads 1";;
esac
sides=${SIDES:-main branch}
order="$sides"; [ $((round % 2)) = 0 ] && order=$(echo $sides | tr " " "\n" | tac | tr "\n" " ")
mkdir -p /tmp/p7/r6
for side in $order; do
  src=/tmp/p7/snap-$side/src
  out=/tmp/p7/r6/$side-$group-r$round
  rm -rf $out
  PYTHONPATH=$src PYMTP_LIBRARY=$lib /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench $args \
    --no-llama-cpp --no-profile --no-plot --out $out > $out.log 2>&1
  echo "$side $group r$round done $(date -u +%H:%M:%S)"
done
