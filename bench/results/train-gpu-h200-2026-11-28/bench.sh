#!/bin/bash
# alternating the shipped head (old) and the GPU-trained head (new), same tree and library (m7)
cd /work/coord-h
run() { # side threads sampling tag
  PYTHONPATH=SNAP-$1/src PYMTP_LIBRARY=/work/lib/m7/libpymtp.so /work/tools/bench-quiet /work/main/.venv/bin/python -m pymtp bench --model default --prompts both --n-prompts 2 --sampling $3 --drafts 1,2,3 --repeats 2 --max-tokens 64 --threads $2 --no-llama-cpp --no-plot --no-profile --out out/$4-$1 > out/$4-$1.log 2>&1
}
run old 2 greedy g2r1; run new 2 greedy g2r1
run new 2 greedy g2r2; run old 2 greedy g2r2
run old 1 greedy g1r1; run new 1 greedy g1r1
run new 2 qwen q2r1; run old 2 qwen q2r1
echo done > out/done
