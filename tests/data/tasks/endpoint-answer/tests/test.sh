#!/bin/bash
# Scores the answer an agent left in /logs/agent/answer.txt (an endpoint or model agent's, which
# the runner writes there): 1 for 42, else 0.
if [ "$(tr -d '[:space:]' < /logs/agent/answer.txt 2>/dev/null)" = "42" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
