#!/bin/bash
# round 8 (#29): the certification pass. Whole `pymtp bench` runs (auto beside plain and the fixed
# lengths, interleaved, medians), each under bench-quiet, one at a time. SIDE is a `git archive`
# snapshot /tmp/p9/snap-SIDE of a tree (main, branch), loading the same native library (/work/lib/m8).
# (1 thread: at 2 threads on the 2 shared cores, beside other sessions' nice-10 builds, a repeat took
# 208 s where round 7 took 15: the decode threads wait on each other at every barrier.)
# usage: run.sh GROUP SIDE ROUND
#   GROUP: default (code + prose, greedy + Qwen's sampling), chat (chat-template questions, both
#          samplings), echo (echo-100 + echo-70, both samplings), deep (the deep variant, both samplings)
set -e
group=$1; side=$2; round=$3
here=$(cd "$(dirname "$0")" && pwd)
lib=${PYMTP_LIBRARY:-/work/lib/m8/libpymtp.so}
py=/work/main/.venv/bin/python
common="--sampling greedy,qwen --repeats 2 --no-llama-cpp --no-profile --no-plot"
case $group in
  default) cmd="-m pymtp bench --model default --prompts both --n-prompts 2 --drafts 1,2,3 --max-tokens 64 --threads 1";;
  chat) cmd="$here/bench_chat.py --model default --prompts prose --n-prompts 3 --drafts 1,2,3 --max-tokens 64 --threads 1";;
  echo) cmd="-m pymtp bench --model echo-100 --model echo-70 --prompts both --n-prompts 1 --drafts 1,2,3,4 --max-tokens 48 --threads 1";;
  deep) cmd="-m pymtp bench --model deep --prompts both --n-prompts 1 --drafts 1,2,3,4 --max-tokens 48 --threads 1";;
esac
mkdir -p /tmp/p9/r8
out=/tmp/p9/r8/$side-$group-r$round
rm -rf $out
PYTHONPATH=/tmp/p9/snap-$side/src PYMTP_LIBRARY=$lib /work/tools/bench-quiet $py $cmd $common --out $out > $out.log 2>&1
echo "$side $group r$round done $(date -u +%H:%M:%S)"
