#!/bin/bash
# Records what the verifier sees of the task's env; reward 1.
printf 'GREETING=%s\nSHARED=%s\nFROM_JOB=%s\n' "$GREETING" "$SHARED" "$FROM_JOB" > /logs/verifier/env.txt
echo 1 > /logs/verifier/reward.txt
