#!/bin/bash
# Reward 1 when the image is the one built from environment/Dockerfile (its marker file is there)
# and /app/hello.txt says hello, else 0; exits 0 either way. Offline: bash and coreutils only.
mkdir -p /logs/verifier
if [ "$(cat /etc/rollout-built 2>/dev/null)" != "built by rollout" ]; then
  echo "not ok: /etc/rollout-built is missing: this is not the image built from the Dockerfile"
  echo 0 > /logs/verifier/reward.txt
elif [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo "ok: the built image, and /app/hello.txt says hello"
  echo 1 > /logs/verifier/reward.txt
else
  echo "not ok: /app/hello.txt is missing or says something else"
  echo 0 > /logs/verifier/reward.txt
fi
