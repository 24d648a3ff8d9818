#!/bin/bash
# round 12: 6 alternating rounds of main and 42d053f's back-off (applied to b770dbc), echo-70 and
# the deep variant, the order swapped each round; then `python stats.py /tmp/p13/r12 --sides main,42d`.
cd "$(dirname "$0")"
for r in 1 2 3 4 5 6; do
  if [ $((r % 2)) = 0 ]; then order="42d main"; else order="main 42d"; fi
  for g in echo70 deep; do for s in $order; do ./run.sh $g $s $r | head -1; done; done
done
