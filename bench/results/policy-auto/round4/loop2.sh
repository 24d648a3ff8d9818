#!/bin/bash
# rounds 4-: main against the branch at 423ba0f (snap-branchB), after the first loop's last run
while pgrep -f "run.sh default 3" > /dev/null; do sleep 5; done
for round in $(seq $1 $2); do
  SIDES="main branchB" ./run.sh big $round
  SIDES="main branchB" ./run.sh echo $round
  SIDES="main branchB" ./run.sh default $round
done
