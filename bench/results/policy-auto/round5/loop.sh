#!/bin/bash
# the rounds, one after the other: the echo group (echo-100, echo-70, deep) and the default model
# (the ~1.5B fixture, at 1.03x in round 4, left out for time)
cd "$(dirname "$0")"
for round in $(seq $1 $2); do
  ./run.sh echo $round
  ./run.sh default $round
done
