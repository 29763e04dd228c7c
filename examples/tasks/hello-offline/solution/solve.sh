#!/bin/bash
# The oracle's answer: the file the instruction asks for.
set -euo pipefail
mkdir -p /app
echo "Hello, world!" > /app/hello.txt
echo "wrote /app/hello.txt"
