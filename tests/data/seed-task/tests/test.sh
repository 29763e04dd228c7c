#!/bin/bash
# The seed's example task (task.toml from the specification, memory = "2048" meaning 2048 MiB).
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
