#!/bin/bash
# The agent chooses its reward: whatever it wrote to /app/answer.txt (as reward.json when the
# answer starts with a brace). Lets tests drive the verifier from an agent script.
answer=$(cat /app/answer.txt 2>/dev/null)
case $answer in
  "{"*) printf '%s\n' "$answer" > /logs/verifier/reward.json ;;
  *) printf '%s\n' "$answer" > /logs/verifier/reward.txt ;;
esac
