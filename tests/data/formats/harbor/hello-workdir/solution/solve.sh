#!/bin/bash
# The reference solution: what an agent should do.
echo "Hello, world!" > hello.txt
