#!/bin/bash
# alternating old (789426f + m6) and new (HEAD + m7), default model, greedy
cd /tmp/coord
for r in 1 2; do
 for t in 2 1; do
  for side in old new; do
   [ $(( (r + ${#side}) % 2 )) = 0 ] || true
   lib=/work/lib/m6; [ $side = new ] && lib=/work/lib/m7
   PYTHONPATH=SNAP-$side/src PYMTP_LIBRARY=$lib/libpymtp.so /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench --model default --prompts both --n-prompts 2 --sampling greedy --drafts 1,2 --repeats 2 --max-tokens 64 --threads $t --no-llama-cpp --no-plot --no-profile --out /tmp/coord/f-$side-t$t-r$r > /tmp/coord/f-$side-t$t-r$r.log 2>&1
  done
 done
done
echo done > /tmp/coord/final.done
