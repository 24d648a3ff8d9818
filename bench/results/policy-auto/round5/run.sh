#!/bin/bash
# round 5 (#29): main against the policy6 branch, whole `pymtp bench` runs alternating (the order
# flipping by round), each under bench-quiet; both trees are snapshots (git archive) so that
# neither moves during the rounds (SIDES: the snapshots to run, /tmp/p6/snap-SIDE), and load the same native library (/work/lib/m6).
# usage: run.sh GROUP ROUND        GROUP: big (the ~1.5B echo fixture), echo, default
set -e
group=$1; round=$2
lib=${PYMTP_LIBRARY:-/work/lib/m6/libpymtp.so}
case $group in
  big) args="--model echo-80-1.5b --prompts code --n-prompts 1 --temps 0 --drafts 2,3 --repeats 2 --max-tokens 32 --threads 2";;
  echo) args="--model echo-100 --model echo-70 --model deep --prompts both --n-prompts 1 --sampling greedy,qwen --drafts 1,2,3,4 --repeats 1 --max-tokens 48 --threads 1";;
  default) args="--model default --prompts both --n-prompts 2 --sampling greedy,qwen --drafts 1,2,3 --repeats 1 --max-tokens 48 --threads 1";;
esac
sides=${SIDES:-main branch}
order="$sides"; [ $((round % 2)) = 0 ] && order=$(echo $sides | tr " " "\n" | tac | tr "\n" " ")
for side in $order; do
  src=/tmp/p6/snap-$side/src
  out=/tmp/p6/r5/$side-$group-r$round
  rm -rf $out
  PYTHONPATH=$src PYMTP_LIBRARY=$lib /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench $args \
    --no-llama-cpp --no-profile --no-plot --out $out > $out.log 2>&1
  echo "$side $group r$round done $(date -u +%H:%M:%S)"
done
