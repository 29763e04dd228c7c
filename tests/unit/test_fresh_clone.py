"""A clone passes its own suite: nothing in it reads what only this project's CI has beside the
checkout (the sample tasks in ../shared/tasks), except tests that say so and skip without it.

Once, `git clone` and `bash .ci/run` stopped at collection with three FileNotFoundErrors and ran
no test at all.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from paths import REPO

# The modules that read task directories: they run here too, without the samples.
TASK_READERS = [
    "tests/unit/test_bundle.py",
    "tests/unit/test_cli_validate.py",
    "tests/unit/test_task_config.py",
    "tests/unit/test_taskdir.py",
]


def repository_files() -> list[str]:
    """The files of a clone: what git tracks, and what it would (untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_clone_alone_collects_every_test_and_passes_its_task_readers(tmp_path: Path) -> None:
    clone = tmp_path / "alone" / "rollout-operator"  # nothing beside it
    for name in repository_files():
        target = clone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    assert not (clone.parent.parent / "shared").exists()

    collected = pytest_in(clone, "--collect-only", "-q")
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    summary = collected.stdout.strip().splitlines()[-1]  # "1130 tests collected in 2.9s"
    assert "error" not in summary, summary
    assert int(summary.split()[0]) > 1000

    ran = pytest_in(clone, "-q", "-rs", *TASK_READERS)
    assert ran.returncode == 0, ran.stdout[-3000:]
    assert " passed" in ran.stdout.strip().splitlines()[-1]
    assert "the sample tasks beside the checkout are not here" in ran.stdout
