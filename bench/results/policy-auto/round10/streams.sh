#!/bin/bash
# round 10 (#29): 4 streams, tools/measure_streams.py, one run under bench-quiet: pymtp serve
# --parallel 4 with main's auto (the snapshot /tmp/p11/snap-main), this branch's auto
# (auto@/tmp/p11/snap-p11b) and plain steps, interleaved in each round, 1 thread each; with
# LLAMA=1 llama-server --parallel 4 with MTP too.
# usage: streams.sh ROUND [MODEL]
set -e
round=$1; model=${2:-default}
repo=$(cd "$(dirname "$0")/../../../.." && pwd)
out=/tmp/p11/r10/$(basename $model .gguf)-streams4-r$round.log
server=--no-llama-server
[ -n "$LLAMA" ] && server=
PYTHONPATH=/tmp/p11/snap-main/src PYMTP_LIBRARY=${PYMTP_LIBRARY:-/work/lib/m10/libpymtp.so} /work/tools/bench-quiet \
  /work/main/.venv/bin/python $repo/tools/measure_streams.py --model $model --streams 4 --tokens 48 --repeats 5 \
  --threads 1 --variants auto,auto@/tmp/p11/snap-p11b,plain $server > $out 2>&1
echo "$model streams4 r$round done $(date -u +%H:%M:%S)"
