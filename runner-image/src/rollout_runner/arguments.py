"""Argument types shared by the runner's commands (`rollout-runner`, `python -m
rollout_runner.build`)."""

from __future__ import annotations

import argparse


def positive_seconds(text: str) -> float:
    """A command-line number of seconds: finite and above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value
