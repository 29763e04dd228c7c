"""Paths the tests share: the repository and the shared task examples beside it."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data"
SHARED_TASKS = REPO.parent / "shared" / "tasks"
