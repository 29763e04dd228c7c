"""The project layout keeps the promises other tools rely on."""

from __future__ import annotations

import importlib
import subprocess
import sys

from paths import REPO


def test_operator_folder_is_not_a_package() -> None:
    # The standard library has a module named `operator`; a package here would shadow it.
    assert not (REPO / "operator" / "__init__.py").exists()


def test_import_operator_is_the_standard_library() -> None:
    # Run from the repository root, where a stray operator/__init__.py would win.
    code = "import operator, sys; print(operator.__file__); print(operator.itemgetter(0)([7]))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "/operator/" not in out[0].replace(str(REPO), "")
    assert not out[0].startswith(str(REPO))
    assert out[1] == "7"


def test_both_import_packages_are_installed() -> None:
    for name in ("rollout", "rollout_runner"):
        module = importlib.import_module(name)
        assert module.__file__ is not None
