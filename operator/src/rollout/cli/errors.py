"""What the `rollout` command exits with, and the one error type its commands raise for people.

Exit codes (the same for every command):

- 0: done; for `rollout run`, the job completed (whatever the rewards);
- 1: the job failed, or the input was invalid, or the cluster or storage could not be used;
- 2: the command line itself was wrong (argparse's own code);
- 3: the RolloutJob was deleted (cancelled) before it finished;
- 130: interrupted with Ctrl-C (the job keeps running in the cluster).
"""

from __future__ import annotations

import os
import sys
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


class Problems(CliError):
    """Every problem found before anything was created, said together (one `error:` line each),
    and a hint where one helps."""

    def __init__(self, messages: list[str], hint: str | None = None) -> None:
        self.messages = messages
        self.hint = hint
        super().__init__("\n".join(messages))


def os_error_message(err: OSError) -> str:
    """A file system error in one line that names the path: `<path>: <reason>`."""
    reason = err.strerror or str(err)
    if err.filename is None:
        return reason
    where = os.fsdecode(err.filename)
    if err.filename2 is not None:
        where += f" -> {os.fsdecode(err.filename2)}"
    return f"{where}: {reason}"


def note(message: str) -> None:
    """Say something to the user on stderr, at once (stdout is for results)."""
    print(message, file=sys.stderr, flush=True)
