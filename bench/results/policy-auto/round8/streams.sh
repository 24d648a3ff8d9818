#!/bin/bash
# round 8 (#29): 4 streams, tools/measure_streams.py, one run under bench-quiet: pymtp serve
# --parallel 4 with auto, plain and the fixed lengths 1 and 2 (the variants interleaved in each
# round) against llama-server --parallel 4 --spec-type draft-mtp (its defaults), 1 thread each.
# usage: streams.sh SIDE ROUND        (SIDE: a `git archive` snapshot /tmp/p9/snap-SIDE)
set -e
side=$1; round=$2
repo=$(cd "$(dirname "$0")/../../../.." && pwd)
server=${LLAMA_SERVER:-/root/.cache/pymtp/llama-tools/llama.cpp-0c1e57098bba-pa8baee413435/build/bin/llama-server}
mkdir -p /tmp/p9/r8
out=/tmp/p9/r8/$side-streams4-r$round.log
PYTHONPATH=/tmp/p9/snap-$side/src PYMTP_LIBRARY=${PYMTP_LIBRARY:-/work/lib/m8/libpymtp.so} /work/tools/bench-quiet \
  /work/main/.venv/bin/python $repo/tools/measure_streams.py --model default --streams 4 --tokens 48 --repeats 5 \
  --threads 1 --variants auto,plain,k1,k2 --llama-server $server > $out 2>&1
echo "$side streams4 r$round done $(date -u +%H:%M:%S)"
