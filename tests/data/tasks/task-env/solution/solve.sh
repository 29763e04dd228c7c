#!/bin/bash
printf 'GREETING=%s\nSHARED=%s\nFROM_JOB=%s\n' "$GREETING" "$SHARED" "$FROM_JOB" > /logs/agent/env.txt
