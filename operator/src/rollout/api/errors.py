"""Error types of the trial flow, and the one way bad input is reported.

Every loader in this package raises `InvalidInput` carrying `Problem`s, each naming the file and
the field at fault, so that `rollout validate`, the CLI and the operator all print the same thing.
pydantic's errors become Problems in `rollout.api.problems`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class ErrorType(StrEnum):
    """The seed's 17 error types, exactly as they appear in result.json."""

    ENVIRONMENT_BUILD_FAILED = "environment_build_failed"
    ENVIRONMENT_BUILD_TIMEOUT = "environment_build_timeout"
    ENVIRONMENT_IMAGE_PULL_FAILED = "environment_image_pull_failed"
    ENVIRONMENT_START_FAILED = "environment_start_failed"
    ENVIRONMENT_RESOURCE_ALLOCATION_FAILED = "environment_resource_allocation_failed"
    AGENT_INSTALL_FAILED = "agent_install_failed"
    AGENT_INSTALL_TIMEOUT = "agent_install_timeout"
    AGENT_EXECUTION_FAILED = "agent_execution_failed"
    AGENT_EXECUTION_TIMEOUT = "agent_execution_timeout"
    VERIFIER_FAILED = "verifier_failed"
    VERIFIER_TIMEOUT = "verifier_timeout"
    VERIFIER_REWARD_MISSING = "verifier_reward_missing"
    VERIFIER_REWARD_INVALID = "verifier_reward_invalid"
    ENVIRONMENT_TEARDOWN_FAILED = "environment_teardown_failed"
    TASK_INVALID = "task_invalid"
    TASK_NOT_FOUND = "task_not_found"
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one input: which file, which field in it, and what is wrong."""

    file: str
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class InvalidInput(ValueError):
    """Input that cannot be used; `problems` says every reason found, not just the first.

    `error_type` is set where the seed names the failure (`task_invalid`, `task_not_found`).
    """

    def __init__(self, problems: Sequence[Problem], error_type: ErrorType | None = None) -> None:
        if not problems:
            raise ValueError("InvalidInput needs at least one problem")
        self.problems = list(problems)
        self.error_type = error_type
        super().__init__("\n".join(str(p) for p in self.problems))

    @classmethod
    def one(
        cls,
        file: str | Path,
        field: str | None,
        message: str,
        error_type: ErrorType | None = None,
    ) -> InvalidInput:
        return cls([Problem(str(file), field, message)], error_type)


def field_path(loc: Iterable[int | str]) -> str | None:
    """Render a pydantic error location as `agents[1].env.KEY`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or None
