#!/bin/bash
# Writes each reward file the agent chose: /app/rewards/rllm.json to /tmp/rllm/reward.json,
# verifier.json to /logs/verifier/reward.json, verifier.txt to /logs/verifier/reward.txt. It
# creates no directory: the runner must have made /tmp/rllm and /logs/verifier.
set -e
copy() { if [ -f "/app/rewards/$1" ]; then cp "/app/rewards/$1" "$2"; fi; }
copy rllm.json /tmp/rllm/reward.json
copy verifier.json /logs/verifier/reward.json
copy verifier.txt /logs/verifier/reward.txt
