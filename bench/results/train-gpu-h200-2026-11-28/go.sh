#!/bin/bash
# #30 on a lent GPU: join the staged trunk, then two training runs side by side (lr A/B).
set -u
START=$(date +%s); FINISH=$((START + ${BUDGET:-520}))
mkdir -p /root/stage && cp .stage/* /root/stage/
(cd /root/stage && cat trunk.part-0? > trunk.gguf && sha256sum -c trunk.sha256) || { echo "trunk parts missing"; ls -la /root/stage; exit 3; }
export PYTHONPATH=$PWD/.devpack/site PYTHONUNBUFFERED=1
nvidia-smi -L; nproc; python3 -c "import torch, numpy, yaml, tqdm; print(torch.__version__, numpy.__version__, torch.cuda.get_device_name())"
ARGS=(run .devpack/pack --trunk /root/stage/trunk.gguf --device cuda --skip-prepare --pack --bf16
  --gen-seconds ${GEN_S:-80} --gen-batch 1024 --gen-tokens 160 --samples 12
  --batch 64 --seq 256 --steps 1000000 --train-minutes 6 --finish-by $FINISH
  --eval-every 250 --eval-batches 16 --eval-code-batches 8 --ckpt-every 1000000 --chain 3)
python3 tools/train_on_gpu.py "${ARGS[@]}" --lr ${LR:-6e-4} --out /root/runA > $OUT/logA.txt 2>&1
for r in A; do d=/root/run$r/run; cp $d/smollm2-135m-nextn.gguf $OUT/head$r.gguf; cp $d/smollm2-135m-nextn.loss.csv $OUT/loss$r.csv; cp $d/smollm2-135m-nextn.train.json $OUT/train$r.json; done
ls -la $OUT; tail -n 4 $OUT/logA.txt; echo "wall $(( $(date +%s) - START )) s"
