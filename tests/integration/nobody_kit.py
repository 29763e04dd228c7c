"""Running things as the user nobody, for the unprivileged path of local mode (a user namespace
instead of root): whether this machine can, a Python nobody may run with this project importable,
and a directory nobody owns."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import rollout
import rollout_runner

NOBODY = 65534


@functools.cache
def unprivileged_unavailable_reason() -> str | None:
    """Why this test process cannot try the sandbox as an unprivileged user, or None."""
    if os.geteuid() != 0:
        return "switching to the user nobody needs root"
    if shutil.which("setpriv") is None:
        return "util-linux setpriv is missing"
    probe = subprocess.run(
        [
            *as_nobody(),
            *("unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork"),
            *("/bin/sh", "-c", "mount -t proc proc /proc"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"this kernel refuses unprivileged user namespaces: {probe.stderr.strip()}"
    if nobody_python() is None:
        return "no Python that the user nobody may run imports this project (and pydantic)"
    return None


@functools.cache
def nobody_python() -> str | None:
    """A Python the user nobody can run with `nobody_env()` (this one may be under /root)."""
    for python in dict.fromkeys([sys.executable, shutil.which("python3"), "/usr/bin/python3"]):
        if python is None:
            continue
        probe = subprocess.run(
            [*as_nobody(), python, "-c", NOBODY_PYTHON_PROBE],
            capture_output=True,
            env=nobody_env(),
            check=False,
        )
        if probe.returncode == 0:
            return python
    return None


NOBODY_PYTHON_PROBE = """\
import subprocess, sys
import rollout.local.host, rollout_runner.main
subprocess.run([sys.executable, "-c", ""], check=True)  # it runs the runner so
"""


def nobody_env() -> dict[str, str]:
    """This environment, with this Python's packages on PYTHONPATH for another interpreter: the
    project's own source directories too, which an editable install names in a .pth file that
    only this Python reads."""
    sources = [str(Path(m.__file__).parent.parent) for m in (rollout, rollout_runner)]
    path = [os.environ.get("PYTHONPATH", ""), *sources, sysconfig.get_paths()["purelib"]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def as_nobody() -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@contextmanager
def nobody_directory(prefix: str = "rollout-nobody-") -> Iterator[Path]:
    """A directory the user nobody owns (a test's tmp_path is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(directory, 0o755)
    os.chown(directory, NOBODY, NOBODY)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)
