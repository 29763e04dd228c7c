"""Paths the tests share: the repository, its test data, and the sample tasks beside it.

The tests' own tasks live under tests/data (`FORMATS`: one dataset per task.toml shape), so a
clone passes its suite alone. The sample tasks beside the checkout (`../shared/tasks`: real
Harbor examples and a Terminal-Bench 2 sample) are there on this project's CI only; tests that
also read them are marked `requires_shared_tasks` and skip without them.
"""

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data"
FORMATS = DATA / "formats"
HARBOR = FORMATS / "harbor"
"""Harbor's newer task.toml: hello-user, hello-workdir, hello-world."""
TERMINAL_BENCH = FORMATS / "terminal-bench"
"""Terminal-Bench 2's task.toml: count-lines, sum-column."""

SHARED_TASKS = REPO.parent / "shared" / "tasks"
SHARED_TASKS_ABSENT = (
    None
    if SHARED_TASKS.is_dir()
    else f"the sample tasks beside the checkout are not here ({SHARED_TASKS}); CI has them"
)
requires_shared_tasks = pytest.mark.skipif(
    SHARED_TASKS_ABSENT is not None, reason=SHARED_TASKS_ABSENT or ""
)


def task_dirs(dataset: Path) -> list[Path]:
    """The task directories of a dataset directory, by name; none where it is absent."""
    return sorted(p for p in dataset.iterdir() if p.is_dir()) if dataset.is_dir() else []


def shared_task_dirs() -> list[Path]:
    """Every task of the shared samples (none where they are absent)."""
    return [task for dataset in task_dirs(SHARED_TASKS) for task in task_dirs(dataset)]
