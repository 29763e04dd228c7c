#!/bin/bash
# The oracle's answer: the file the instruction asks for.
set -euo pipefail
echo "Hello, world!" > /app/hello.txt
echo "wrote /app/hello.txt"
