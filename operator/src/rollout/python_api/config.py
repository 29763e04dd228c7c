"""Seed 002's `RolloutConfig` and `load_config`: its keys, types and defaults, and what each one
becomes in a job (README, "Python API").

Every key of seed 002's table is accepted with its type and default; an unknown key is refused
by name (with the closest key when there is one). Each key either maps onto the job that
`rollout()` runs (`RolloutConfig.to_job`) or, when it has no meaning here, is refused by name as
soon as it holds anything but its default: the tools through seed 002's sandbox server
(`available_tools`, `resource_types`, `resource_init_configs`, `sandbox_*`) are not part of this
project yet, so a config that needs them would run something else than what it says.

Decisions made here once:

- Paths (`data_path`, `output_dir`, `system_prompt_file`) are relative to the working
  directory, as seed 002 has them (its example config in `configs/rollout/` names
  `benchmark/...`), not to the config file; `to_job` makes them absolute.
- A literal `api_key` or `evaluator_api_key` is never written into a job file, config.json or a
  resource: it becomes the reference `${ROLLOUT_MODEL_API_KEY}` (`${ROLLOUT_EVALUATOR_API_KEY}`)
  and its value goes into the environment additions that the run resolves `${VAR}` from. A
  value that already is one `${VAR}` reference is kept as it is (the variable comes from the
  caller's environment). An empty key is no key.
- `parallel: false` runs one row at a time whatever `max_workers` says (a note says so);
  `parallel: true` runs `max_workers` at a time (`n_concurrent_trials`), the rows spread over at
  least that many shards when their number is known (`row_count`).
- `evaluation_metric` replaces the dataset's own verifier only when the config sets it (a
  dataset.toml's metric otherwise stays; a bare .jsonl file is scored by exact_match, seed 002's
  default either way). The `save_*` keys and the evaluator's settings are passed on when set.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from rollout.api.envrefs import env_references
from rollout.api.errors import InvalidInput
from rollout.api.job_settings import DEFAULT_SHARD_SIZE
from rollout.api.loading import parse_json, parse_yaml
from rollout.api.problems import FieldErrors, validation_problems
from rollout.api.rowrun import EVALUATOR_RESERVED_PARAMS
from rollout.api.rules import ORACLE_AGENT
from rollout.api.verifiers import Metric

CONFIG_SUFFIXES = (".json", ".yaml", ".yml")

MODEL_KEY_VARIABLE = "ROLLOUT_MODEL_API_KEY"
"""The variable a literal `api_key` is passed in (`${ROLLOUT_MODEL_API_KEY}` in the job)."""
EVALUATOR_KEY_VARIABLE = "ROLLOUT_EVALUATOR_API_KEY"
"""The variable a literal `evaluator_api_key` is passed in."""

DEFAULT_MODEL = "gpt-4.1-2025-04-14"
DEFAULT_JOBS_DIR = "jobs"
"""job.yaml's default jobs_dir: where results go without an `output_dir`."""
DEFAULT_SANDBOX_URL = "http://127.0.0.1:18890"

TOOL_KEYS = (
    "available_tools",
    "resource_types",
    "resource_init_configs",
    "sandbox_server_url",
    "sandbox_auto_start",
    "sandbox_config_path",
    "sandbox_timeout",
)
"""Seed 002's keys for tools through its sandbox server: refused unless at their default."""

_NOT_HERE = (
    "tools through seed 002's sandbox server are not part of this project yet, so this setting "
    "cannot be honoured: remove it, or leave it at its default ({default})"
)
_ONE_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class RolloutConfig(BaseModel):
    """Seed 002's RolloutConfig: every key of its table with its type and default.

    Create one from a mapping (`RolloutConfig.from_mapping`, or the keywords), or read one with
    `load_config`. Unknown keys are refused by name, and so are the sandbox tool keys
    (`TOOL_KEYS`) when set to anything but their default. `to_job` gives the job it runs as.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # I/O paths
    data_path: str | None = Field(None, description="Benchmark data file (JSONL) or dataset.")
    output_dir: str | None = Field(None, description="Where results go: <output_dir>/<job>/.")
    # Model
    model_name: str = Field(DEFAULT_MODEL, min_length=1, description="The model to use.")
    api_key: str = Field("", repr=False, description="The model's API key (never written).")
    base_url: str = Field("", description="The model's OpenAI-compatible base URL.")
    # Agent execution
    max_turns: int = Field(100, ge=1, strict=True, description="Most turns per task.")
    max_retries: int = Field(3, ge=0, strict=True, description="Retries per LLM call.")
    max_workers: int = Field(1, ge=1, strict=True, description="Most tasks at a time.")
    available_tools: list[str] = Field(default_factory=list, description="Refused when set.")
    # System prompt
    system_prompt: str = Field("", description="The system prompt (the built-in one if empty).")
    system_prompt_file: str | None = Field(None, description="A file holding the system prompt.")
    # Evaluation
    evaluate_results: bool = Field(True, strict=True, description="Score the answers.")
    evaluation_metric: Metric = Field(Metric.EXACT_MATCH, description="How answers are scored.")
    evaluator_model_name: str | None = Field(None, min_length=1, description="llm_judgement.")
    evaluator_api_key: str | None = Field(None, repr=False, description="Never written.")
    evaluator_base_url: str | None = Field(None, min_length=1, description="llm_judgement.")
    evaluator_temperature: float = Field(0.0, ge=0.0, le=2.0, allow_inf_nan=False)
    evaluator_max_retries: int = Field(3, ge=0, strict=True)
    evaluator_extra_params: dict[str, Any] = Field(default_factory=dict)
    # Resources and the sandbox (refused when set)
    resource_types: list[str] = Field(default_factory=list)
    resource_init_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    sandbox_server_url: str = DEFAULT_SANDBOX_URL
    sandbox_auto_start: bool = Field(False, strict=True)
    sandbox_config_path: str | None = None
    sandbox_timeout: int = Field(120, strict=True)
    # Benchmark
    benchmark_name: str | None = Field(None, min_length=1, description="Names the job.")
    number_of_tasks: int | None = Field(None, ge=1, strict=True, description="max_tasks.")
    task_ids: list[str] | None = Field(None, description="Only these tasks (rows).")
    parallel: bool = Field(False, strict=True, description="Run max_workers tasks at a time.")
    # Result saving
    save_results: bool = Field(True, strict=True)
    save_trajectories: bool = Field(True, strict=True)
    trajectory_only: bool = Field(False, strict=True)
    save_summary: bool = Field(True, strict=True)

    _file: str = PrivateAttr("RolloutConfig")

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # JSON's true is not the number 1, and YAML's yes is not either.
        if isinstance(data, Mapping) and isinstance(data.get("evaluator_temperature"), bool):
            raise FieldErrors([("evaluator_temperature", "expected a number, got a boolean")])
        return data

    @model_validator(mode="after")
    def _meaningful(self) -> Self:
        problems: list[tuple[str | None, str]] = []
        for key in TOOL_KEYS:
            default = type(self).model_fields[key].get_default(call_default_factory=True)
            if getattr(self, key) != default:
                problems.append((key, _NOT_HERE.format(default=_shown(default))))
        if self.system_prompt.strip() and self.system_prompt_file:
            problems.append(
                ("system_prompt_file", "set with a non-empty system_prompt: give one or the other")
            )
        if clash := sorted(EVALUATOR_RESERVED_PARAMS & set(self.evaluator_extra_params)):
            problems.append(
                (
                    "evaluator_extra_params",
                    f"may not set {', '.join(clash)}: evaluator_model_name, the verifier's "
                    "messages and evaluator_temperature make those",
                )
            )
        for key in ("api_key", "evaluator_api_key"):
            value = getattr(self, key) or ""
            if env_references(value) and not _ONE_REFERENCE.fullmatch(value.strip()):
                problems.append(
                    (key, "is either the key itself or one ${VAR} reference, not a mix of both")
                )
        if self.task_ids is not None and any(not t for t in self.task_ids):
            problems.append(("task_ids", "an id must not be empty"))
        if problems:
            raise FieldErrors(problems)
        return self

    def __repr_args__(self) -> Any:
        # pydantic's repr already hides repr=False fields; say that a key is there at all.
        yield from super().__repr_args__()
        for key in ("api_key", "evaluator_api_key"):
            if getattr(self, key):
                yield key, "***"

    # --- making one -----------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Any, *, file: str | Path = "RolloutConfig") -> RolloutConfig:
        """A config from a mapping of seed 002's keys; InvalidInput naming `file` and each key
        at fault (every problem at once)."""
        if not isinstance(data, Mapping):
            kind = "empty" if data is None else f"a {type(data).__name__}"
            raise InvalidInput.one(
                file, None, f"must be a mapping of RolloutConfig keys, not {kind}"
            )
        try:
            config = cls.model_validate(dict(data))
        except ValidationError as err:
            raise InvalidInput(validation_problems(err, file, cls)) from None
        config._file = str(file)
        return config

    def updated(self, changes: Mapping[str, Any], *, where: str = "rollout()") -> RolloutConfig:
        """This config with `changes` (seed 002 keys) over its own keys, checked again; the
        problems name `where` (the caller's arguments)."""
        data = {**self.model_dump(exclude_unset=True), **changes}
        try:
            config = type(self).model_validate(data)
        except ValidationError as err:
            raise InvalidInput(validation_problems(err, where, type(self))) from None
        config._file = self._file
        return config

    @property
    def file(self) -> str:
        """Where the config came from, for messages (its file, else `RolloutConfig`)."""
        return self._file

    # --- what it becomes ------------------------------------------------------------------

    def concurrency(self) -> int:
        """Tasks at a time: `max_workers` with `parallel`, else one."""
        return self.max_workers if self.parallel else 1

    def notes(self) -> list[str]:
        """What the config says that the run does not do as written, a line each."""
        notes: list[str] = []
        if not self.parallel and self.max_workers > 1:
            notes.append(
                f"{self.file}: max_workers {self.max_workers} is not used because parallel is "
                "false: the tasks run one at a time (set parallel: true to run "
                f"{self.max_workers} at a time)"
            )
        return notes

    def results_dir(self, base_dir: str | Path | None = None) -> Path:
        """Where the job's directory goes: `output_dir`, else `jobs` (job.yaml's default), made
        absolute against `base_dir` (default: the working directory)."""
        return _absolute(self.output_dir or DEFAULT_JOBS_DIR, base_dir)

    def agent_name(self) -> str:
        """The model agent's name (its results directory): the model's name, made one safe
        path segment."""
        name = _UNSAFE_NAME.sub("-", self.model_name).strip("-.") or "model"
        return f"{name}-model" if name == ORACLE_AGENT else name

    def system_prompt_text(self, base_dir: str | Path | None = None) -> str | None:
        """The system prompt: `system_prompt`, else `system_prompt_file`'s text (relative to
        `base_dir`, default the working directory), else None (the agent's built-in one)."""
        if self.system_prompt.strip():
            return self.system_prompt
        if not self.system_prompt_file:
            return None
        path = _absolute(self.system_prompt_file, base_dir)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            message = f"{path} does not exist"
        except (OSError, UnicodeDecodeError) as err:
            message = f"{path} cannot be read: {err}"
        raise InvalidInput.one(self.file, "system_prompt_file", message)

    def to_job(
        self,
        *,
        base_dir: str | Path | None = None,
        job_name: str | None = None,
        local: bool = False,
        row_count: int | None = None,
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The job.yaml mapping this config runs as, and the environment additions it needs
        (the literal API keys, by the variables the mapping refers to).

        `base_dir` resolves relative paths (default: the working directory); `job_name` names
        the job (default: `benchmark_name`, else job.yaml's default, the time); `local` picks the
        host sandbox (`environment.type: local`, which needs no container engine); `row_count`,
        the number of rows that will run, spreads them over at least `concurrency()` shards.
        InvalidInput naming the config file and key when something cannot be mapped.
        """
        environ: dict[str, str] = {}
        if not self.data_path:
            raise InvalidInput.one(
                self.file,
                "data_path",
                "is not set: name the benchmark's data (a .jsonl or .json file of rows, or a "
                "dataset directory), in the config or as rollout(data_path=...)",
            )
        model: dict[str, Any] = {"name": self.model_name}
        if self.base_url.strip():
            model["base_url"] = self.base_url.strip()
        if key := _key_reference(self.api_key, MODEL_KEY_VARIABLE, environ):
            model["api_key"] = key
        model["max_turns"] = self.max_turns
        model["max_retries"] = self.max_retries
        if (prompt := self.system_prompt_text(base_dir)) is not None:
            model["system_prompt"] = prompt

        job: dict[str, Any] = {}
        if name := job_name or self.benchmark_name:
            job["name"] = name
        if self.output_dir:
            job["jobs_dir"] = str(self.results_dir(base_dir))
        concurrency = self.concurrency()
        job["n_concurrent_trials"] = concurrency
        if row_count is not None and concurrency > 1:
            shard_size = max(1, min(DEFAULT_SHARD_SIZE, math.ceil(row_count / concurrency)))
            if shard_size != DEFAULT_SHARD_SIZE:
                job["shard_size"] = shard_size
        if local:
            job["environment"] = {"type": "local"}
        if not self.evaluate_results:
            job["verifier"] = {"disable": True}
        if self.number_of_tasks is not None:
            job["max_tasks"] = self.number_of_tasks
        if self.task_ids is not None:
            job["task_ids"] = list(self.task_ids)
        if "evaluation_metric" in self.model_fields_set:
            job["evaluation_metric"] = self.evaluation_metric.value
        for field in ("evaluator_model_name", "evaluator_base_url"):
            if (value := getattr(self, field)) is not None:
                job[field] = value
        if self.evaluator_api_key is not None and (
            key := _key_reference(self.evaluator_api_key, EVALUATOR_KEY_VARIABLE, environ)
        ):
            job["evaluator_api_key"] = key
        for field in (
            "evaluator_temperature",
            "evaluator_max_retries",
            "evaluator_extra_params",
            "save_results",
            "save_trajectories",
            "trajectory_only",
            "save_summary",
        ):
            if field in self.model_fields_set:
                job[field] = getattr(self, field)
        job["agents"] = [{"name": self.agent_name(), "model": model}]
        job["datasets"] = [{"path": str(_absolute(self.data_path, base_dir))}]
        return job, environ


def load_config(config_path: str | os.PathLike[str]) -> RolloutConfig:
    """Read seed 002's RolloutConfig from a .json, .yaml or .yml file.

    Raises InvalidInput naming the file and every key at fault: an unknown key, a value of the
    wrong type, a sandbox tool key set (`TOOL_KEYS`), a file that is not there or not valid."""
    path = Path(config_path)
    if path.suffix.lower() not in CONFIG_SUFFIXES:
        raise InvalidInput.one(path, None, "a RolloutConfig file ends in .json, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput.one(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err}") from None
    data = parse_json(text, path) if path.suffix.lower() == ".json" else parse_yaml(text, path)
    return RolloutConfig.from_mapping(data, file=path)


def _key_reference(value: str, variable: str, environ: dict[str, str]) -> str | None:
    """The job's form of an API key: a `${VAR}` reference as it is, a literal key as
    `${variable}` with its value added to `environ`; None for no key."""
    value = value.strip()
    if not value:
        return None
    if _ONE_REFERENCE.fullmatch(value):
        return value
    environ[variable] = value
    return f"${{{variable}}}"


def _absolute(value: str, base_dir: str | Path | None) -> Path:
    """`value` (a leading `~` is the home directory) made absolute against `base_dir`, default
    the working directory."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return Path(os.path.normpath((base / Path(value).expanduser()).absolute()))


def _shown(default: Any) -> str:
    if default is None:
        return "null"
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, str):
        return repr(default)
    return str(default)
