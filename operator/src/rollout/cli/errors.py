"""What the `rollout` command exits with, and the one error type its commands raise for people.

Exit codes (the same for every command):

- 0: done; for `rollout run`, the job completed (whatever the rewards);
- 1: the job failed, or the input was invalid, or the cluster or storage could not be used;
- 2: the command line itself was wrong (argparse's own code);
- 3: the RolloutJob was deleted (cancelled) before it finished;
- 130: interrupted with Ctrl-C (the job keeps running in the cluster).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """See the module docstring."""

    OK = 0
    FAILED = 1
    USAGE = 2
    DELETED = 3
    INTERRUPTED = 130


class CliError(Exception):
    """Something a person must fix or know, said in one message (no traceback is shown)."""
