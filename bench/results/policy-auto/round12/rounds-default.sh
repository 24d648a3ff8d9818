#!/bin/bash
# round 12: 4 alternating rounds of main and the back-off on the default model (run.sh's default
# group: 2 code + 2 prose prompts, drafts 1-3, 64 tokens), the order swapped each round.
cd "$(dirname "$0")"
for r in 1 2 3 4; do
  if [ $((r % 2)) = 0 ]; then order="42d main"; else order="main 42d"; fi
  for s in $order; do ./run.sh default $s $r | head -1; done
done
