#!/bin/bash
# round 12 (#29, a copy of round11/run.sh): whole `pymtp bench` runs (auto beside plain and the fixed lengths, interleaved,
# medians), each under bench-quiet, one at a time, main and this branch alternating. SIDE is a
# `git archive` snapshot /tmp/p13/snap-SIDE/src of a tree (main: b770dbc; 42d: b770dbc with 42d053f applied), both loading /work/lib/m10.
# usage: run.sh GROUP SIDE ROUND
#   GROUP: echo70 (echo-70, code + prose, greedy + Qwen's sampling, drafts 1-4, 48 tokens),
#          deep (the deep variant, the same), default (the default model, 2 + 2 prompts, drafts 1-3,
#          64 tokens: round 8's default group)
set -e
group=$1; side=$2; round=$3
lib=${PYMTP_LIBRARY:-/work/lib/m10/libpymtp.so}
py=/work/main/.venv/bin/python
common="--sampling greedy,qwen --repeats 2 --no-llama-cpp --no-profile --no-plot --threads 1"
case $group in
  echo70) cmd="-m pymtp bench --model echo-70 --prompts both --n-prompts 1 --drafts 1,2,3,4 --max-tokens 48";;
  deep) cmd="-m pymtp bench --model deep --prompts both --n-prompts 1 --drafts 1,2,3,4 --max-tokens 48";;
  default) cmd="-m pymtp bench --model default --prompts both --n-prompts 2 --drafts 1,2,3 --max-tokens 64";;
esac
mkdir -p /tmp/p13/r12
out=/tmp/p13/r12/$side-$group-r$round
rm -rf $out
PYTHONPATH=/tmp/p13/snap-$side/src PYMTP_LIBRARY=$lib /work/tools/bench-quiet $py $cmd $common --out $out > $out.log 2>&1
echo "$side $group r$round done $(date -u +%H:%M:%S)"
