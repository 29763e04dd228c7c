#!/bin/bash
whoami > /logs/agent/whoami.txt
