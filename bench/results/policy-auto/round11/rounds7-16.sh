#!/bin/bash
# rounds 7-16 (run by the coordinator after round 11, 13:09-13:23 UTC, a quiet machine): the same
# run.sh, main and the change alternating, order swapped each round; cert16.txt =
# `python ../round8/collect.py /tmp/p12/r11` over rounds 1-16.
for r in 7 8 9 10 11 12 13 14 15 16; do
  if [ $((r % 2)) = 0 ]; then order="p12 main"; else order="main p12"; fi
  for g in echo70 deep; do for s in $order; do ./run.sh $g $s $r | head -1; done; done
done
