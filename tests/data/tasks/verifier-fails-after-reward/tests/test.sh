#!/bin/bash
# Writes a reward and then fails: the seed says the reward must be ignored.
echo 1 > /logs/verifier/reward.txt
echo "the verifier crashed after writing its reward" >&2
exit 3
