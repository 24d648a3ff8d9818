#!/bin/bash
# #30 eighth run: the shipped head (the soup) fine-tuned with the soft top-32 KL plus
# HARD x the cross-entropy to the trunk's top-1 (--hard-weight), --seq 512, chain 3, on every
# training shard of the CPU cache (the 370 newest trunk texts included), trunk-written text
# drawn twice as often (run8's weights); the curve measures held-out trunk text and human code alone.
# Usage: RUN=run9 HARD=0.5 THREADS=1 train.sh   (nice 19 under setsid: the quiet-daemon
# pauses it during the other helpers' benchmarks)
cd /work/wt/train7
export PYTHONPATH=/work/wt/train7/src PYMTP_LIBRARY=/work/lib/m10/libpymtp.so
W=${WORK:-$HOME/.cache/pymtp/train/smollm2-135m}
exec setsid nice -n 19 /work/main/.venv/bin/python -u -m pymtp.train.selfdistill --skip-prepare \
  --run ${RUN:?} --init ${INIT:-src/pymtp/models/smollm2-135m-nextn.gguf} --hard-weight ${HARD:?} \
  --seq 512 --batch 4 --pack --lr ${LR:-5e-5} --bf16 --chain 3 --seed 8 --threads ${THREADS:-1} \
  --domain-weight chat=2 --domain-weight prose=2 --domain-weight codegen=2 \
  --steps ${STEPS:-250} --train-minutes ${MINUTES:-55} --eval-every 50 --eval-batches 8 \
  --eval-code-batches 8 --eval-trunk-batches 8 --ckpt-every 10 ${EXTRA:-}
