#!/bin/bash
# Reward 1 when /app/hello.txt says hello, else 0; exits 0 either way (a non-zero exit would be
# verifier_failed). Offline: bash and coreutils only.
mkdir -p /logs/verifier
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo "ok: /app/hello.txt says hello"
  echo 1 > /logs/verifier/reward.txt
else
  echo "not ok: /app/hello.txt is missing or says something else"
  echo 0 > /logs/verifier/reward.txt
fi
