#!/bin/bash
# Reward 1 when /app/hello.txt says hello; runs offline with bash and coreutils only.
echo "checking /app/hello.txt from $(pwd)"
echo "a line on stderr" >&2
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
