#!/bin/bash
# before (main's draft_vocab: stdlib set) / after (vocab1: shipped corpus mix), alternated
for r in 1 2; do
 for arm in before after; do
  if [ $arm = before ]; then src=/work/main/src; else src=/work/wt/vocab1/src; fi
  PYTHONPATH=$src PYMTP_LIBRARY=/work/lib/m5/libpymtp.so /work/main/.venv/bin/python -m pymtp bench --model default --prompts both --n-prompts 2 --temps 0 --drafts 1,2 --repeats 2 --max-tokens 48 --threads 2 --no-llama-cpp --no-profile --no-plot --out /tmp/v1/bench-$arm-$r > /tmp/v1/bench-$arm-$r.log 2>&1
 done
done
