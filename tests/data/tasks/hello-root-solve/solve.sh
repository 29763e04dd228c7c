#!/bin/bash
# Seed 004's oracle: solve.sh at the task root (no solution/), run in the working directory.
echo "Hello, world!" > hello.txt
echo "solved in $(pwd)"
