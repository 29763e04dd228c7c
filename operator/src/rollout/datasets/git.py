"""Repositories fetched with git into a cache, one checked-out tree per commit."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from rollout.api.errors import InvalidInput

GIT_TIMEOUT_SEC = 600.0


_GIT_VERBS = {"init", "fetch", "rev-parse", "checkout"}


class GitError(Exception):
    """A git command failed; the message is git's own explanation."""


def checkout_repository(
    url: str, commit: str | None, cache_dir: str | Path, timeout_sec: float = GIT_TIMEOUT_SEC
) -> Path:
    """A directory holding `url` at `commit` (HEAD when None), cached and reused.

    Layout: `cache_dir/<sha256(url)[:16]>/git` is a bare repository shared by every commit of
    that URL, and `cache_dir/<sha256(url)[:16]>/<commit>` is a checked-out tree, made in a
    temporary directory and renamed into place, so that a tree that exists is complete. A pinned
    commit already in the cache needs no network at all; HEAD is resolved by fetching each time
    and its tree is keyed by the commit it resolved to.
    """
    repo_dir = Path(cache_dir).absolute() / hashlib.sha256(url.encode()).hexdigest()[:16]
    if commit is not None and (repo_dir / commit).is_dir():
        return repo_dir / commit
    git_dir = repo_dir / "git"
    try:
        if not (git_dir / "HEAD").exists():
            git_dir.mkdir(parents=True, exist_ok=True)
            _git(["init", "--quiet", "--bare", str(git_dir)], timeout_sec)
        sha = _fetch(git_dir, url, commit, timeout_sec)
        tree = repo_dir / (commit or sha)
        if not tree.is_dir():
            _checkout(git_dir, sha, tree, timeout_sec)
    except GitError as err:
        raise InvalidInput.one(url, None, str(err)) from None
    return tree


def _fetch(git_dir: Path, url: str, commit: str | None, timeout_sec: float) -> str:
    """Fetch `commit` (or HEAD) shallowly, else in full; return the full commit id."""
    git = ["--git-dir", str(git_dir)]
    fetch_head = [*git, "rev-parse", "--verify", "FETCH_HEAD^{commit}"]
    shallow = [*git, "fetch", "--quiet", "--no-tags", "--depth", "1", "--", url, commit or "HEAD"]
    try:
        _git(shallow, timeout_sec)
        return _git(fetch_head, timeout_sec)
    except GitError as shallow_error:
        first_error = shallow_error
    # Some servers refuse to serve a commit by its id, and dumb HTTP cannot fetch shallowly:
    # fetch HEAD, or every branch and tag and look for the commit among them.
    refspecs = ["HEAD"] if commit is None else ["+refs/heads/*:refs/remotes/source/*"]
    if commit is not None:
        refspecs.append("+refs/tags/*:refs/tags/*")
    # An earlier shallow fetch left history cut off; an older commit may lie beyond the cut.
    deepen = ["--unshallow"] if (git_dir / "shallow").exists() else []
    try:
        _git([*git, "fetch", "--quiet", *deepen, "--", url, *refspecs], timeout_sec)
    except GitError as full_error:
        raise GitError(f"cannot fetch the repository: {full_error}") from first_error
    if commit is None:
        return _git(fetch_head, timeout_sec)
    try:
        return _git([*git, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], 60)
    except GitError:
        raise GitError(f"git_commit_id {commit} is not a commit in the repository") from None


def _checkout(git_dir: Path, sha: str, tree: Path, timeout_sec: float) -> None:
    tree.parent.mkdir(parents=True, exist_ok=True)
    scratch = tree.parent / f".tmp-{uuid.uuid4().hex}"
    scratch.mkdir()
    # A private index per checkout, so that two checkouts of the same repository can run at once.
    env = {"GIT_INDEX_FILE": str(scratch.parent / f"{scratch.name}.index")}
    try:
        git = ["--git-dir", str(git_dir), "--work-tree", str(scratch)]
        _git([*git, "checkout", "--quiet", "--force", sha, "--", "."], timeout_sec, env)
        try:
            scratch.rename(tree)
        except OSError:
            if not tree.is_dir():  # someone else finished the same checkout first: keep theirs
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)


def _git(args: list[str], timeout_sec: float, extra_env: dict[str, str] | None = None) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(extra_env or {})}
    try:
        result = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            timeout=timeout_sec,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except subprocess.TimeoutExpired:
        verb = next((a for a in args if a in _GIT_VERBS), "command")
        raise GitError(f"git {verb} took longer than {timeout_sec:g} seconds") from None
    if result.returncode != 0:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        # git's own verdicts ("fatal: ...", "error: ...") say what went wrong; hints do not.
        verdicts = [line for line in lines if line.startswith(("fatal:", "error:"))]
        detail = "; ".join((verdicts or lines)[-3:])[:1000]
        raise GitError(detail or f"git exited with {result.returncode}")
    return result.stdout.strip()
