"""job.yaml / job.json: the `JobConfig` model and loading a job file.

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
- Agent env values are strings; `${NAME}` in one takes NAME from the submitter's environment
  (`rollout.api.envrefs`). An agent that is a built-in (`rollout.api.catalogue`) may write its
  model as `model: NAME` (a string; a mapping is a model agent), and gets the keys its built-in
  needs as `KEY: ${KEY}` where env does not give them (`JobAgent._with_builtin_keys`).
- `jobs/<job>/config.json` is the seed's "copy of job.yaml in JSON format": the file's content as
  it was submitted (`read_job_file(...).content`, written by `config_json_text`), not the model.
  So no default is filled in, paths stay as written, `${VAR}` stays text and `type: docker`
  stays docker; what was worked out from it (the job's name when the file has none, absolute
  paths, dataset digests, the type a cluster runs) is not in it.

Where the rest is: the settings job.yaml shares with a RolloutJob (`rollout.api.job_settings`,
`rollout.api.environment`), the rules both obey (`rollout.api.rules`), problem reports
(`rollout.api.problems`), YAML/JSON reading (`rollout.api.loading`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rollout.api.base import ApiModel, FileModel
from rollout.api.envrefs import (
    HEADER_SLOT_PREFIX,
    MODEL_KEY_SLOT,
    AgentText,
    env_key_problem,
    env_references,
    env_value_problem,
)
from rollout.api.errors import InvalidInput, Problem
from rollout.api.job_settings import AgentBase, JobSettings, check_agent_names
from rollout.api.loading import read_document
from rollout.api.problems import FieldErrors, validation_problems
from rollout.api.rules import JobName, text
from rollout.api.service_agents import ModelBase, header_name_problem

JOB_NAME_FORMAT = "%Y-%m-%d__%H-%M-%S"
JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")

_UNQUOTED_HINT = 'quote it in YAML, e.g. KEY: "4096"'

EVALUATOR_KEY_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
"""The only form of an API key in job.yaml (evaluator_api_key, a model's api_key): one `${VAR}`
reference."""
_KEY_REFERENCE_ONLY = (
    "must be a ${VAR} reference (e.g. ${OPENAI_API_KEY}), so that the key is never written in "
    "the job file, its config.json or a resource"
)


def default_job_name(now: datetime | None = None) -> str:
    """The seed's default job name: `YYYY-MM-DD__HH-mm-ss`, in UTC."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime(JOB_NAME_FORMAT)


class JobModel(ModelBase):
    """A model agent's `model` as job.yaml writes it: its key as a `${VAR}` reference, its
    system prompt as text or a file."""

    api_key: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The API key, as ${VAR} (taken from the submitter's environment, kept in "
        "a Secret on a cluster; never written in plain text).",
    )
    system_prompt_file: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="A file holding the system prompt, relative to job.yaml.",
    )

    @field_validator("api_key", "system_prompt_file", mode="before")
    @classmethod
    def _text_fields(cls, value: Any) -> Any:
        return text(value)

    @field_validator("api_key")
    @classmethod
    def _key_reference(cls, value: str | None) -> str | None:
        if value is not None and not EVALUATOR_KEY_REFERENCE.fullmatch(value):
            raise ValueError(_KEY_REFERENCE_ONLY)
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> JobModel:
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise FieldErrors(
                [("system_prompt_file", "give system_prompt or system_prompt_file, not both")]
            )
        return self


class JobAgent(AgentBase):
    """One entry of `agents`: an agent with its env, headers and model as job.yaml writes them."""

    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment for install and execute; ${VAR} takes VAR from the submitter.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        exclude_if=lambda v: not v,
        description="An endpoint agent: headers of each request; ${VAR} in a value takes VAR "
        "from the submitter (kept in a Secret on a cluster).",
    )
    model: JobModel | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="A model agent: the OpenAI-compatible model that answers.",
    )

    @field_validator("env", mode="before")
    @classmethod
    def _check_env(cls, value: Any) -> Any:
        return _check_texts(value, env_key_problem, "env")

    @classmethod
    def _with_builtin_keys(cls, data: dict[str, Any], keys: list[str]) -> dict[str, Any]:
        # Each key the built-in needs and env does not give is taken from the submitter's
        # environment, like any `${VAR}` (and kept in a Secret on a cluster).
        env = data.get("env")
        if env is None or isinstance(env, Mapping):
            data["env"] = {**{key: f"${{{key}}}" for key in keys}, **(env or {})}
        return data

    @field_validator("headers", mode="before")
    @classmethod
    def _check_headers(cls, value: Any) -> Any:
        return _check_texts(value, header_name_problem, "header")

    def texts(self) -> list[AgentText]:
        """Every value of the agent that may hold `${VAR}` (`rollout.api.envrefs.AgentText`)."""
        found = [AgentText(key, f"env.{key}", value) for key, value in self.env.items()]
        found += [
            AgentText(f"{HEADER_SLOT_PREFIX}{name}", f"headers.{name}", value)
            for name, value in self.headers.items()
        ]
        if self.model is not None and self.model.api_key is not None:
            found.append(AgentText(MODEL_KEY_SLOT, "model.api_key", self.model.api_key))
        return found


def _check_texts(value: Any, key_problem: Callable[[str], str | None], what: str) -> Any:
    """A mapping of names to strings that may hold `${VAR}` (env, headers): every problem at
    once, each under its key."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return value  # pydantic reports "Input should be a valid dictionary"
    problems: list[tuple[str | None, str]] = []
    for key, item in value.items():
        problem = key_problem(key) if isinstance(key, str) else "keys must be strings"
        if problem:
            problems.append((str(key), problem))
        elif not isinstance(item, str):
            kind = "null" if item is None else type(item).__name__
            problems.append(
                (key, f"{what} values must be strings, got {kind} ({item!r}); {_UNQUOTED_HINT}")
            )
        elif problem := env_value_problem(item):
            problems.append((key, problem))
    if problems:
        raise FieldErrors(problems)
    return value


class RegistrySource(ApiModel):
    """`datasets[].registry`: where a registry.json is, a local path or a URL."""

    path: str | None = Field(None, description="Path to a registry.json (relative to job.yaml).")
    url: str | None = Field(None, description="http(s) URL of a registry.json.")

    @field_validator("path", "url", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return text(value)

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


class JobDataset(ApiModel):
    """One entry of `datasets`: `{path}`, or `{registry: {path | url}, name, version}`."""

    path: str | None = Field(None, description="A local folder of tasks (relative to job.yaml).")
    registry: RegistrySource | None = Field(None, description="The registry listing the dataset.")
    name: str | None = Field(None, description="Name of the dataset in the registry.")
    version: str | None = Field(None, description="Version of the dataset in the registry.")
    split: str | None = Field(
        None,
        min_length=1,
        description="A data dataset's split: data/<split>.jsonl (default: dataset.toml's, the "
        "only one, or test).",
    )

    @field_validator("path", "name", "version", "split", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return text(value, 'quote it in YAML, e.g. version: "2.0"')

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
        else:
            if self.name is None or not self.name.strip():
                problems.append(("name", "a registry dataset needs the dataset's 'name'"))
            if self.split is not None:
                problems.append(
                    ("split", "'split' applies to a data dataset at a path, not to a registry")
                )
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
            self.split,
        )


class _JobName(ApiModel):
    # A base of its own so that `name` comes first in the model, in config.json and in
    # `rollout render` output, as a job.yaml begins (pydantic orders fields base-first).
    name: JobName = Field(
        default_factory=default_job_name,
        description="Job name, used as its directory; default: YYYY-MM-DD__HH-mm-ss (UTC).",
    )

    @field_validator("name", mode="before")
    @classmethod
    def _default_name(cls, value: Any) -> Any:
        return default_job_name() if value is None else text(value)


class JobConfig(FileModel, JobSettings, _JobName):
    """A job: every (agent, dataset task, attempt) trial and how to run them (the seed's Job)."""

    agents: list[JobAgent] = Field(description="The agents to evaluate (at least one).")
    datasets: list[JobDataset] = Field(description="The datasets to evaluate on (at least one).")
    evaluator_api_key: str | None = Field(
        None,
        description="llm_judgement: the evaluator's API key, as ${VAR} (taken from the "
        "submitter's environment, kept in a Secret on a cluster; never written in plain text).",
    )

    @field_validator("evaluator_api_key", mode="before")
    @classmethod
    def _key_reference(cls, value: Any) -> Any:
        value = text(value)
        if value is None:
            return None
        if not EVALUATOR_KEY_REFERENCE.fullmatch(value):
            raise ValueError(_KEY_REFERENCE_ONLY)
        return value

    @field_validator("agents")
    @classmethod
    def _some_agents(cls, value: list[JobAgent]) -> list[JobAgent]:
        check_agent_names(value)
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


@dataclass(frozen=True)
class JobFile:
    """A job file as read: the job, and the file's content as it was written."""

    job: JobConfig
    """As `load_job` gives it: defaults filled in, dataset paths absolute."""
    content: dict[str, Any]
    """The file's mapping as written (config.json's content): its keys in their order, no
    default filled in, paths as written, `${VAR}` as text."""


def read_job_file(path: str | Path, overrides: Mapping[str, Any] | None = None) -> JobFile:
    """Read job.yaml, job.yml or job.json (see `load_job`), keeping its content as written.

    `overrides` are settings given on the command line (`--max-tasks`): they replace the
    file's, in the job and in its content (config.json says what ran)."""
    path = Path(path)
    content = read_document(path, JOB_FILE_SUFFIXES)
    if overrides and isinstance(content, Mapping):
        content = {**content, **overrides}
    job = parse_job(content, file=path)  # refuses anything but a mapping
    job = read_system_prompts(resolve_paths(job, path.parent), path)
    return JobFile(job, dict(content))


def load_job(path: str | Path) -> JobConfig:
    """Read job.yaml, job.yml or job.json; relative dataset paths become absolute (relative to
    the file's directory). Every problem is an `InvalidInput` naming the file and the field."""
    return read_job_file(path).job


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


def read_system_prompts(job: JobConfig, path: str | Path) -> JobConfig:
    """`job` with each model agent's `system_prompt_file` (relative to the job file at `path`)
    read into its `system_prompt`, so that the job carries the text wherever it goes (a
    RolloutJob, a runner). A file that cannot be read is an InvalidInput naming the field."""
    base = Path(path).absolute().parent
    agents: list[JobAgent] = []
    problems: list[Problem] = []
    for index, agent in enumerate(job.agents):
        model = agent.model
        if model is None or model.system_prompt_file is None:
            agents.append(agent)
            continue
        prompt_path = base / Path(model.system_prompt_file).expanduser()
        field = f"agents[{index}].model.system_prompt_file"
        try:
            prompt = prompt_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) else f"not UTF-8 text ({err.reason})"
            problems.append(
                Problem(str(path), field, f"{str(prompt_path)!r} cannot be read: {why}")
            )
            continue
        model = model.model_copy(update={"system_prompt": prompt, "system_prompt_file": None})
        agents.append(agent.model_copy(update={"model": model}))
    if problems:
        raise InvalidInput(problems)
    return job.model_copy(update={"agents": agents})


def resolve_evaluator_key(
    job: JobConfig, environ: Mapping[str, str], *, file: str | Path = "job.yaml"
) -> str | None:
    """The llm_judgement evaluator's API key: job.yaml's evaluator_api_key `${VAR}` taken from
    `environ`; None without one. InvalidInput naming the field when the variable is not set."""
    reference = job.evaluator_api_key
    if reference is None:
        return None
    (name,) = env_references(reference)
    if name not in environ:
        raise InvalidInput.one(
            file,
            "evaluator_api_key",
            f"refers to ${{{name}}}, which is not set in this environment",
        )
    return environ[name]


def job_to_config_json(job: JobConfig) -> dict[str, Any]:
    """The job as a job.yaml mapping: job.yaml's keys with every default, unset (null) settings
    left out. `parse_job` reads it back to an equal JobConfig. The operator's config.json of a
    RolloutJob applied without the CLI, which has no file to copy.

    Agent env values are kept as written (`${MY_API_KEY}`), never resolved.
    """
    return job.model_dump(mode="json", exclude_none=True)


def config_json_text(content: Mapping[str, Any]) -> str:
    """`jobs/<job>/config.json`'s text: `content` as JSON, in its order, indented by two,
    non-ASCII as it is, ending in a newline."""
    # A job file that validated holds only what JSON has (strings, numbers, booleans, null,
    # lists, string-keyed mappings): the models refuse YAML's dates and non-finite numbers.
    return json.dumps(content, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
