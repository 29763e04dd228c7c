"""What every environment's commands and file transfers share, whatever carries them (the shim of
a trial Pod, a bridge's Docker engine): which user names are taken, which container paths, a
runner's own script before a copy, a copy's outcome, and a copied-out tree put in place."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from rollout_runner.environment import ExecResult, FileTransferError

USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?\Z")
"""A user name as useradd and busybox adduser accept it; never an option for su."""


def unstage(staged: Path, local_path: Path) -> None:
    """Put a tree (or file) copied out of the environment at `local_path`, links as links."""
    if staged.is_dir() and not staged.is_symlink():
        shutil.copytree(staged, local_path, symlinks=True, dirs_exist_ok=True)
    else:
        local_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(staged, local_path, follow_symlinks=False)


def after_prepare(prepare: str, command: str) -> str:
    """`command`, run once the script `prepare` succeeded. `prepare` runs in a subshell of its
    own, never on the left of `&&` or `||`, where sh would ignore a `set -e` of its."""
    return f"(\n{prepare}\n)\nr=$?; [ $r -eq 0 ] || exit $r\n{command}"


def check_put(container_path: str, owner: str | None) -> None:
    """What `Environment.put_files` takes: an absolute path, and a user name as the owner."""
    check_container_path(container_path)
    if owner is not None and not USER_NAME.match(owner):
        raise ValueError(f"owner must be a user name, got {owner!r}")


def check_container_path(container_path: str) -> None:
    # Absolute, so that no path reads as an option of mkdir, cp or chown.
    if not container_path.startswith("/") or "\0" in container_path:
        raise ValueError(f"container_path must be an absolute path, got {container_path!r}")


def check_transfer(result: ExecResult, what: str) -> None:
    if result.timed_out:
        raise FileTransferError(f"{what} timed out after {result.duration_sec:.0f}s")
    if result.exit_code != 0:
        detail = result.stderr.decode(errors="replace").strip()
        raise FileTransferError(f"{what} failed (exit code {result.exit_code}): {detail}")
