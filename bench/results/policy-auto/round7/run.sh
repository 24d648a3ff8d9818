#!/bin/bash
# round 7 (#29): main against the policy8 branch (a draft priced first + (n-1) * next), whole
# `pymtp bench` runs alternating (the order flipping by round), each under bench-quiet; both trees
# are `git archive` snapshots (/tmp/p8/snap-SIDE) loading the same native library (/work/lib/m8).
# usage: run.sh GROUP ROUND        GROUP: default (greedy), qwen (default, Qwen's sampling), echo70 (echo-70, greedy)
set -e
group=$1; round=$2
lib=${PYMTP_LIBRARY:-/work/lib/m8/libpymtp.so}
case $group in
  default) args="--model default --prompts both --n-prompts 2 --sampling greedy --drafts 1,2,3 --repeats 2 --max-tokens 64 --threads 2";;
  qwen) args="--model default --prompts both --n-prompts 2 --sampling qwen --drafts 1,2,3 --repeats 2 --max-tokens 64 --threads 2";;
  echo70) args="--model echo-70 --prompts both --n-prompts 1 --sampling greedy --drafts 1,2,3,4 --repeats 1 --max-tokens 48 --threads 1";;
esac
sides=${SIDES:-main branch}
order="$sides"; [ $((round % 2)) = 0 ] && order=$(echo $sides | tr " " "\n" | tac | tr "\n" " ")
mkdir -p /tmp/p8/r7
for side in $order; do
  src=/tmp/p8/snap-$side/src
  out=/tmp/p8/r7/$side-$group-r$round
  rm -rf $out
  PYTHONPATH=$src PYMTP_LIBRARY=$lib /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench $args \
    --no-llama-cpp --no-profile --no-plot --out $out > $out.log 2>&1
  echo "$side $group r$round done $(date -u +%H:%M:%S)"
done
