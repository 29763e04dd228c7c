"""Which verifier a task directory has (seed 004's resolution): task.toml's `[verifier] python`,
else tests/test.sh, else tests/evaluate.py; a metric is for data rows, not task directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.taskdir import load_task
from rollout.api.verifiers import VerifierKind, VerifierSource


def task(root: Path, files: dict[str, str], toml: str = "") -> Path:
    path = root / "t"
    (path / "environment").mkdir(parents=True)
    (path / "instruction.md").write_text("Do it.\n")
    (path / "task.toml").write_text('[environment]\ndocker_image = "busybox"\n' + toml)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


@pytest.mark.parametrize(
    ("files", "toml", "kind", "script", "source"),
    [
        (
            {"tests/test.sh": "exit 0"},
            "",
            VerifierKind.SHELL,
            "tests/test.sh",
            VerifierSource.FILES,
        ),
        (
            {"tests/test.sh": "exit 0", "tests/evaluate.py": "def evaluate(m, t): return 1"},
            "",
            VerifierKind.SHELL,
            "tests/test.sh",
            VerifierSource.FILES,
        ),
        (
            {"tests/evaluate.py": "def evaluate(m, t): return 1"},
            "",
            VerifierKind.PYTHON,
            "tests/evaluate.py",
            VerifierSource.FILES,
        ),
        (
            {"tests/test.sh": "exit 0", "score.py": "def evaluate(m, t): return 1"},
            '[verifier]\npython = "score.py"\n',
            VerifierKind.PYTHON,
            "score.py",
            VerifierSource.TASK,
        ),
    ],
    ids=["test.sh", "test.sh-wins", "evaluate.py", "declared"],
)
def test_the_first_verifier_found_is_the_tasks(
    tmp_path: Path,
    files: dict[str, str],
    toml: str,
    kind: VerifierKind,
    script: str,
    source: VerifierSource,
) -> None:
    verifier = load_task(task(tmp_path, files, toml)).verifier
    assert (verifier.kind, verifier.script, verifier.source) == (kind, script, source)


@pytest.mark.parametrize(
    ("files", "toml", "message"),
    [
        ({}, "", r"tests: .*holds tests/test.sh \(or tests/evaluate.py\)"),
        ({"tests/README": "x"}, "", r"tests/test.sh: .*the verifier runs it"),
        (
            {"tests/test.sh": "exit 0"},
            '[verifier]\nmetric = "exact_match"\n',
            "verifier.metric: a metric scores data rows",
        ),
        ({"tests/test.sh": "exit 0"}, '[verifier]\npython = "../x.py"\n', "verifier.python"),
        ({"tests/test.sh": "exit 0"}, '[verifier]\npython = "nope.py"\n', "nope.py"),
    ],
    ids=["nothing", "no-script", "metric", "outside", "missing"],
)
def test_a_task_without_a_usable_verifier_is_invalid(
    tmp_path: Path, files: dict[str, str], toml: str, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_task(task(tmp_path, files, toml))
