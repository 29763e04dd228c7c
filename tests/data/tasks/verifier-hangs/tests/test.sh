#!/bin/bash
# Never finishes in time: the runner must stop it at the verifier timeout.
echo "verifier started"
sleep 600
echo 1 > /logs/verifier/reward.txt
