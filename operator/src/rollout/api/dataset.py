"""Datasets: what a job's `path` names (seed 004's two shapes), or a dataset in a registry.json.

A job's `path` is loaded by `load_dataset_path`, which tells the shapes apart:

- Shape B, task per directory: a directory whose subdirectories are tasks, in name order (trials
  are enumerated in dataset order, so the order must not depend on the file system); hidden
  entries, plain files (README.md, ...) and subdirectories with nothing of a task in them are
  ignored. A dataset.toml listing `[[tasks]]` (each a `path` relative to the dataset and an
  optional `name`) gives the tasks and their order instead. A single task directory (task.toml at
  its root) is a dataset of that one task, named after the directory.
- Shape A, rows sharing one verifier: a directory with `data/<split>.jsonl` (or `.json`), or a
  bare .jsonl or .json file of rows (`rollout.api.rows`). Its tasks are rows, not directories, so
  the dataset's `tasks` is empty and its `rows` holds them, with the shared config and verifier.

dataset.toml (seed 004) is optional and holds what every task shares: `name`, `description`,
`split`/`default_split`, `instruction_field`, `metadata_fields`, `category`, `[[tasks]]`, and
`[verifier]`, `[agent]` and `[environment]` with task.toml's keys, which are the defaults every
task inherits (task.toml wins); `[verifier]` may also declare the shared verifier, `metric =
"<metric>"` or `python = "<file in the dataset>"`, resolved as `rollout.api.verifiers` says. Other
keys are kept as written.

A broken task does not sink its dataset: it is kept in its place as a `BrokenTask`
(task_invalid; task_not_found for an entry that is a symbolic link to nothing, or a listed task
that is not there), and its trials fail with its error while the other tasks run. A broken row
does sink its dataset: rows are checked at once, cheaply, and every problem is reported together.

A registry.json lists datasets whose tasks live in git repositories. Here are its models and the
lookup of a dataset by name and version; reading one from a URL and fetching its tasks with git
is `rollout.datasets.registry`'s.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator

from rollout.api.base import OpenFileModel
from rollout.api.errors import InvalidInput, Problem
from rollout.api.layout import check_component
from rollout.api.problems import problems_from_validation_error
from rollout.api.rows import ROW_SUFFIXES, DataRow, parse_rows, read_row_records
from rollout.api.task import TaskConfig, parse_task_config
from rollout.api.taskdir import (
    DEFAULT_TABLES,
    TASK_SHAPE,
    TASK_TOML,
    TEST_SCRIPT,
    BrokenTask,
    Task,
    load_task_or_broken,
    looks_like_task,
    read_instruction_text,
)
from rollout.api.verifiers import (
    DEFAULT_METRIC,
    PYTHON_VERIFIER,
    Metric,
    VerifierChoice,
    VerifierSource,
)

DATASET_TOML = "dataset.toml"
DATA_DIR = "data"
"""Shape A's rows: data/<split>.jsonl or data/<split>.json."""
TEMPLATE = "instruction.md.tpl"
"""Shape A's instruction template, at the dataset's root (`rollout.api.rowtemplate`)."""
DEFAULT_SPLIT = "test"
"""The split taken when data/ has several and nothing says which."""
VERIFIER_DECLARATIONS = ("metric", "python")
"""The keys of dataset.toml's [verifier] that declare the verifier rather than configure it."""
_DEFAULT_VERIFIER = VerifierChoice.of_metric(DEFAULT_METRIC, VerifierSource.DEFAULT)
DATASET_SHAPES = (
    "a dataset is a directory of task directories, a directory with data/<split>.jsonl rows, a "
    "single task directory, or a .jsonl or .json file of rows"
)


class DatasetTaskEntry(OpenFileModel):
    """One `[[tasks]]` entry of dataset.toml: a task directory of the dataset, in trial order."""

    path: str = Field(min_length=1, description="The task directory, relative to the dataset.")
    name: str | None = Field(None, description="Its name in results (default: its directory's).")

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        pure = PurePosixPath(value)
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise ValueError(f"{value!r} must be a relative path to a directory inside the dataset")
        return value

    @field_validator("name")
    @classmethod
    def _one_segment(cls, value: str | None) -> str | None:
        return None if value is None else check_component(value, "task name")

    @property
    def task_name(self) -> str:
        return self.name or PurePosixPath(self.path).name


class DatasetConfig(OpenFileModel):
    """dataset.toml (seed 004): what every task of the dataset shares. Other keys are kept."""

    name: str | None = Field(None, min_length=1, description="The dataset's name in results.")
    description: str | None = None
    split: str | None = Field(None, min_length=1, description="Shape A: the rows to run.")
    default_split: str | None = Field(None, min_length=1, description="Another name for split.")
    instruction_field: str | None = Field(
        None, min_length=1, description="Shape A: the row field the agent is shown."
    )
    metadata_fields: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="Shape A: the row fields a verifier gets (default: the whole row)."
    )
    category: str | None = Field(None, description="What kind of benchmark, e.g. 'math'.")
    verifier: dict[str, Any] = Field(
        default_factory=dict,
        description="The shared verifier (`metric` or `python`) and task.toml's [verifier] keys.",
    )
    agent: dict[str, Any] = Field(default_factory=dict, description="task.toml's [agent] keys.")
    environment: dict[str, Any] = Field(
        default_factory=dict, description="task.toml's [environment] keys."
    )
    tasks: list[DatasetTaskEntry] | None = Field(
        None, description="Shape B: the task directories, in trial order (default: all, by name)."
    )

    def task_defaults(self) -> dict[str, Any]:
        """The tables every task inherits, as task.toml would hold them (without the verifier's
        declaration, which is not a task.toml key of its own)."""
        tables = {
            "verifier": {k: v for k, v in self.verifier.items() if k not in VERIFIER_DECLARATIONS},
            "agent": self.agent,
            "environment": self.environment,
        }
        return {name: tables[name] for name in DEFAULT_TABLES if tables[name]}


@dataclass(frozen=True)
class DataRows:
    """A data dataset's rows and what they share (seed 004, Shape A)."""

    rows: list[DataRow]
    split: str
    data_file: Path
    """The .jsonl or .json file the rows came from."""
    root: Path
    """The dataset directory (where a Python verifier's files are), or a bare file's parent."""
    config: TaskConfig
    """dataset.toml's [verifier], [agent] and [environment] as a task.toml: timeouts, resources,
    docker_image; the defaults when there are none."""
    verifier: VerifierChoice
    """The shared verifier: dataset.toml's, else what the files show, else exact_match."""


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: its name in result paths, its tasks in trial order, and its origin."""

    name: str
    tasks: list[Task | BrokenTask]
    """Every task in trial order, the broken ones in their places; empty for a data dataset."""
    source: str
    """Where the dataset came from, for people: a directory, a file, or a registry entry."""
    version: str | None = None
    config: DatasetConfig = field(default_factory=DatasetConfig)
    rows: DataRows | None = None
    """A data dataset's rows (Shape A); None for a dataset of tasks."""

    @property
    def broken(self) -> list[BrokenTask]:
        """The tasks that cannot run (their trials fail at creation)."""
        return [task for task in self.tasks if isinstance(task, BrokenTask)]

    def problems(self) -> list[Problem]:
        """Every problem of every broken task, as `rollout validate DATASET` reports them (a
        data dataset has none: a broken row stops it from loading)."""
        return [problem for task in self.broken for problem in task.problems]


# --- Local datasets -------------------------------------------------------------------------


def load_dataset_path(path: str | Path, *, split: str | None = None) -> Dataset:
    """Load what a job's `path` names, whichever shape it is (see the module's docstring).

    `split` chooses a data dataset's rows (data/<split>.jsonl); default: dataset.toml's
    `split` (or `default_split`), else data/'s only file, else `test`. A dataset of tasks has no
    splits, so a `split` for one is refused.

    Raises InvalidInput with every problem found of what sinks the whole dataset: nothing at
    `path`, a broken dataset.toml or instruction template, a bad row, an unknown split, no tasks
    at all. A broken task is kept as a `BrokenTask` instead."""
    root = Path(path).absolute()
    if not os.path.lexists(root) or (root.is_symlink() and not root.exists()):
        what = "rows file" if root.suffix in ROW_SUFFIXES else "dataset directory"
        raise InvalidInput.one(root, None, f"{what} does not exist")
    if root.is_file() and root.suffix in ROW_SUFFIXES:
        return _load_rows_file(root, split)
    if not root.is_dir():
        raise InvalidInput.one(
            root, None, f"is not a directory, nor a .jsonl or .json file ({DATASET_SHAPES})"
        )
    problems: list[Problem] = []
    toml = root / DATASET_TOML
    config = _read_dataset_toml(toml, problems)
    if problems:
        raise InvalidInput(problems)  # the rest depends on what it says
    defaults = config.task_defaults()
    task_config = _defaults_config(defaults, toml, problems)
    declared = _declared_verifier(config, root, toml, problems)
    splits = _split_files(root / DATA_DIR)
    if (root / TASK_TOML).exists():
        _no_split(root, split, "a single task directory", problems)
        _not_listed(config, toml, "is a single task directory (task.toml at its root)", problems)
        tasks = [load_task_or_broken(root, defaults=defaults)]
        return _task_dataset(root, config, tasks, f"task directory {root}", problems)
    if splits:
        return _load_rows_directory(root, config, split, splits, task_config, declared, problems)
    _no_split(root, split, "a dataset of task directories", problems)
    if config.tasks is not None:
        tasks = _listed_tasks(root, config.tasks, toml, defaults, problems)
        if not config.tasks:
            problems.append(Problem(str(toml), "tasks", "lists no tasks"))
        return _task_dataset(root, config, tasks, f"directory {root}", problems)
    tasks = [load_task_or_broken(child, defaults=defaults) for child in _task_children(root)]
    if not tasks and not problems:
        problems.append(Problem(str(root), None, _no_tasks_message(root)))
    return _task_dataset(root, config, tasks, f"directory {root}", problems)


def load_local_dataset(path: str | Path, *, split: str | None = None) -> Dataset:
    """A local dataset, whichever shape: the same as `load_dataset_path` (its older name)."""
    return load_dataset_path(path, split=split)


def _task_children(root: Path) -> list[Path]:
    """The subdirectories that are tasks (or meant to be), in name order, bytewise."""
    return [
        child
        for child in sorted(root.iterdir(), key=lambda p: os.fsencode(p.name))
        if not child.name.startswith(".") and (looks_like_task(child) or _dangling_link(child))
    ]


def _task_dataset(
    root: Path,
    config: DatasetConfig,
    tasks: list[Task | BrokenTask],
    source: str,
    problems: list[Problem],
) -> Dataset:
    declared = [key for key in VERIFIER_DECLARATIONS if key in config.verifier]
    if declared:
        # Never ignored in silence: the tasks would be verified otherwise than the file says.
        problems.append(
            Problem(
                str(root / DATASET_TOML),
                f"verifier.{declared[0]}",
                "declares the shared verifier of data rows (data/<split>.jsonl); the tasks of a "
                f"dataset of task directories are verified each by its own {TEST_SCRIPT} or "
                f"Python verifier ({PYTHON_VERIFIER}, or [verifier] python in its task.toml)",
            )
        )
    if problems:
        raise InvalidInput(problems)
    return Dataset(
        name=config.name or _directory_name(root), tasks=tasks, source=source, config=config
    )


def _listed_tasks(
    root: Path,
    entries: list[DatasetTaskEntry],
    toml: Path,
    defaults: dict[str, Any],
    problems: list[Problem],
) -> list[Task | BrokenTask]:
    """dataset.toml's `[[tasks]]`, in its order; a listed task that is not there is broken
    (task_not_found), as a registry's would be."""
    first: dict[str, int] = {}
    for index, entry in enumerate(entries):
        name = entry.task_name
        try:
            check_component(name, "task name")
        except ValueError as err:
            problems.append(Problem(str(toml), f"tasks[{index}].path", f"{err}: give a `name`"))
            continue
        seen = first.setdefault(name, index)
        if seen != index:
            message = f"task name {name!r} is also tasks[{seen}]'s: their trials would collide"
            problems.append(Problem(str(toml), f"tasks[{index}]", message))
    if problems:
        return []
    return [
        load_task_or_broken(root / entry.path, name=entry.task_name, defaults=defaults)
        for entry in entries
    ]


def _load_rows_directory(
    root: Path,
    config: DatasetConfig,
    split: str | None,
    splits: dict[str, list[Path]],
    task_config: TaskConfig,
    declared: VerifierChoice | None,
    problems: list[Problem],
) -> Dataset:
    """Shape A: data/<split>.jsonl rows, shared config and verifier, optional template."""
    toml = root / DATASET_TOML
    if config.tasks is not None:
        message = f"lists tasks, and {DATA_DIR}/ holds rows: a dataset is one or the other"
        problems.append(Problem(str(toml), "tasks", message))
    if tasks := [c.name for c in _task_children(root) if c.name != DATA_DIR]:
        message = (
            f"holds rows in {DATA_DIR}/ and task directories ({', '.join(tasks[:5])}): a dataset "
            "is one or the other"
        )
        problems.append(Problem(str(root), None, message))
    chosen = _choose_split(root, config, split, splits, problems)
    template = _read_template(root / TEMPLATE, problems)
    declares = any(key in config.verifier for key in VERIFIER_DECLARATIONS)
    verifier = declared or (_DEFAULT_VERIFIER if declares else _verifier_from_files(root, problems))
    rows: list[DataRow] = []
    if chosen is not None:
        name, data_file = chosen
        rows = _rows(data_file, template, config, toml, problems)
    if problems or chosen is None:
        raise InvalidInput(problems)
    return Dataset(
        name=config.name or _directory_name(root),
        tasks=[],
        source=f"directory {root}",
        config=config,
        rows=DataRows(rows, name, data_file, root, task_config, verifier),
    )


def _load_rows_file(path: Path, split: str | None) -> Dataset:
    """A bare .jsonl or .json file: rows with the default config and verifier, named by it."""
    problems: list[Problem] = []
    if split is not None and split != path.stem:
        message = (
            f"is a file of rows, which has no splits to choose {split!r} from: name a dataset "
            f"directory with {DATA_DIR}/{split}.jsonl, or the file of that split"
        )
        problems.append(Problem(str(path), None, message))
    rows = _rows(path, None, DatasetConfig(), None, problems)
    if problems:
        raise InvalidInput(problems)
    return Dataset(
        name=path.stem,
        tasks=[],
        source=f"file {path}",
        rows=DataRows(rows, path.stem, path, path.parent, TaskConfig(), _DEFAULT_VERIFIER),
    )


def _rows(
    data_file: Path,
    template: str | None,
    config: DatasetConfig,
    toml: Path | None,
    problems: list[Problem],
) -> list[DataRow]:
    try:
        rows = parse_rows(
            read_row_records(data_file),
            file=str(data_file),
            template=template,
            instruction_field=config.instruction_field,
            metadata_fields=config.metadata_fields,
            template_file=TEMPLATE,
            config_file=None if toml is None else str(toml),
        )
    except InvalidInput as err:
        problems.extend(err.problems)
        return []
    if not rows:
        problems.append(Problem(str(data_file), None, "has no rows: a data dataset needs some"))
    return rows


def _split_files(data: Path) -> dict[str, list[Path]]:
    """data/'s rows files by split (file stem); a split may wrongly have both suffixes."""
    if not data.is_dir():
        return {}
    splits: dict[str, list[Path]] = {}
    for child in sorted(data.iterdir(), key=lambda p: os.fsencode(p.name)):
        if not child.name.startswith(".") and child.suffix in ROW_SUFFIXES and child.is_file():
            splits.setdefault(child.stem, []).append(child)
    return splits


def _choose_split(
    root: Path,
    config: DatasetConfig,
    split: str | None,
    splits: dict[str, list[Path]],
    problems: list[Problem],
) -> tuple[str, Path] | None:
    """The split to run and its file: the one asked for, else dataset.toml's, else data/'s
    only one, else `test`."""
    toml = root / DATASET_TOML
    data = root / DATA_DIR
    if config.split and config.default_split and config.split != config.default_split:
        message = (
            f"{config.default_split!r} disagrees with split = {config.split!r}; they are two "
            "names for one setting, so set only one"
        )
        problems.append(Problem(str(toml), "default_split", message))
        return None
    named = ", ".join(splits)
    wanted, said = split, "the split asked for"
    if wanted is None and (config.split or config.default_split):
        wanted = config.split or config.default_split
        said = f"{DATASET_TOML}'s {'split' if config.split else 'default_split'}"
    if wanted is None:
        if len(splits) == 1:
            wanted = next(iter(splits))
        elif DEFAULT_SPLIT in splits:
            wanted = DEFAULT_SPLIT
        else:
            message = (
                f"holds several splits ({named}) and none is {DEFAULT_SPLIT!r}: say which to "
                f"run (`split` in {DATASET_TOML}, or the job's split)"
            )
            problems.append(Problem(str(data), None, message))
            return None
    files = splits.get(wanted)
    if files is None:
        message = (
            f"has no split {wanted!r} ({said}): no {wanted}.jsonl or {wanted}.json; its splits: "
            f"{named}"
        )
        problems.append(Problem(str(data), None, message))
        return None
    if len(files) > 1:
        message = f"holds split {wanted!r} twice, as {' and '.join(f.name for f in files)}"
        problems.append(Problem(str(data), None, message + ": keep one"))
        return None
    return wanted, files[0]


def _read_template(path: Path, problems: list[Problem]) -> str | None:
    if not os.path.lexists(path):
        return None
    return read_instruction_text(path, problems)


def _defaults_config(defaults: dict[str, Any], toml: Path, problems: list[Problem]) -> TaskConfig:
    """dataset.toml's task defaults checked as a task.toml, so that a bad default is reported
    once, as dataset.toml's, rather than as every task's."""
    try:
        return parse_task_config(defaults, toml)
    except InvalidInput as err:
        problems.extend(err.problems)
        return TaskConfig()


def _declared_verifier(
    config: DatasetConfig, root: Path, toml: Path, problems: list[Problem]
) -> VerifierChoice | None:
    """dataset.toml's [verifier] `metric` or `python`, checked; None when it declares neither."""
    metric = config.verifier.get("metric")
    python = config.verifier.get("python")
    if metric is not None and python is not None:
        message = "declares both `metric` and `python`: a dataset shares one verifier, keep one"
        problems.append(Problem(str(toml), "verifier", message))
        return None
    source = VerifierSource.DATASET
    if metric is not None:
        known = [m.value for m in Metric]
        if metric not in known:
            message = f"unknown metric {metric!r}; the metrics are: {', '.join(known)}"
            problems.append(Problem(str(toml), "verifier.metric", message))
            return None
        return VerifierChoice.of_metric(metric, source)
    if python is not None:
        script = _verifier_script(python, root, toml, problems)
        return None if script is None else VerifierChoice.of_python(script, source)
    return None


def _verifier_script(value: Any, root: Path, toml: Path, problems: list[Problem]) -> str | None:
    """A `python` verifier's file, relative to the dataset, as a POSIX path."""
    where = "verifier.python"
    if not isinstance(value, str) or not value.strip():
        problems.append(Problem(str(toml), where, "must be the path of a Python file"))
        return None
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts or "\\" in value:
        message = f"{value!r} must be a relative path to a file inside the dataset"
        problems.append(Problem(str(toml), where, message))
        return None
    if not (root / pure).is_file():
        message = f"{value!r} is not a file of the dataset ({root / pure} does not exist)"
        problems.append(Problem(str(toml), where, message))
        return None
    return pure.as_posix()


def _verifier_from_files(root: Path, problems: list[Problem]) -> VerifierChoice:
    """What a data dataset's files show (`rollout.api.verifiers`, step 4): tests/evaluate.py is
    the Python verifier, else answers are compared by exact_match. Rows are scored by a metric
    or a Python verifier only, so a tests/test.sh (a shell verifier, which runs in a task's
    sandbox) with neither is a problem rather than silently replaced by exact_match."""
    if (root / PYTHON_VERIFIER).is_file():
        return VerifierChoice.of_python(PYTHON_VERIFIER, VerifierSource.FILES)
    if os.path.lexists(root / TEST_SCRIPT):
        message = (
            "is a shell verifier, and the rows of a data dataset are scored by a metric or a "
            f"Python verifier: declare [verifier] metric or python in {DATASET_TOML}, or add "
            f"{PYTHON_VERIFIER}"
        )
        problems.append(Problem(str(root / TEST_SCRIPT), None, message))
    return _DEFAULT_VERIFIER


def _no_split(root: Path, split: str | None, what: str, problems: list[Problem]) -> None:
    if split is not None:
        message = (
            f"is {what}, which has no splits: split {split!r} is for a dataset with "
            f"{DATA_DIR}/<split>.jsonl rows"
        )
        problems.append(Problem(str(root), None, message))


def _not_listed(config: DatasetConfig, toml: Path, what: str, problems: list[Problem]) -> None:
    if config.tasks is not None:
        message = f"lists tasks, but the directory {what}: drop one or the other"
        problems.append(Problem(str(toml), "tasks", message))


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
    if (root / DATA_DIR).is_dir():
        message += f"; nor does {DATA_DIR}/ hold rows (<split>.jsonl or <split>.json)"
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
