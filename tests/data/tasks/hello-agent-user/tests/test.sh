#!/bin/bash
# Reward 1 when the agent ran as the user `agent` and the verifier runs as root.
echo "verifier runs as $(id -un)"
if [ "$(cat /logs/agent/whoami.txt 2>/dev/null)" = "agent" ] && [ "$(id -u)" = 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
