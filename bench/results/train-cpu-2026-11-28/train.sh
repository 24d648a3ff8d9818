#!/bin/bash
# #30 sixth run (run7): the shipped (GPU) head fine-tuned with whole-document crops (--seq 512:
# every held-out / training document is at most teacher_text.WINDOW = 512 tokens, so the
# head's attention spans what evaluate_head's windows give it), on the CPU teacher shards.
# nice 19 under setsid: the quiet-daemon pauses it during the other helpers' benchmarks.
cd /work/wt/train5
export PYTHONPATH=/work/wt/train5/src PYMTP_LIBRARY=/work/lib/m8/libpymtp.so
exec setsid nice -n 19 /work/main/.venv/bin/python -u -m pymtp.train.selfdistill --skip-prepare \
  --run run7 --seq 512 --batch 4 --pack --lr 1e-4 --bf16 --chain 3 --seed 7 --threads 2 \
  --steps 100000 --train-minutes ${MINUTES:-40} --eval-every 25 --eval-batches 8 --eval-code-batches 8 \
  --ckpt-every 10
