"""job.yaml / job.json: the `JobConfig` model, loading a job file, and `${VAR}` in agent env.

The model follows the seed's Job section key for key, with its defaults. Decisions the seed leaves
open, made here once:

- `name` defaults to the UTC time of loading as `YYYY-MM-DD__HH-mm-ss`. Job, agent and dataset
  names become directory names and object-storage key segments, so each must be one safe path
  segment (`rollout.api.layout.check_component`: not empty, ".", "..", no slash, backslash, NUL).
- `environment.type` is one of docker, kubernetes, modal, daytona, e2b; `k8s` is accepted and
  stored as `kubernetes`. `preserveEnv` keeps the seed's camelCase key (`preserve_env` is accepted
  too and written back as `preserveEnv`).
- `override_cpus/memory/storage` keep what was written (1, "2G"); a float such as 0.5 is kept as
  the string "0.5", since a Kubernetes quantity is an integer or a string. They are checked with
  the task.toml rules (`rollout.api.quantity`): a bare number of memory or storage means MiB.
- `verifier.override_timeout_sec` and `max_timeout_sec`: 0 or null both mean "not set" and are
  stored as None, so no caller can mistake 0 for a zero-second limit.
- `metrics` defaults to none (the job result's pass_rate and mean_reward are always there).
- Relative `datasets[].path` and `datasets[].registry.path` are relative to the directory of the
  job file: `load_job` turns them into absolute paths (a leading `~` is the home directory), so
  the job means the same thing from whatever directory `rollout` runs in. `jobs_dir` is an output
  directory and stays relative to the working directory, as the seed has it.
- Agent env values are strings. A value holding `${NAME}` takes its value from the environment
  of the process that submits the job (the CLI); anything else is literal. Only `${NAME}` with a
  name of letters, digits and underscores is a reference; `${...}` of any other shape is an error
  rather than a silently literal value. The model never holds a resolved value: config.json and
  the RolloutJob keep the `${VAR}` text, and resolved values exist only in `resolve_agent_env`'s
  result (the CLI puts them in a Secret).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rollout.api.base import FileModel
from rollout.api.errors import InvalidInput, Problem, field_path
from rollout.api.layout import check_component
from rollout.api.metrics import MetricType
from rollout.api.quantity import cpu_millicores, quantity_bytes

ORACLE_AGENT = "oracle"
"""The reserved agent name: runs the task's solution/solve.sh, needs no install or execute."""

DEFAULT_INSTRUCTION_PATH = "/tmp/instruction.md"
INSTRUCTION_ENV_VAR = "ROLLOUT_TASK_INSTRUCTION"
"""Set by Rollout to `instruction_path` for the agent; an agent's env may not set it."""

JOB_NAME_FORMAT = "%Y-%m-%d__%H-%M-%S"
JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""Environment variable names: POSIX shell names, so install and execute scripts can read them."""

_ENV_NAME = re.compile(ENV_NAME_PATTERN)
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_UNQUOTED_HINT = 'quote it in YAML, e.g. KEY: "4096"'


class EnvironmentType(StrEnum):
    """Where a trial's environment runs: `kubernetes` is a Pod (job.yaml's `docker` becomes one
    when the CLI submits the job to a cluster); modal, daytona and e2b are external providers,
    refused until a bridge controller for them exists."""

    DOCKER = "docker"
    KUBERNETES = "kubernetes"
    MODAL = "modal"
    DAYTONA = "daytona"
    E2B = "e2b"


ENVIRONMENT_TYPE_ALIASES = {"k8s": EnvironmentType.KUBERNETES}


class LogLevel(StrEnum):
    """Rollout's log level, as job.yaml spells it."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


# --- errors that name their own field ---------------------------------------------------------


class FieldErrors(ValueError):
    """Problems found by a validator that looks at several fields at once.

    Each error carries a field path relative to the model being validated (`[1].name`, `execute`,
    `env.KEY`), so that the report says `agents[1].name` rather than just `agents`. pydantic keeps
    the exception in the error's context, where `validation_problems` finds it.
    """

    def __init__(self, errors: Sequence[tuple[str | None, str]]) -> None:
        if not errors:
            raise ValueError("FieldErrors needs at least one error")
        self.errors = list(errors)
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in self.errors))


def join_field(base: str | None, relative: str | None) -> str | None:
    """`agents[1]` + `name` -> `agents[1].name`; `agents` + `[1]` -> `agents[1]`."""
    if not relative:
        return base
    if not base:
        return relative.removeprefix(".")
    if relative.startswith("["):
        return base + relative
    return f"{base}.{relative}"


def validation_problems(
    err: ValidationError, file: str | Path, model: type[BaseModel] | None = None
) -> list[Problem]:
    """pydantic's errors as Problems naming `file` and the field.

    Unlike `errors.problems_from_validation_error`, this expands `FieldErrors` into one problem
    per field and says "unknown key 'x'" (with a close match from `model`, when given) for keys
    the model does not have.
    """
    problems: list[Problem] = []
    for error in err.errors(include_url=False):
        loc = error["loc"]
        where = field_path(loc)
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, FieldErrors):
            for relative, message in cause.errors:
                problems.append(Problem(str(file), join_field(where, relative), message))
        elif error["type"] == "extra_forbidden":
            problems.append(Problem(str(file), where, _unknown_key_message(model, loc)))
        else:
            problems.append(Problem(str(file), where, error["msg"].removeprefix("Value error, ")))
    return problems


def _unknown_key_message(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> str:
    key = str(loc[-1])
    known = _known_keys(model, loc[:-1]) if model else []
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    listing = f"; known keys: {', '.join(known)}" if known else ""
    return f"unknown key {key!r}{listing}"


def _known_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model accepts at `loc` (walking nested models, lists and dicts)."""
    current: Any = model
    for part in loc:
        current = _nested_model(current, part)
        if current is None:
            return []
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    return [info.alias or name for name, info in current.model_fields.items()]


def _nested_model(current: Any, part: int | str) -> Any:
    if isinstance(part, int):
        return current  # an index into a list: the element type was taken with the field
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return None
    for name, info in current.model_fields.items():
        if part in (name, info.alias):
            return _element_model(info.annotation)
    return None


def _element_model(annotation: Any) -> Any:
    """The model inside `X`, `X | None`, `list[X]`, `dict[str, X]`, or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, dict, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _element_model(arg)
            if found is not None:
                return found
    return None


# --- shared rules (also used by the RolloutJob model) -------------------------------------------


def default_job_name(now: datetime | None = None) -> str:
    """The seed's default job name: `YYYY-MM-DD__HH-mm-ss`, in UTC."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime(JOB_NAME_FORMAT)


def check_name(value: str, what: str) -> str:
    """`value` if it can be a directory name and an object-storage key segment."""
    return check_component(value, what)


def check_instruction_path(value: str) -> str:
    """An absolute path of a file in the container."""
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path (e.g. /tmp/instruction.md)")
    if value.endswith("/") or "\0" in value:
        raise ValueError(f"{value!r} must be the path of a file")
    return value


def agent_problems(
    name: str, install: str | None, execute: str | None
) -> list[tuple[str | None, str]]:
    """The oracle rule: `oracle` has no scripts; every other agent has `execute`."""
    problems: list[tuple[str | None, str]] = []
    if name == ORACLE_AGENT:
        for field, script in (("install", install), ("execute", execute)):
            if script is not None:
                problems.append(
                    (
                        field,
                        f"the reserved agent {ORACLE_AGENT!r} runs the task's solution/solve.sh "
                        f"and takes no {field!r} script; remove it, or give this agent "
                        "another name",
                    )
                )
    elif execute is None or not execute.strip():
        problems.append(
            (
                "execute",
                f"agent {name!r} needs an 'execute' script (only the reserved agent "
                f"{ORACLE_AGENT!r} runs without one)",
            )
        )
    return problems


def duplicate_problems(
    names: Sequence[str], what: str, listed_as: str, field: str = "name"
) -> list[tuple[str | None, str]]:
    """`[i].<field>: duplicate <what> 'x' (also <listed_as>[j])` for each repeat, the field
    relative to the list."""
    first: dict[str, int] = {}
    problems: list[tuple[str | None, str]] = []
    for index, name in enumerate(names):
        if name in first:
            problems.append(
                (
                    f"[{index}].{field}",
                    f"duplicate {what} {name!r} (also {listed_as}[{first[name]}])",
                )
            )
        else:
            first[name] = index
    return problems


def env_references(value: str) -> list[str]:
    """The variable names `${NAME}` in `value`, in order, each once."""
    names: list[str] = []
    for match in _REFERENCE.finditer(value):
        if match[1] not in names:
            names.append(match[1])
    return names


def env_value_problem(value: str) -> str | None:
    """What is wrong with the `${...}` references of an env value, or None."""
    for match in _REFERENCE.finditer(value):
        if not _ENV_NAME.match(match[1]):
            return (
                f"unsupported reference {match[0]!r}: only ${{NAME}} is supported, NAME made of "
                "letters, digits and underscores"
            )
    if "${" in _REFERENCE.sub("", value):
        return "'${' without a closing '}'"
    return None


def env_key_problem(key: str) -> str | None:
    """What is wrong with an env variable name, or None."""
    if not _ENV_NAME.match(key):
        return f"{key!r} is not a valid environment variable name (letters, digits, underscores)"
    if key == INSTRUCTION_ENV_VAR:
        return f"{INSTRUCTION_ENV_VAR} is set by Rollout to instruction_path; set that instead"
    return None


def substitute(value: str, environ: Mapping[str, str]) -> str:
    """`value` with each `${NAME}` replaced from `environ` (every name must be there)."""
    return _REFERENCE.sub(lambda m: environ[m[1]], value)


def quantity_as_written(value: Any) -> Any:
    """An override as written, except that a float becomes a string (0.5 -> "0.5"): a Kubernetes
    quantity is an integer or a string."""
    _not_bool(value)
    if isinstance(value, float):
        return repr(value)
    return value


def check_cpus_override(value: int | str | None) -> int | str | None:
    """`override_cpus` checked with task.toml's rule for cpus."""
    if value is not None:
        cpu_millicores(value)
    return value


def check_bytes_override(value: int | str | None) -> int | str | None:
    """`override_memory`/`override_storage` checked with task.toml's rule (a bare number: MiB)."""
    if value is not None:
        quantity_bytes(value)
    return value


def zero_is_unset(value: float | None) -> float | None:
    """The seed's verifier timeouts: 0 means "not set", as null does."""
    return None if value == 0 else value


def _not_bool(value: Any) -> Any:
    # YAML's `yes`/`true` would otherwise pass as the number 1.
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


def _string(value: Any, hint: str = "quote it in YAML") -> Any:
    if value is not None and not isinstance(value, str):
        kind = "a number" if isinstance(value, int | float) else type(value).__name__
        raise ValueError(f"expected a string, got {kind} ({value!r}): {hint}")
    return value


PositiveInt = Annotated[int, Field(ge=1, strict=True)]
PositiveSeconds = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]


# --- the model ------------------------------------------------------------------------------------


class JobEnvironment(FileModel):
    """`environment`: where trials run and what of the task's environment to override."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, serialize_by_alias=True
    )

    type: EnvironmentType = Field(
        EnvironmentType.DOCKER,
        description="Environment provider: docker, kubernetes (or k8s), modal, daytona, e2b.",
    )
    force_build: bool = Field(
        False,
        strict=True,
        description="Bypass the image cache and build from environment/Dockerfile, even when "
        "the task names a docker_image.",
    )
    preserve_env: bool = Field(
        False,
        strict=True,
        alias="preserveEnv",
        description="Keep the environment after the trial instead of cleaning it up.",
    )
    override_cpus: int | str | None = Field(
        None, description="If set, overrides the task's environment.cpus (e.g. 1, '500m')."
    )
    override_memory: int | str | None = Field(
        None, description="If set, overrides the task's environment.memory (e.g. '2G')."
    )
    override_storage: int | str | None = Field(
        None, description="If set, overrides the task's environment.storage (e.g. '30G')."
    )

    @field_validator("type", mode="before")
    @classmethod
    def _normalise_type(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().lower()
            return ENVIRONMENT_TYPE_ALIASES.get(value, value)
        return value

    @field_validator("override_cpus", "override_memory", "override_storage", mode="before")
    @classmethod
    def _quantity_as_written(cls, value: Any) -> Any:
        return quantity_as_written(value)

    @field_validator("override_cpus")
    @classmethod
    def _check_cpus(cls, value: int | str | None) -> int | str | None:
        return check_cpus_override(value)

    @field_validator("override_memory", "override_storage")
    @classmethod
    def _check_bytes(cls, value: int | str | None) -> int | str | None:
        return check_bytes_override(value)


class JobVerifier(FileModel):
    """`verifier`: job-level verifier settings."""

    override_timeout_sec: PositiveSeconds | None = Field(
        None, description="If set (not 0 or null), replaces the task's verifier.timeout_sec."
    )
    max_timeout_sec: PositiveSeconds | None = Field(
        None, description="If set (not 0 or null), the ceiling of every verifier timeout."
    )
    disable: bool = Field(
        False, strict=True, description="Do not run the verifier (collect traces only)."
    )

    @field_validator("override_timeout_sec", "max_timeout_sec")
    @classmethod
    def _zero_is_unset(cls, value: float | None) -> float | None:
        return zero_is_unset(value)


class JobMetric(FileModel):
    """One entry of `metrics`."""

    type: MetricType = Field(description="One of sum, min, max, mean (over trial rewards).")


class JobAgent(FileModel):
    """One entry of `agents`."""

    name: str = Field(description="Agent name; also its results directory. 'oracle' is reserved.")
    description: str | None = Field(None, description="What the agent is.")
    install: str | None = Field(None, description="Bash script that installs the agent.")
    execute: str | None = Field(None, description="Bash script that runs the agent on the task.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment for install and execute; ${VAR} takes VAR from the submitter.",
    )

    @field_validator("name", "description", "install", "execute", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _string(value)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_name(value, "agent name")

    @field_validator("env", mode="before")
    @classmethod
    def _check_env(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            return value  # pydantic reports "Input should be a valid dictionary"
        problems: list[tuple[str | None, str]] = []
        for key, item in value.items():
            key_problem = env_key_problem(key) if isinstance(key, str) else "keys must be strings"
            if key_problem:
                problems.append((str(key), key_problem))
            elif not isinstance(item, str):
                kind = "null" if item is None else type(item).__name__
                problems.append(
                    (key, f"env values must be strings, got {kind} ({item!r}); {_UNQUOTED_HINT}")
                )
            elif problem := env_value_problem(item):
                problems.append((key, problem))
        if problems:
            raise FieldErrors(problems)
        return value

    @model_validator(mode="after")
    def _scripts(self) -> JobAgent:
        if problems := agent_problems(self.name, self.install, self.execute):
            raise FieldErrors(problems)
        return self

    @property
    def is_oracle(self) -> bool:
        return self.name == ORACLE_AGENT


class RegistrySource(FileModel):
    """`datasets[].registry`: where a registry.json is, a local path or a URL."""

    path: str | None = Field(None, description="Path to a registry.json (relative to job.yaml).")
    url: str | None = Field(None, description="http(s) URL of a registry.json.")

    @field_validator("path", "url", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _string(value)

    @model_validator(mode="after")
    def _one_location(self) -> RegistrySource:
        if self.path is None and self.url is None:
            raise ValueError("a registry needs 'path' (a registry.json file) or 'url'")
        if self.path is not None and self.url is not None:
            raise ValueError("a registry has either 'path' or 'url', not both")
        if self.path is not None and not self.path.strip():
            raise FieldErrors([("path", "must not be empty")])
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise FieldErrors([("url", f"{self.url!r} must be an http:// or https:// URL")])
        return self

    @property
    def location(self) -> str:
        """The registry.json's path or URL, whichever is set."""
        location = self.path if self.path is not None else self.url
        assert location is not None  # the validator requires one
        return location


class JobDataset(FileModel):
    """One entry of `datasets`: `{path}`, or `{registry: {path | url}, name, version}`."""

    path: str | None = Field(None, description="A local folder of tasks (relative to job.yaml).")
    registry: RegistrySource | None = Field(None, description="The registry listing the dataset.")
    name: str | None = Field(None, description="Name of the dataset in the registry.")
    version: str | None = Field(None, description="Version of the dataset in the registry.")

    @field_validator("path", "name", "version", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _string(value, 'quote it in YAML, e.g. version: "2.0"')

    @model_validator(mode="after")
    def _one_form(self) -> JobDataset:
        if self.path is None and self.registry is None:
            raise ValueError(
                "a dataset needs 'path' (a local folder of tasks) or 'registry' with 'name'"
            )
        if self.path is not None and self.registry is not None:
            raise ValueError("a dataset has either 'path' or 'registry', not both")
        problems: list[tuple[str | None, str]] = []
        if self.path is not None:
            if not self.path.strip():
                problems.append(("path", "must not be empty"))
            for field in ("name", "version"):
                if getattr(self, field) is not None:
                    problems.append(
                        (field, f"'{field}' applies to registry datasets only, not to a path")
                    )
        elif self.name is None or not self.name.strip():
            problems.append(("name", "a registry dataset needs the dataset's 'name'"))
        if problems:
            raise FieldErrors(problems)
        return self

    def identity(self) -> tuple[str | None, ...]:
        """What makes two entries the same dataset."""
        registry = self.registry
        return (
            self.path,
            registry.path if registry else None,
            registry.url if registry else None,
            self.name,
            self.version,
        )


class JobConfig(FileModel):
    """A job: every (agent, dataset task, attempt) trial and how to run them (the seed's Job)."""

    name: str = Field(
        default_factory=default_job_name,
        description="Job name, used as its directory; default: YYYY-MM-DD__HH-mm-ss (UTC).",
    )
    jobs_dir: str = Field("jobs", description="The output directory for job results.")
    n_attempts: PositiveInt = Field(1, description="Attempts per (agent, task) pair.")
    n_concurrent_trials: PositiveInt = Field(4, description="Trials run at the same time.")
    timeout_multiplier: float = Field(
        1.0,
        gt=0,
        strict=True,
        allow_inf_nan=False,
        description="Multiplies every timeout (task and job level).",
    )
    log_level: LogLevel = Field(LogLevel.ERROR, description="Rollout's log level.")
    instruction_path: str = Field(
        DEFAULT_INSTRUCTION_PATH,
        description="Where instruction.md is placed in the container ($ROLLOUT_TASK_INSTRUCTION).",
    )
    environment: JobEnvironment = Field(default_factory=JobEnvironment)
    verifier: JobVerifier = Field(default_factory=JobVerifier)
    metrics: list[JobMetric] = Field(default_factory=list, description="Job-level metrics.")
    agents: list[JobAgent] = Field(description="The agents to evaluate (at least one).")
    datasets: list[JobDataset] = Field(description="The datasets to evaluate on (at least one).")

    @field_validator("name", mode="before")
    @classmethod
    def _default_name(cls, value: Any) -> Any:
        return default_job_name() if value is None else _string(value)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_name(value, "job name")

    @field_validator("jobs_dir", "instruction_path", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return _string(value)

    @field_validator("jobs_dir")
    @classmethod
    def _jobs_dir(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("instruction_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        return check_instruction_path(value)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("timeout_multiplier", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return _not_bool(value)

    @field_validator("agents")
    @classmethod
    def _some_agents(cls, value: list[JobAgent]) -> list[JobAgent]:
        if not value:
            raise ValueError("at least one agent is required")
        if problems := duplicate_problems([a.name for a in value], "agent name", "agents"):
            raise FieldErrors(problems)
        return value

    @field_validator("datasets")
    @classmethod
    def _some_datasets(cls, value: list[JobDataset]) -> list[JobDataset]:
        if not value:
            raise ValueError("at least one dataset is required")
        first: dict[tuple[str | None, ...], int] = {}
        problems: list[tuple[str | None, str]] = []
        for index, dataset in enumerate(value):
            key = dataset.identity()
            if key in first:
                problems.append((f"[{index}]", f"the same dataset as datasets[{first[key]}]"))
            first.setdefault(key, index)
        if problems:
            raise FieldErrors(problems)
        return value

    @field_validator("metrics", mode="before")
    @classmethod
    def _no_metrics(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("metrics")
    @classmethod
    def _distinct_metrics(cls, value: list[JobMetric]) -> list[JobMetric]:
        if problems := duplicate_problems(
            [m.type.value for m in value], "metric", "metrics", "type"
        ):
            raise FieldErrors(problems)
        return value


# --- loading --------------------------------------------------------------------------------------


def parse_job(data: Any, *, file: str | Path = "job.yaml") -> JobConfig:
    """Validate an already-parsed job file; problems name `file` and the field."""
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InvalidInput.one(file, None, f"must be a mapping of job settings, not {kind}")
    try:
        return JobConfig.model_validate(dict(data))
    except ValidationError as err:
        raise InvalidInput(validation_problems(err, file, JobConfig)) from None


def load_job(path: str | Path) -> JobConfig:
    """Read job.yaml, job.yml or job.json; relative dataset paths become absolute (relative to
    the file's directory). Every problem is an `InvalidInput` naming the file and the field."""
    path = Path(path)
    if path.suffix.lower() not in JOB_FILE_SUFFIXES:
        raise InvalidInput.one(path, None, "a job file ends in .yaml, .yml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput.one(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err}") from None
    data = _parse_json(text, path) if path.suffix.lower() == ".json" else _parse_yaml(text, path)
    job = parse_job(data, file=path)
    return resolve_paths(job, path.parent)


def resolve_paths(job: JobConfig, base_dir: str | Path) -> JobConfig:
    """`job` with its relative dataset and registry paths made absolute against `base_dir`."""
    base = Path(base_dir).absolute()

    def absolute(value: str | None) -> str | None:
        if value is None:
            return None
        return os.path.normpath(base / Path(value).expanduser())

    datasets = []
    for dataset in job.datasets:
        registry = dataset.registry
        if registry is not None and registry.path is not None:
            registry = registry.model_copy(update={"path": absolute(registry.path)})
        datasets.append(
            dataset.model_copy(update={"path": absolute(dataset.path), "registry": registry})
        )
    return job.model_copy(update={"datasets": datasets})


def job_to_config_json(job: JobConfig) -> dict[str, Any]:
    """The job as `jobs/<job>/config.json` stores it: job.yaml's keys with every default, unset
    (null) settings left out. `parse_job` reads it back to an equal JobConfig.

    Agent env values are kept as written (`${MY_API_KEY}`), never resolved.
    """
    return job.model_dump(mode="json", by_alias=True, exclude_none=True)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, typing.Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def _parse_yaml(text: str, path: Path) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = err.problem or err.context or "syntax error"
        raise InvalidInput.one(path, None, f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as err:
        raise InvalidInput.one(path, None, f"invalid YAML: {err}") from None


def _parse_json(text: str, path: Path) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        message = f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        raise InvalidInput.one(path, None, message) from None
    except ValueError as err:
        raise InvalidInput.one(path, None, f"invalid JSON: {err}") from None


# --- ${VAR} in agent env --------------------------------------------------------------------------


def agent_env_references(job: JobConfig) -> dict[str, dict[str, list[str]]]:
    """`{agent: {KEY: [VAR, ...]}}` for every env value that refers to a variable."""
    found: dict[str, dict[str, list[str]]] = {}
    for agent in job.agents:
        for key, value in agent.env.items():
            if names := env_references(value):
                found.setdefault(agent.name, {})[key] = names
    return found


def resolve_agent_env(
    job: JobConfig, environ: Mapping[str, str], *, file: str | Path = "job.yaml"
) -> dict[str, dict[str, str]]:
    """`{agent: {KEY: value}}` with every `${VAR}` taken from `environ`.

    Every unset variable is reported at once, naming the agent, the key and the variable.
    """
    resolved: dict[str, dict[str, str]] = {}
    problems: list[Problem] = []
    for index, agent in enumerate(job.agents):
        values: dict[str, str] = {}
        for key, value in agent.env.items():
            missing = [name for name in env_references(value) if name not in environ]
            for name in missing:
                problems.append(
                    Problem(
                        str(file),
                        f"agents[{index}].env.{key}",
                        f"environment variable {name} is not set (agent {agent.name!r} "
                        f"takes {key} from ${{{name}}})",
                    )
                )
            if not missing:
                values[key] = substitute(value, environ)
        resolved[agent.name] = values
    if problems:
        raise InvalidInput(problems)
    return resolved
