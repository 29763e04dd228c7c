"""Datasets: a local directory of task directories, or a dataset named in a registry.json.

A local dataset is a directory whose subdirectories are tasks, in name order (trials are
enumerated in dataset order, so the order must not depend on the file system). Hidden entries and
plain files (README.md, ...) are ignored, and so are subdirectories with nothing of a task in them.
An optional dataset.toml (seed 004) may give the dataset's `name`; its other keys are kept.

A broken task does not sink its dataset: it is kept in its place as a `BrokenTask`
(task_invalid; task_not_found for an entry that is a symbolic link to nothing), and its trials
fail with its error while the other tasks run.

A registry.json lists datasets whose tasks live in git repositories. Here are its models and the
lookup of a dataset by name and version; reading one from a URL and fetching its tasks with git
is `rollout.datasets.registry`'s.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field, ValidationError, field_validator

from rollout.api.base import OpenFileModel
from rollout.api.errors import InvalidInput, Problem
from rollout.api.problems import problems_from_validation_error
from rollout.api.taskdir import (
    TASK_SHAPE,
    TASK_TOML,
    BrokenTask,
    Task,
    load_task_or_broken,
    looks_like_task,
)

DATASET_TOML = "dataset.toml"


class DatasetConfig(OpenFileModel):
    """dataset.toml (seed 004). Only `name` is used here; every other key is kept as written."""

    name: str | None = Field(None, min_length=1, description="The dataset's name in results.")
    description: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: its name in result paths, its tasks in trial order, and its origin."""

    name: str
    tasks: list[Task | BrokenTask]
    """Every task in trial order, the broken ones in their places."""
    source: str
    """Where the dataset came from, for people: a directory, or a registry entry."""
    version: str | None = None
    config: DatasetConfig = field(default_factory=DatasetConfig)

    @property
    def broken(self) -> list[BrokenTask]:
        """The tasks that cannot run (their trials fail at creation)."""
        return [task for task in self.tasks if isinstance(task, BrokenTask)]

    def problems(self) -> list[Problem]:
        """Every problem of every broken task, as `rollout validate DATASET` reports them."""
        return [problem for task in self.broken for problem in task.problems]


# --- Local datasets -------------------------------------------------------------------------


def load_local_dataset(path: str | Path) -> Dataset:
    """Load every task directory below `path`, each broken one kept as a `BrokenTask`.

    Raises InvalidInput for what sinks the whole dataset: no such directory, a task directory
    given for a dataset, a broken dataset.toml, no tasks at all."""
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
    tasks: list[Task | BrokenTask] = []
    for child in sorted(root.iterdir(), key=lambda p: os.fsencode(p.name)):
        if child.name.startswith("."):
            continue
        if looks_like_task(child) or _dangling_link(child):
            tasks.append(load_task_or_broken(child))
    if problems:
        raise InvalidInput(problems)
    if not tasks:
        raise InvalidInput.one(root, None, _no_tasks_message(root))
    return Dataset(
        name=config.name or _directory_name(root),
        tasks=tasks,
        source=f"directory {root}",
        config=config,
    )


def _dangling_link(path: Path) -> bool:
    """A symbolic link to nothing: a task that is not there (task_not_found), not a stray file."""
    return path.is_symlink() and not path.exists()


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


def looks_like_registry(data: Any) -> bool:
    """Whether a file's content is meant as a registry rather than a job file: a list, one
    registry dataset (it has `tasks`), or an object holding registry datasets under `datasets`
    and no `agents` (a job's datasets name paths or registries, never tasks)."""
    if isinstance(data, list):
        return True
    if not isinstance(data, dict) or "agents" in data:
        return False
    return "tasks" in data or _registry_datasets(data.get("datasets"))


def _registry_datasets(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "tasks" in item for item in value)
    )


def parse_registry(data: Any, source: str) -> Registry:
    """Validate registry.json content; problems name `source` and the index, e.g. [1].tasks[0]."""
    if not isinstance(data, list):
        raise InvalidInput.one(source, None, _not_a_list(data))
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


def _not_a_list(data: Any) -> str:
    """What is wrong with a registry that is not a list, in the user's terms."""
    lead = "a registry is a JSON list of datasets, and this is"
    if isinstance(data, dict) and "tasks" in data:
        return f"{lead} one dataset (name, version, tasks) on its own: put it in a list, [{{...}}]"
    if isinstance(data, dict) and _registry_datasets(data.get("datasets")):
        return (
            f"{lead} an object with that list under `datasets` (and no agents, so it is no job "
            "file either): make the list itself the file's content"
        )
    found = "an object" if isinstance(data, dict) else type(data).__name__
    return f"must be a JSON list of datasets, found {found}"


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


def _describe_datasets(datasets: list[RegistryDataset]) -> str:
    versions: dict[str, list[str]] = {}
    for dataset in datasets:
        versions.setdefault(dataset.name, []).append(dataset.version)
    return "; ".join(f"{name!r} (versions {', '.join(v)})" for name, v in versions.items())
