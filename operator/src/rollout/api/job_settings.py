"""The settings that job.yaml and a RolloutJob share, as one model each.

`JobSettings` holds the job-level settings of the seed's job.yaml (attempts, concurrency,
timeouts, instruction path, environment, verifier, metrics); `JobConfig` (job.yaml) and
`RolloutJobSpec` (the resource) are built on it and add what only they have. `AgentBase` is
an agent without its env, whose form differs: job.yaml writes `KEY: value` with `${VAR}`
references, a resource writes Kubernetes env vars with Secret references.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import Field, field_validator, model_validator

from rollout.api import catalogue
from rollout.api.base import ApiModel
from rollout.api.environment import EnvironmentSettings
from rollout.api.metrics import Metric
from rollout.api.problems import FieldErrors
from rollout.api.rowrun import EVALUATOR_RESERVED_PARAMS
from rollout.api.rules import (
    DEFAULT_INSTRUCTION_PATH,
    ORACLE_AGENT,
    AgentName,
    AgentVersion,
    InstructionPath,
    ModelName,
    PositiveInt,
    PositiveSeconds,
    duplicate_problems,
    not_bool,
    text,
    zero_is_unset,
)
from rollout.api.service_agents import (
    DEFAULT_ENDPOINT_TIMEOUT_SEC,
    AgentKind,
    agent_kind_problems,
)
from rollout.api.verifiers import Metric as EvaluationMetric

DEFAULT_SHARD_SIZE = 100
"""Rows of a data dataset per shard (one trial Pod) unless the job says otherwise."""


class LogLevel(StrEnum):
    """Rollout's log level, as job.yaml spells it."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class VerifierSettings(ApiModel):
    """`verifier`: job-level verifier settings."""

    override_timeout_sec: PositiveSeconds | None = Field(
        None, description="If set (not 0 or null), replaces each task's verifier.timeout_sec."
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


class AgentBase(ApiModel):
    """An agent: its name and what it is (`rollout.api.service_agents`: a script, an endpoint or
    a model; 'oracle' is reserved). Each form adds its env, headers and model, whose values are
    `${VAR}` text in job.yaml and values or Secret references in a resource."""

    name: AgentName = Field(description="Agent name; also its results directory.")
    description: str | None = Field(None, description="What the agent is.")
    install: str | None = Field(None, description="Bash script that installs the agent.")
    execute: str | None = Field(
        None, description="Bash script that runs the agent (a script agent)."
    )
    endpoint: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="An endpoint agent's http(s) URL: the runner POSTs each attempt to it.",
    )
    timeout_sec: PositiveSeconds | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description=f"An endpoint agent: one request's limit in seconds (default "
        f"{DEFAULT_ENDPOINT_TIMEOUT_SEC:g}).",
    )
    builtin: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The built-in agent this one runs (`rollout agents list`); an agent named "
        "after a built-in that gives neither install nor execute is that built-in.",
    )
    version: AgentVersion | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="A built-in agent: the version to install (default: the catalogue's pin).",
    )
    model_name: ModelName | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="A built-in agent: its model, passed the way its CLI takes it (job.yaml "
        "also takes `model: NAME`).",
    )
    flags: list[str] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="A built-in agent: extra command-line arguments of its CLI, one each.",
    )

    @model_validator(mode="before")
    @classmethod
    def _builtin(cls, data: Any) -> Any:
        """A built-in agent (`rollout.api.catalogue`): `model: NAME` read as its model, its
        pinned version and default model filled in, and the API keys it needs."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        model_key = "modelName" if "modelName" in data else "model_name"
        if isinstance(data.get("model"), str):
            if data.get(model_key) is not None:
                raise FieldErrors([("model", f"give model or {model_key}, not both")])
            data[model_key] = data.pop("model")
        name = catalogue.builtin_name(
            data.get("name"),
            builtin=data.get("builtin"),
            install=data.get("install"),
            execute=data.get("execute"),
            other_kind=data.get("endpoint") is not None or data.get("model") is not None,
        )
        entry = catalogue.get(name) if name is not None else None
        if entry is None:
            return data
        data["builtin"] = name
        if data.get("version") is None:
            data["version"] = entry.version
        if data.get(model_key) is None and entry.model is not None:
            data[model_key] = entry.model
        return cls._with_builtin_keys(data, entry.keys_for(data.get(model_key)))

    @classmethod
    def _with_builtin_keys(cls, data: dict[str, Any], keys: list[str]) -> dict[str, Any]:
        """`data` with the env a built-in's API `keys` need (each form of env differs)."""
        return data

    @field_validator("name", "description", "install", "execute", "endpoint", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return text(value)

    @field_validator("builtin", "version", "model_name", mode="before")
    @classmethod
    def _parameter_text(cls, value: Any) -> Any:
        return text(value)

    @field_validator("builtin")
    @classmethod
    def _known_builtin(cls, value: str | None) -> str | None:
        if value is not None and catalogue.get(value) is None:
            raise ValueError(catalogue.unknown_builtin_message(value))
        return value

    @field_validator("flags", mode="before")
    @classmethod
    def _flags(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError('give the flags as a list of arguments, e.g. ["--max-turns", "30"]')
        if isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, str) and "\0" in item:
                    raise FieldErrors([(f"[{index}]", "contains a NUL character")])
        return value

    @field_validator("timeout_sec", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return not_bool(value)

    @field_validator("timeout_sec")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("must be a positive number of seconds")
        return value

    @model_validator(mode="after")
    def _kind(self) -> Self:
        # Each form declares its own `headers` and `model` (their values differ in form).
        problems = agent_kind_problems(
            self.name,
            install=self.install,
            execute=self.execute_script,
            endpoint=self.endpoint,
            timeout_sec=self.timeout_sec,
            headers=bool(getattr(self, "headers", None)),
            model=getattr(self, "model", None) is not None,
        )
        if self.builtin is None and catalogue.get(self.name) is not None:
            problems = [
                (
                    field,
                    f"{problem}; add `builtin: {self.name}` to run its execute with your install",
                )
                if field == "execute" and self.install is not None and self.execute is None
                else (field, problem)
                for field, problem in problems
            ]
        if self.builtin is None:
            problems += [
                (field, _not_builtin(self.name, field))
                for field in ("version", "model_name", "flags")
                if getattr(self, field)
            ]
        if problems:
            raise FieldErrors(problems)
        return self

    @property
    def builtin_agent(self) -> catalogue.BuiltinAgent | None:
        """The catalogue's entry of a built-in agent."""
        return catalogue.get(self.builtin) if self.builtin is not None else None

    @property
    def install_script(self) -> str | None:
        """The install script: the agent's own, else its built-in's."""
        if self.install is not None or (entry := self.builtin_agent) is None:
            return self.install
        return entry.install_script

    @property
    def execute_script(self) -> str | None:
        """The execute script: the agent's own, else its built-in's."""
        if self.execute is not None or (entry := self.builtin_agent) is None:
            return self.execute
        return entry.execute_script

    def parameter_env(self) -> dict[str, str]:
        """A built-in's version, model and flags as its scripts read them; {} for another."""
        if self.builtin is None:
            return {}
        return catalogue.parameter_env(self.version, self.model_name, self.flags)

    @property
    def is_oracle(self) -> bool:
        return self.name == ORACLE_AGENT

    @property
    def kind(self) -> AgentKind:
        if self.is_oracle:
            return AgentKind.ORACLE
        if self.endpoint is not None:
            return AgentKind.ENDPOINT
        if getattr(self, "model", None) is not None:
            return AgentKind.MODEL
        return AgentKind.SCRIPT

    @property
    def request_timeout_sec(self) -> float:
        """An endpoint agent's limit of one request."""
        return self.timeout_sec if self.timeout_sec is not None else DEFAULT_ENDPOINT_TIMEOUT_SEC

    def scripts(self) -> dict[str, Any]:
        """The fields every form of an agent has, to build another form from this one."""
        return {name: getattr(self, name) for name in AgentBase.model_fields}


def _not_builtin(name: str, field: str) -> str:
    if catalogue.get(name) is not None:
        return (
            f"{field} is a parameter of a built-in agent, and {name!r} gives a script of its "
            f"own, so it is not the built-in: add `builtin: {name}` to run the built-in with "
            f"your script in place of its own"
        )
    return (
        f"{field} is a parameter of a built-in agent (`rollout agents list`), and {name!r} is "
        f"none; a model agent's model is a mapping with its name"
    )


def check_agent_names(agents: list[Any]) -> None:
    """At least one agent, names distinct."""
    if not agents:
        raise ValueError("at least one agent is required")
    if problems := duplicate_problems([a.name for a in agents], "agent name", "agents"):
        raise FieldErrors(problems)


MAX_TIMEOUT_MULTIPLIER = 1000.0
"""The largest timeout_multiplier: a day-long phase stays under three years, and every timeout
stays a finite number of seconds (1e308 made them infinite)."""


class JobSettings(ApiModel):
    """The job-level settings of job.yaml, shared by the job file and the RolloutJob."""

    jobs_dir: str = Field(
        "jobs", min_length=1, description="Local directory the CLI downloads results to."
    )
    n_attempts: PositiveInt = Field(1, description="Attempts per (agent, task) pair.")
    n_concurrent_trials: PositiveInt = Field(4, description="Most trials running at the same time.")
    timeout_multiplier: float = Field(
        1.0,
        gt=0,
        le=MAX_TIMEOUT_MULTIPLIER,
        strict=True,
        allow_inf_nan=False,
        description="Multiplies every timeout.",
    )
    log_level: LogLevel = Field(LogLevel.ERROR, description="Log level of the runner.")
    instruction_path: InstructionPath = Field(
        DEFAULT_INSTRUCTION_PATH,
        description="Where instruction.md is placed ($ROLLOUT_TASK_INSTRUCTION holds it).",
    )
    environment: EnvironmentSettings = Field(
        default_factory=EnvironmentSettings, description="Environment provider and overrides."
    )
    verifier: VerifierSettings = Field(
        default_factory=VerifierSettings, description="Verifier settings."
    )
    metrics: list[Metric] = Field(
        default_factory=list, description="Job-level metrics over trial rewards."
    )
    isolate_agents: bool = Field(
        False,
        strict=True,
        exclude_if=lambda v: v is False,  # absent when off: resources of earlier versions stay
        description="Run every agent whose task declares no [agent] user as an unprivileged user "
        "(rollout-agent, uid 10001) created in the container; the verifier stays root.",
    )

    # Data benchmarks (seed 002's names; README "Data benchmarks"). max_tasks and task_ids pick
    # tasks of every dataset, data or not. Each is absent from a dump while at its default, so
    # that resources and config.json of earlier versions read and write back unchanged.
    max_tasks: PositiveInt | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Run only the first N tasks (rows) of each dataset.",
    )
    task_ids: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Run only these tasks (rows) of each dataset, in the dataset's order.",
    )
    shard_size: PositiveInt = Field(
        DEFAULT_SHARD_SIZE,
        exclude_if=lambda v: v == DEFAULT_SHARD_SIZE,
        description="Rows of a data dataset per trial Pod (one runner each).",
    )
    evaluation_metric: EvaluationMetric | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Score data rows by this metric, over what the dataset declares: "
        "exact_match, f1_score, contains_answer, numeric_match, similarity or llm_judgement.",
    )
    evaluator_model_name: str | None = Field(
        None,
        min_length=1,
        exclude_if=lambda v: v is None,
        description="llm_judgement: the evaluator model.",
    )
    evaluator_base_url: str | None = Field(
        None,
        min_length=1,
        exclude_if=lambda v: v is None,
        description="llm_judgement: the evaluator's OpenAI-compatible base URL.",
    )
    evaluator_temperature: float = Field(
        0.0,
        ge=0.0,
        le=2.0,
        allow_inf_nan=False,
        exclude_if=lambda v: v == 0.0,
        description="llm_judgement: temperature.",
    )
    evaluator_max_retries: int = Field(
        3,
        ge=0,
        strict=True,
        exclude_if=lambda v: v == 3,
        description="llm_judgement: retries of a failed call.",
    )
    evaluator_extra_params: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        exclude_if=lambda v: not v,
        description="llm_judgement: more request parameters, e.g. max_tokens.",
    )
    save_results: bool = Field(
        True,
        strict=True,
        exclude_if=lambda v: v is True,
        description="Write results.jsonl (data rows) when the job ends.",
    )
    save_trajectories: bool = Field(
        True,
        strict=True,
        exclude_if=lambda v: v is True,
        description="Keep each row's trajectory in results.jsonl.",
    )
    trajectory_only: bool = Field(
        False,
        strict=True,
        exclude_if=lambda v: v is False,
        description="Keep a minimal trajectory (no messages, no tool calls).",
    )
    save_summary: bool = Field(
        True,
        strict=True,
        exclude_if=lambda v: v is True,
        description="Write evaluation.json and summary_<benchmark>_<timestamp>.json at the end.",
    )

    @field_validator(
        "jobs_dir", "instruction_path", "evaluator_model_name", "evaluator_base_url", mode="before"
    )
    @classmethod
    def _text(cls, value: Any) -> Any:
        return text(value)

    @field_validator("jobs_dir")
    @classmethod
    def _jobs_dir(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lowercase(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("timeout_multiplier", "evaluator_temperature", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return not_bool(value)

    @field_validator("evaluator_extra_params")
    @classmethod
    def _extra_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        if clash := sorted(EVALUATOR_RESERVED_PARAMS & set(value)):
            raise ValueError(
                f"may not set {', '.join(clash)}: evaluator_model_name, the verifier's messages "
                "and evaluator_temperature make those"
            )
        return value

    @field_validator("metrics", mode="before")
    @classmethod
    def _no_metrics(cls, value: Any) -> Any:
        return [] if value is None else value

    @field_validator("metrics")
    @classmethod
    def _distinct_metrics(cls, value: list[Metric]) -> list[Metric]:
        if problems := duplicate_problems(
            [m.type.value for m in value], "metric", "metrics", "type"
        ):
            raise FieldErrors(problems)
        return value

    def job_settings(self) -> dict[str, Any]:
        """The shared settings, to build the other form of the job from this one."""
        settings = {name: getattr(self, name) for name in JobSettings.model_fields}
        # Each form has its own environment class (their default types differ): pass values.
        settings["environment"] = dict(self.environment)
        return settings
