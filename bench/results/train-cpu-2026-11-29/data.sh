#!/bin/bash
# #30 seventh run, step 1: more trunk-written text (chat, prose, code continuations) through
# pymtp.Batch (32 streams), then its teacher shards; the human code / prose budgets are the
# cache's (150k / 40k), so only the new trunk texts are extracted. New texts are training
# texts (held-out items come first in the job list and are all written already).
# --teacher: the file the cache's shards were extracted with (its manifest names it; the
# trunk is the same, the default model's file changed with the shipped head).
# nice 19 under setsid: the quiet-daemon pauses it during the other helpers' benchmarks.
cd /work/wt/train6
export PYTHONPATH=/work/wt/train6/src PYMTP_LIBRARY=/work/lib/m10/libpymtp.so
exec setsid nice -n 19 /work/main/.venv/bin/python -u -m pymtp.train.selfdistill --prepare-only \
  --gen-minutes ${GEN_MINUTES:-22} --n-code 1000 --gen-seqs 32 --gen-tokens 160 \
  --code-tokens 150000 --docs-tokens 40000 --llama-threads 2 \
  --teacher $HOME/.cache/pymtp/models/smollm2-135m-mtp-f16-3da73830e80d-a2.gguf
