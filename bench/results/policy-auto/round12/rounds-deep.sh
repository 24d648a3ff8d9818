#!/bin/bash
# round 12, rounds 7-16: the deep variant only (its cells lean against 42d053f over round 11's 16
# rounds and these 6), main and 42d alternating, the order swapped each round.
cd "$(dirname "$0")"
for r in 7 8 9 10 11 12 13 14 15 16; do
  if [ $((r % 2)) = 0 ]; then order="42d main"; else order="main 42d"; fi
  for s in $order; do ./run.sh deep $s $r | head -1; done
done
