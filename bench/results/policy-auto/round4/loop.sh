#!/bin/bash
# the rounds, one after the other: the ~1.5B fixture every round, the echo and default groups
# alternating with it
for round in $(seq $1 $2); do
  ./run.sh big $round
  ./run.sh echo $round
  ./run.sh default $round
done
