#!/bin/bash
# #30 seventh run (run8): run7 (the shipped head fine-tuned with --seq 512) fine-tuned further
# with whole-document crops, trunk-written text (chat, prose, code continuations) drawn twice
# as often, on the CPU teacher shards with the new trunk text; the curve measures held-out
# trunk-written text and held-out human code each alone too.
# nice 19 under setsid: the quiet-daemon pauses it during the other helpers' benchmarks.
cd /work/wt/train6
export PYTHONPATH=/work/wt/train6/src PYMTP_LIBRARY=/work/lib/m10/libpymtp.so
W=${WORK:-$HOME/.cache/pymtp/train/smollm2-135m}
exec setsid nice -n 19 /work/main/.venv/bin/python -u -m pymtp.train.selfdistill --skip-prepare \
  --run run8 --init $W/run7/smollm2-135m-nextn.gguf \
  --seq 512 --batch 4 --pack --lr ${LR:-1e-4} --bf16 --chain 3 --seed 8 --threads ${THREADS:-2} \
  --domain-weight chat=2 --domain-weight prose=2 --domain-weight codegen=2 \
  --steps 100000 --train-minutes ${MINUTES:-40} --eval-every 50 --eval-batches 8 \
  --eval-code-batches 8 --eval-trunk-batches 8 --ckpt-every 10 ${EXTRA:-}
