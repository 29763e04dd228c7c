#!/bin/bash
printf 'Hello, world!' > /app/hello.txt
