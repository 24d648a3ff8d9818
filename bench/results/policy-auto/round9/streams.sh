#!/bin/bash
# round 9 (#29): 4 streams, tools/measure_streams.py, one run under bench-quiet: pymtp serve
# --parallel 4 with main's auto (the snapshot /tmp/p10/snap-main), this branch's auto
# (auto@/tmp/p10/snap-p10) and plain steps, interleaved in each round, 1 thread each.
# usage: streams.sh ROUND [MODEL]   (MODEL: default, or a GGUF path: echo-100 is
# /root/.cache/pymtp/echo/echo-a100-100m-f16-c09c853442.gguf, pymtp.bench.models.resolve_model)
set -e
round=$1; model=${2:-default}
repo=$(cd "$(dirname "$0")/../../../.." && pwd)
out=/tmp/p10/r9/$(basename $model .gguf)-streams4-r$round.log
PYTHONPATH=/tmp/p10/snap-main/src PYMTP_LIBRARY=${PYMTP_LIBRARY:-/work/lib/m8/libpymtp.so} /work/tools/bench-quiet \
  /work/main/.venv/bin/python $repo/tools/measure_streams.py --model $model --streams 4 --tokens 48 --repeats 5 \
  --threads 1 --variants auto,auto@/tmp/p10/snap-p10,plain --no-llama-server > $out 2>&1
echo "$model streams4 r$round done $(date -u +%H:%M:%S)"
