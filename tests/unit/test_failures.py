"""The failure classes: one table over the seed's error types, and the README's copy of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollout.api.errors import ErrorType
from rollout.api.failures import BUILD_NOT_RUN, ERROR_CLASSES, FailureClass, failure_class

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_table_gives_every_error_type_a_class() -> None:
    for error_type in ErrorType:
        assert isinstance(ERROR_CLASSES[error_type], FailureClass), error_type
    assert set(ERROR_CLASSES) == set(ErrorType)
    assert len(ERROR_CLASSES) == 17


@pytest.mark.parametrize(
    ("error_type", "expected"),
    [
        (ErrorType.AGENT_EXECUTION_TIMEOUT, FailureClass.AGENT),
        (ErrorType.VERIFIER_FAILED, FailureClass.AGENT),
        (ErrorType.VERIFIER_REWARD_MISSING, FailureClass.TASK),
        (ErrorType.ENVIRONMENT_BUILD_FAILED, FailureClass.TASK),
        (ErrorType.TASK_NOT_FOUND, FailureClass.TASK),
        (ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED, FailureClass.INFRASTRUCTURE),
        (ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED, FailureClass.INFRASTRUCTURE),
        (ErrorType.INTERNAL_ERROR, FailureClass.INFRASTRUCTURE),
    ],
)
def test_some_rows(error_type: ErrorType, expected: FailureClass) -> None:
    assert failure_class(error_type, agent_name="claude") is expected


def test_what_is_the_agents_is_the_tasks_for_the_oracle() -> None:
    # The oracle runs the task's own solution: its failures are the task's to fix.
    for error_type, cls in ERROR_CLASSES.items():
        expected = FailureClass.TASK if cls is FailureClass.AGENT else cls
        assert failure_class(error_type, agent_name="oracle") is expected, error_type


def test_a_build_that_never_ran_is_the_infrastructures() -> None:
    assert BUILD_NOT_RUN is FailureClass.INFRASTRUCTURE
    assert ERROR_CLASSES[ErrorType.ENVIRONMENT_BUILD_FAILED] is FailureClass.TASK


def readme_table() -> dict[str, str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Failure classes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| (agent|task|infrastructure) \|", section, re.M)
    return dict(rows)


def test_the_readme_table_says_what_the_code_does() -> None:
    documented = readme_table()
    assert list(documented) == [e.value for e in ErrorType]  # every type, in the seed's order
    assert documented == {e.value: c.value for e, c in ERROR_CLASSES.items()}
