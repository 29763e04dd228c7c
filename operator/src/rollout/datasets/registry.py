"""A registry.json, read from a path or an http(s) URL, and its datasets fetched with git.

A registry.json lists datasets whose tasks live in git repositories (the models and the lookup
are `rollout.api.dataset`'s); `fetch_registry_dataset` fetches each (repository, commit) once
into a cache (`rollout.datasets.git`) and loads the tasks from there.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from rollout.api.dataset import Dataset, Registry, RegistryDataset, parse_registry
from rollout.api.errors import ErrorType, InvalidInput, Problem
from rollout.api.taskdir import BrokenTask, Task, load_task_or_broken
from rollout.datasets.git import GIT_TIMEOUT_SEC, checkout_repository

REGISTRY_TIMEOUT_SEC = 30.0


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


def fetch_registry_dataset(
    entry: RegistryDataset, cache_dir: str | Path, *, timeout_sec: float = GIT_TIMEOUT_SEC
) -> Dataset:
    """Fetch the tasks of a registry dataset with git (each repository and commit once) and load
    them, in registry order. Each task is named by its registry `name`; a broken one (no such
    directory in the repository: task_not_found) is kept in its place as a `BrokenTask`."""
    cache = Path(cache_dir)
    checkouts: dict[tuple[str, str | None], Path] = {}
    tasks: list[Task | BrokenTask] = []
    problems: list[Problem] = []
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
            missing = Problem(
                where, f"tasks[{index}].path", f"no directory {item.path!r} in the repo"
            )
            tasks.append(BrokenTask(item.name, task_dir, ErrorType.TASK_NOT_FOUND, (missing,)))
            continue
        tasks.append(load_task_or_broken(task_dir, name=item.name))
    if problems:
        raise InvalidInput(problems)
    return Dataset(
        name=entry.name,
        tasks=tasks,
        source=f"registry dataset {entry.name} version {entry.version}",
        version=entry.version,
    )


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
