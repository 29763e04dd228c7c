"""Datasets: a local directory of task directories, or a dataset named in a registry.json.

A local dataset is a directory whose subdirectories are tasks, in name order (trials are
enumerated in dataset order, so the order must not depend on the file system). Hidden entries and
plain files (README.md, ...) are ignored, and so are subdirectories with nothing of a task in them.
An optional dataset.toml (seed 004) may give the dataset's `name`; its other keys are kept.

A registry.json lists datasets whose tasks live in git repositories; `fetch_registry_dataset`
fetches each (repository, commit) once into a cache and loads the tasks from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field, ValidationError, field_validator

from rollout.api.base import OpenFileModel
from rollout.api.errors import ErrorType, InvalidInput, Problem, problems_from_validation_error
from rollout.api.taskdir import TASK_SHAPE, TASK_TOML, Task, load_task, looks_like_task

DATASET_TOML = "dataset.toml"
REGISTRY_TIMEOUT_SEC = 30.0
GIT_TIMEOUT_SEC = 600.0


class DatasetConfig(OpenFileModel):
    """dataset.toml (seed 004). Only `name` is used here; every other key is kept as written."""

    name: str | None = Field(None, min_length=1, description="The dataset's name in results.")
    description: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: its name in result paths, its tasks in trial order, and its origin."""

    name: str
    tasks: list[Task]
    source: str
    """Where the dataset came from, for people: a directory, or a registry entry."""
    version: str | None = None
    config: DatasetConfig = field(default_factory=DatasetConfig)


# --- Local datasets -------------------------------------------------------------------------


def load_local_dataset(path: str | Path) -> Dataset:
    """Load every task directory below `path`, reporting every broken task at once."""
    root = Path(path).absolute()
    if not root.exists():
        raise InvalidInput.one(root, None, "dataset directory does not exist")
    if not root.is_dir():
        raise InvalidInput.one(root, None, "is not a directory (a dataset is a directory of tasks)")
    if (root / TASK_TOML).exists():
        raise InvalidInput.one(
            root,
            None,
            "is a task directory, not a dataset: name the directory that contains it",
        )
    problems: list[Problem] = []
    config = _read_dataset_toml(root / DATASET_TOML, problems)
    tasks: list[Task] = []
    error_type: ErrorType | None = None
    for child in sorted(root.iterdir(), key=lambda p: os.fsencode(p.name)):
        if child.name.startswith(".") or not looks_like_task(child):
            continue
        try:
            tasks.append(load_task(child))
        except InvalidInput as err:
            problems.extend(err.problems)
            error_type = error_type or err.error_type
    if not tasks and not problems:
        raise InvalidInput.one(root, None, _no_tasks_message(root))
    if problems:
        raise InvalidInput(problems, error_type)
    return Dataset(
        name=config.name or _directory_name(root),
        tasks=tasks,
        source=f"directory {root}",
        config=config,
    )


def _read_dataset_toml(path: Path, problems: list[Problem]) -> DatasetConfig:
    if not path.exists():
        return DatasetConfig()
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
        return DatasetConfig.model_validate(data)
    except (OSError, UnicodeDecodeError) as err:
        problems.append(Problem(str(path), None, f"cannot be read: {err}"))
    except tomllib.TOMLDecodeError as err:
        problems.append(Problem(str(path), None, f"not valid TOML: {err}"))
    except ValidationError as err:
        problems.extend(problems_from_validation_error(err, path))
    return DatasetConfig()


def _no_tasks_message(root: Path) -> str:
    if any((root / "data").glob("*.jsonl")):
        return (
            "data datasets (data/*.jsonl rows sharing one verifier) are not supported yet; "
            f"a dataset must be a directory of task directories ({TASK_SHAPE})"
        )
    children = sorted(
        (c for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")),
        key=lambda p: os.fsencode(p.name),
    )
    # Datasets one level down: the user named their parent.
    nested = [c for c in children if any(looks_like_task(g) for g in c.iterdir() if g.is_dir())]
    names = ", ".join(c.name for c in children[:8]) + (", ..." if len(children) > 8 else "")
    if not children:
        looked = "it has no subdirectories"
    elif len(children) == 1:
        looked = f"its one subdirectory ({names}) is not a task"
    else:
        looked = f"none of its {len(children)} subdirectories ({names}) is a task"
    message = (
        f"no tasks found: a dataset directory holds task directories, and {looked} ({TASK_SHAPE})"
    )
    if nested:
        message += "; these hold tasks, and are datasets: " + ", ".join(str(c) for c in nested)
    return message


def _directory_name(path: Path) -> str:
    return path.name if path.name not in ("", ".", "..") else path.resolve().name


# --- Registry -------------------------------------------------------------------------------


class RegistryTask(OpenFileModel):
    """One task of a registry dataset: a directory at `path` in a git repository."""

    name: str = Field(min_length=1, description="The task's name in trial names and results.")
    git_url: str = Field(min_length=1, description="Repository holding the task.")
    git_commit_id: str | None = Field(None, description="Commit to fetch; default: HEAD.")
    path: str = Field("", description="Task directory inside the repository (default: root).")

    @field_validator("git_url", "git_commit_id")
    @classmethod
    def _not_an_option(cls, value: str | None) -> str | None:
        # These become git arguments: a leading '-' would be read as an option.
        if value is not None and (value.startswith("-") or not value.strip()):
            raise ValueError(f"{value!r} is not a git URL or commit")
        return value

    @field_validator("path")
    @classmethod
    def _relative_path(cls, value: str) -> str:
        pure = PurePosixPath(value)
        if pure.is_absolute() or ".." in pure.parts:
            raise ValueError(f"{value!r} must be a relative path inside the repository")
        return value


class RegistryDataset(OpenFileModel):
    """One entry of registry.json: a named, versioned list of tasks."""

    name: str = Field(min_length=1)
    version: str = Field(min_length=1)
    description: str = ""
    tasks: list[RegistryTask]


@dataclass(frozen=True)
class Registry:
    """A parsed registry.json and where it was read from (a path or a URL)."""

    source: str
    datasets: list[RegistryDataset]


def parse_registry(data: Any, source: str) -> Registry:
    """Validate registry.json content; problems name `source` and the index, e.g. [1].tasks[0]."""
    if not isinstance(data, list):
        found = type(data).__name__ if not isinstance(data, dict) else "an object"
        raise InvalidInput.one(source, None, f"must be a JSON list of datasets, found {found}")
    datasets: list[RegistryDataset] = []
    problems: list[Problem] = []
    for index, item in enumerate(data):
        try:
            datasets.append(RegistryDataset.model_validate(item))
        except ValidationError as err:
            for problem in problems_from_validation_error(err, source):
                where = f"[{index}]" + (f".{problem.field}" if problem.field else "")
                problems.append(Problem(source, where, problem.message))
    if problems:
        raise InvalidInput(problems)
    return Registry(source=source, datasets=datasets)


def load_registry(location: str | Path, *, timeout_sec: float = REGISTRY_TIMEOUT_SEC) -> Registry:
    """Read a registry.json from a local path or an http(s) URL (downloaded with a timeout)."""
    source = str(location)
    if isinstance(location, str) and _is_url(location):
        raw = _download(location, timeout_sec)
    else:
        try:
            raw = Path(location).read_bytes()
        except FileNotFoundError:
            raise InvalidInput.one(source, None, "registry file does not exist") from None
        except OSError as err:
            raise InvalidInput.one(source, None, f"cannot be read: {err.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise InvalidInput.one(source, None, f"not UTF-8 text ({err.reason})") from None
    except json.JSONDecodeError as err:
        message = f"not valid JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        raise InvalidInput.one(source, None, message) from None
    return parse_registry(data, source)


def find_registry_dataset(
    registry: Registry, name: str, version: str | None = None
) -> RegistryDataset:
    """The dataset `name` at `version`; without a version, the only one there is."""
    named = [d for d in registry.datasets if d.name == name]
    if not named:
        available = _describe_datasets(registry.datasets) or "none"
        raise InvalidInput.one(
            registry.source, "name", f"no dataset named {name!r}; the registry has: {available}"
        )
    versions = ", ".join(repr(d.version) for d in named)
    if version is None:
        if len(named) == 1:
            return named[0]
        raise InvalidInput.one(
            registry.source,
            "version",
            f"dataset {name!r} has several versions ({versions}); say which one",
        )
    for dataset in named:
        if dataset.version == version:
            return dataset
    raise InvalidInput.one(
        registry.source,
        "version",
        f"dataset {name!r} has no version {version!r}; its versions: {versions}",
    )


def fetch_registry_dataset(
    entry: RegistryDataset, cache_dir: str | Path, *, timeout_sec: float = GIT_TIMEOUT_SEC
) -> Dataset:
    """Fetch the tasks of a registry dataset with git (each repository and commit once) and load
    them, in registry order. Each task is named by its registry `name`."""
    cache = Path(cache_dir)
    checkouts: dict[tuple[str, str | None], Path] = {}
    tasks: list[Task] = []
    problems: list[Problem] = []
    error_type: ErrorType | None = None
    seen: set[str] = set()
    for index, item in enumerate(entry.tasks):
        key = (item.git_url, item.git_commit_id)
        if key not in checkouts:
            checkouts[key] = checkout_repository(
                item.git_url, item.git_commit_id, cache, timeout_sec
            )
        where = f"{item.git_url} at {item.git_commit_id or 'HEAD'}"
        task_dir = checkouts[key] / item.path
        if item.name in seen:
            problems.append(Problem(where, f"tasks[{index}].name", f"{item.name!r} appears twice"))
            continue
        seen.add(item.name)
        if not task_dir.is_dir():
            problems.append(
                Problem(where, f"tasks[{index}].path", f"no directory {item.path!r} in the repo")
            )
            error_type = error_type or ErrorType.TASK_NOT_FOUND
            continue
        try:
            tasks.append(load_task(task_dir, name=item.name))
        except InvalidInput as err:
            problems.extend(err.problems)
            error_type = error_type or err.error_type
    if problems:
        raise InvalidInput(problems, error_type)
    return Dataset(
        name=entry.name,
        tasks=tasks,
        source=f"registry dataset {entry.name} version {entry.version}",
        version=entry.version,
    )


def _describe_datasets(datasets: list[RegistryDataset]) -> str:
    versions: dict[str, list[str]] = {}
    for dataset in datasets:
        versions.setdefault(dataset.name, []).append(dataset.version)
    return "; ".join(f"{name!r} (versions {', '.join(v)})" for name, v in versions.items())


def _is_url(location: str) -> bool:
    return urllib.parse.urlsplit(location).scheme in ("http", "https")


def _download(url: str, timeout_sec: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "rollout-operator"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_sec) as response:  # noqa: S310
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as err:
        reason = f"HTTP {err.code} {err.reason}"
    except urllib.error.URLError as err:
        reason = str(err.reason)
    except TimeoutError:
        reason = f"no answer within {timeout_sec:g} seconds"
    except OSError as err:
        reason = str(err)
    raise InvalidInput.one(url, None, f"cannot download the registry: {reason}")


# --- Git ------------------------------------------------------------------------------------


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
