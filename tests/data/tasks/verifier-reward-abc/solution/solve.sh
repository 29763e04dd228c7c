#!/bin/bash
# The oracle's answer: the file the instruction asks for, and a log line of its own.
echo "Hello, world!" > /app/hello.txt
echo "oracle was here" > /logs/agent/oracle.log
echo "solved"
