"""The benchmark workspace: datasets pulled into the user's cache, ready to run offline.

It lives in the rollout cache directory (`rollout.cli.prepare.cache_dir`: $ROLLOUT_CACHE_DIR,
else $XDG_CACHE_HOME/rollout, else ~/.cache/rollout; `--cache-dir` overrides it), beside the git
checkouts that `rollout run` makes of registry datasets::

    <cache>/
      git/                                 registry repositories, one tree per commit (shared)
      benchmarks/
        datasets/<name>@<version>/
          pulled.json                      what was pulled, from where, when, how many tasks
          dataset/                         the dataset itself: a job's `path` can name it
        jobs/<job>.yaml                    the job files `rollout benchmarks run` made

A registry dataset's tasks are fetched with git (`rollout.datasets.registry`) and copied into
`dataset/`, in registry order, with a dataset.toml that names the dataset and lists them; a
registry task missing from its repository stays listed, so that it is `task_not_found` when it
runs, as it would be from the registry. A local dataset (a directory of tasks, a data dataset, a
single task directory, a .jsonl or .json file of rows) is copied as it is, with its name written
into its dataset.toml; its version is `local`.

Each dataset is made in a hidden directory beside the others and renamed into place, so a
dataset that is there is complete: a pull that fails or is interrupted leaves nothing to list.
A pull of what is already there does nothing (for a local dataset: when its content is the same).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from rollout.api.dataset import (
    DATA_DIR,
    DATASET_TOML,
    Dataset,
    Registry,
    RegistryDataset,
    find_registry_dataset,
    load_dataset_path,
)
from rollout.api.errors import InvalidInput, Problem
from rollout.api.layout import check_component
from rollout.api.manifest import manifest_digest
from rollout.api.rows import ROW_SUFFIXES
from rollout.api.taskdir import TASK_TOML
from rollout.cli import config
from rollout.cli.errors import CliError
from rollout.cli.prepare import cache_dir
from rollout.datasets.bundle import build_manifest
from rollout.datasets.registry import fetch_registry_dataset, load_registry

DEFAULT_REGISTRY = (
    "https://raw.githubusercontent.com/laude-institute/harbor/refs/heads/main/registry.json"
)
"""The public registry (seed 000's), when nothing names another."""
ENV_REGISTRY = "ROLLOUT_REGISTRY"
CONFIG_REGISTRY_KEY = "registry"
LOCAL_VERSION = "local"
"""The version of a dataset pulled from a local path."""
RECORD = "pulled.json"
DATASET_DIR = "dataset"
_IGNORED = shutil.ignore_patterns(".git")

Source = Literal["registry", "local"]


class PulledRecord(BaseModel):
    """`pulled.json`: a pulled dataset, as `rollout benchmarks list` shows it."""

    model_config = ConfigDict(extra="ignore")

    name: str
    version: str
    source: Source
    origin: str
    """The registry (path or URL) or the local path it was pulled from."""
    tasks: int
    """Tasks, or rows for a data dataset."""
    rows: bool = False
    """A data dataset: `tasks` counts rows."""
    digest: str | None = None
    """A local dataset's content address when it was pulled: a pull of the same content is a
    no-op, of other content needs --force."""
    pulled_at: datetime


@dataclass(frozen=True)
class Pulled:
    """A dataset in the workspace."""

    record: PulledRecord
    path: Path
    """The dataset directory (what a job's `path` names)."""

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def version(self) -> str:
        return self.record.version

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    def size(self) -> str:
        """`20 rows`, `1 task`."""
        count = self.record.tasks
        unit = "row" if self.record.rows else "task"
        return f"{count} {unit}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class RegistryChoice:
    """Which registry.json to read, and what chose it (for messages)."""

    location: str | Path
    chosen_by: str

    def __str__(self) -> str:
        return str(self.location)


def choose_registry(flag: str | None, environ: Mapping[str, str]) -> RegistryChoice:
    """`--registry`, else $ROLLOUT_REGISTRY, else the config file's `registry` key, else the
    public registry. A path is relative to the working directory, or in the config file to the
    file's directory."""
    if flag and flag.strip():
        return RegistryChoice(_location(flag.strip(), Path.cwd()), "--registry")
    if named := environ.get(ENV_REGISTRY, "").strip():
        return RegistryChoice(_location(named, Path.cwd()), f"${ENV_REGISTRY}")
    path, _ = config.config_path(environ)
    if value := _config_registry(path):
        return RegistryChoice(_location(value, path.parent), f"{path} ({CONFIG_REGISTRY_KEY})")
    return RegistryChoice(DEFAULT_REGISTRY, "the default")


def _location(text: str, base: Path) -> str | Path:
    if urllib.parse.urlsplit(text).scheme in ("http", "https"):
        return text
    return base / Path(text).expanduser()


def _config_registry(path: Path) -> str | None:
    """The config file's `registry` key; None without a file or the key. Only this key is read
    here (the file's other keys are `rollout.cli.config`'s)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err}") from None
    except yaml.YAMLError as err:
        raise InvalidInput.one(path, None, f"invalid YAML: {err}") from None
    if not isinstance(data, Mapping) or data.get(CONFIG_REGISTRY_KEY) is None:
        return None
    value = data[CONFIG_REGISTRY_KEY]
    if not isinstance(value, str) or not value.strip():
        message = "must be the path or http(s) URL of a registry.json"
        raise InvalidInput.one(path, CONFIG_REGISTRY_KEY, message)
    return value.strip()


def read_registry(choice: RegistryChoice) -> Registry:
    return load_registry(choice.location)


# --- the workspace ----------------------------------------------------------------------------


class Workspace:
    """The benchmark workspace in a cache directory (see the module docstring)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache.absolute()
        self.root = self.cache / "benchmarks"
        self.datasets_dir = self.root / "datasets"
        self.jobs_dir = self.root / "jobs"

    @classmethod
    def of(cls, flag: Path | None, environ: Mapping[str, str]) -> Workspace:
        return cls(flag.expanduser() if flag is not None else cache_dir(environ))

    @property
    def git_cache(self) -> Path:
        return self.cache / "git"

    def entry_dir(self, name: str, version: str) -> Path:
        return self.datasets_dir / _entry_name(name, version)

    def pulled(self) -> list[Pulled]:
        """Every dataset in the workspace, by name and version; a directory whose record
        cannot be read is skipped (it is not one of ours)."""
        if not self.datasets_dir.is_dir():
            return []
        found = []
        for entry in self.datasets_dir.iterdir():
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            if (pulled := self._read(entry)) is not None:
                found.append(pulled)
        return sorted(found, key=lambda p: (p.name, p.version))

    def find(self, name: str, version: str | None) -> list[Pulled]:
        """The pulled datasets named `name` (at `version`, when given)."""
        return [
            p for p in self.pulled() if p.name == name and (version is None or p.version == version)
        ]

    def _read(self, entry: Path) -> Pulled | None:
        try:
            record = PulledRecord.model_validate_json((entry / RECORD).read_bytes())
        except (OSError, ValidationError):
            return None
        dataset = entry / DATASET_DIR
        return Pulled(record, dataset) if dataset.is_dir() else None

    # --- pulling ------------------------------------------------------------------------------

    def pull_registry(
        self, registry: Registry, name: str, version: str | None, *, force: bool = False
    ) -> tuple[Pulled, bool]:
        """The registry's dataset `name` (at `version`; without one, the only one there is),
        fetched into the workspace; (it, whether anything was pulled)."""
        entry = find_registry_dataset(registry, name, version)
        target = self.entry_dir(entry.name, entry.version)
        existing = self._read(target)
        if existing is not None and not force:
            return existing, False
        _check_task_names(entry, registry.source)
        dataset = fetch_registry_dataset(entry, self.git_cache)
        with self._staging() as stage:
            root = stage / DATASET_DIR
            root.mkdir()
            lines = [f"name = {_toml(entry.name)}"]
            if entry.description:
                lines.append(f"description = {_toml(entry.description)}")
            for task in dataset.tasks:
                relative = f"tasks/{task.name}"
                if task.path.is_dir():  # else task_not_found: listed, and not there
                    shutil.copytree(task.path, root / relative, symlinks=True, ignore=_IGNORED)
                lines += [
                    "",
                    "[[tasks]]",
                    f"path = {_toml(relative)}",
                    f"name = {_toml(task.name)}",
                ]
            (root / DATASET_TOML).write_text("\n".join(lines) + "\n", encoding="utf-8")
            copy = load_dataset_path(root)
            record = PulledRecord(
                name=entry.name,
                version=entry.version,
                source="registry",
                origin=registry.source,
                tasks=len(copy.tasks),
                pulled_at=datetime.now(UTC),
            )
            return self._place(stage, record, target, replace=force)

    def pull_local(self, path: Path, *, force: bool = False) -> tuple[Pulled, bool]:
        """A local dataset copied into the workspace under its name, version `local`."""
        source = path.expanduser().absolute()
        dataset = load_dataset_path(source)
        digest = manifest_digest(build_manifest(dataset))
        target = self.entry_dir(dataset.name, LOCAL_VERSION)
        existing = self._read(target)
        if existing is not None and not force:
            if existing.record.digest == digest:
                return existing, False
            raise CliError(
                f"{existing.label} is already pulled (from {existing.record.origin}, "
                f"{existing.record.pulled_at:%Y-%m-%d %H:%M} UTC) and {source} differs from it: "
                "pass --force to replace it"
            )
        with self._staging() as stage:
            root = stage / DATASET_DIR
            _copy_dataset(source, dataset, root)
            copy = load_dataset_path(root)
            _same_shape(dataset, copy, source)
            rows = copy.rows is not None
            record = PulledRecord(
                name=dataset.name,
                version=LOCAL_VERSION,
                source="local",
                origin=str(source),
                tasks=len(copy.rows.rows) if copy.rows is not None else len(copy.tasks),
                rows=rows,
                digest=digest,
                pulled_at=datetime.now(UTC),
            )
            return self._place(stage, record, target, replace=force)

    @contextmanager
    def _staging(self) -> Iterator[Path]:
        """A hidden directory beside the datasets, removed at the end whatever happens."""
        self.datasets_dir.mkdir(parents=True, exist_ok=True)
        stage = self.datasets_dir / f".tmp-{uuid.uuid4().hex}"
        stage.mkdir()
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _place(
        self, stage: Path, record: PulledRecord, target: Path, *, replace: bool
    ) -> tuple[Pulled, bool]:
        """Rename the staged dataset into place: all of it appears at once, or none of it."""
        (stage / RECORD).write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
        old = None
        if replace and target.exists():
            old = target.with_name(f".old-{uuid.uuid4().hex}")
            target.rename(old)
        try:
            stage.rename(target)
        except OSError:
            if old is not None:
                old.rename(target)
            existing = self._read(target)
            if existing is None:  # not another pull of the same that finished first
                raise
            return existing, False
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        pulled = self._read(target)
        assert pulled is not None
        return pulled, True


def _entry_name(name: str, version: str) -> str:
    """`<name>@<version>`, each quoted to one safe path segment."""
    safe = " -_.+,()[]="
    return f"{urllib.parse.quote(name, safe=safe)}@{urllib.parse.quote(version, safe=safe)}"


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def _check_task_names(entry: RegistryDataset, source: str) -> None:
    problems = []
    for index, task in enumerate(entry.tasks):
        try:
            check_component(task.name, "task name")
        except ValueError as err:
            problems.append(Problem(source, f"tasks[{index}].name", str(err)))
    if problems:
        raise InvalidInput(problems)


def _copy_dataset(source: Path, dataset: Dataset, root: Path) -> None:
    """Copy a loaded local dataset into `root` so that it loads the same, under its name."""
    if source.is_file():  # a bare .jsonl or .json file of rows: data/<its name>
        assert source.suffix in ROW_SUFFIXES
        (root / DATA_DIR).mkdir(parents=True)
        shutil.copyfile(source, root / DATA_DIR / source.name)
        (root / DATASET_TOML).write_text(f"name = {_toml(dataset.name)}\n", encoding="utf-8")
        return
    if (source / TASK_TOML).exists():  # a single task directory: a dataset of that one task
        root.mkdir()
        (task,) = dataset.tasks
        shutil.copytree(source, root / task.name, symlinks=True, ignore=_IGNORED)
        (root / DATASET_TOML).write_text(f"name = {_toml(dataset.name)}\n", encoding="utf-8")
        return
    root.mkdir()
    for child in sorted(source.iterdir()):
        if child.name == ".git":
            continue
        if child.is_dir():  # a linked task directory is copied, not linked
            shutil.copytree(child, root / child.name, symlinks=True, ignore=_IGNORED)
        elif child.is_symlink() and not child.exists():
            os.symlink(os.readlink(child), root / child.name)  # task_not_found, as it was
        else:
            shutil.copyfile(child, root / child.name)
    toml = root / DATASET_TOML
    if dataset.config.name is None:  # named by its directory, which is not the copy's name
        text = toml.read_text(encoding="utf-8") if toml.exists() else ""
        toml.write_text(f"name = {_toml(dataset.name)}\n{text}", encoding="utf-8")


def _same_shape(original: Dataset, copy: Dataset, source: Path) -> None:
    """The copy loads as the original did: same name, same tasks (broken or not) or rows."""
    same = copy.name == original.name and (
        [(t.name, type(t)) for t in copy.tasks] == [(t.name, type(t)) for t in original.tasks]
    )
    if original.rows is not None:
        same = same and copy.rows is not None and len(copy.rows.rows) == len(original.rows.rows)
    if not same:
        raise CliError(
            f"{source} does not load the same once copied (a symbolic link to outside the "
            "dataset?): its tasks would differ, so it was not pulled"
        )


def parse_reference(text: str) -> tuple[str, str | None]:
    """`NAME[@VERSION]` as (name, version)."""
    name, at, version = text.rpartition("@")
    if not at:
        return text, None
    if not name or not version:
        raise ValueError(f"{text!r} is not NAME or NAME@VERSION")
    return name, version


def looks_like_path(text: str) -> bool:
    """Whether a benchmark argument names a local dataset rather than a registry dataset: it
    has a slash, starts with `.` or `~`, or ends with .jsonl or .json (`./arith`, not `arith`)."""
    return (
        "/" in text
        or os.sep in text
        or text.startswith((".", "~"))
        or Path(text).suffix in ROW_SUFFIXES
    )
