"""Checks the greeting the task asks for."""

from pathlib import Path

assert Path("/custom-workdir/hello.txt").read_text().strip() == "Hello, world!"
