#!/bin/bash
# Writes a reward that is not a number.
echo abc > /logs/verifier/reward.txt
