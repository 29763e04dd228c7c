"""The RolloutJob resource: a job.yaml plus what a cluster needs, and the job's progress.

Spec: everything job.yaml has, in camelCase (`jobName` keeps the job's own name, which names its
results in storage and may be anything job.yaml allows, while metadata.name must be a DNS name),
plus storage, the runner image, pod overrides, infrastructure retries, suspend and a TTL. The
operator never writes the spec; what it works out goes to status.

Two defaults differ from job.yaml because this is a cluster resource: `environment.type` is
`kubernetes` (job.yaml's default is `docker`), and `storage`/`runnerImage` may be left out to use
the operator's configured defaults. `jobName` defaults to metadata.name.

Status phases:

- `Pending`: accepted, not checked or started yet;
- `Running`: trials are being created or run;
- `Suspended`: `spec.suspend` is true; no new trials start (running ones finish);
- `Completed`: every trial has finished. Trials that failed are counted in `counts.failed` and
  do not fail the job: a trial failure is a result of the evaluation;
- `Failed`: the job itself could not run (invalid spec, dataset missing from storage); the
  `Valid` or `Failed` condition says why.

There is no "Cancelled": deleting the RolloutJob cancels it (its trials are owned and go with it).
The status stays small whatever the number of trials: counts and per-agent aggregates, never a
list of trials.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AwareDatetime, Field, field_validator

from rollout.api.base import ResourceModel
from rollout.api.job import (
    DEFAULT_INSTRUCTION_PATH,
    EnvironmentType,
    FieldErrors,
    JobDataset,
    LogLevel,
    check_bytes_override,
    check_cpus_override,
    duplicate_problems,
    zero_is_unset,
)
from rollout.api.metrics import MetricType
from rollout.api.resources.common import (
    AGE_COLUMN,
    AgentSpec,
    DatasetName,
    Digest,
    InstructionPath,
    IntOrQuantity,
    JobName,
    ObjectMeta,
    PodOverrides,
    PrinterColumn,
    ResourceInfo,
    StorageSpec,
    check_agents,
)
from rollout.api.resources.conditions import CONDITIONS_LIST_MAP, Condition

Count = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


class JobPhase(StrEnum):
    """Where a RolloutJob is in its life (see the module docstring)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    COMPLETED = "Completed"
    FAILED = "Failed"


class JobEnvironmentSpec(ResourceModel):
    """Where trials run and what of each task's environment to override."""

    type: EnvironmentType = Field(
        EnvironmentType.KUBERNETES,
        description="kubernetes runs each trial in a Pod, the one type this version runs (the "
        "rollout CLI submits job.yaml's docker as kubernetes). docker, modal, daytona and e2b "
        "are kept for a bridge controller that does not exist yet: a job of those types is "
        "refused (condition Valid=False).",
    )
    force_build: bool = Field(
        False, description="Build from environment/Dockerfile even when a task names an image."
    )
    preserve_env: bool = Field(
        False, description="Keep each trial's environment (its Pod) after the trial ends."
    )
    override_cpus: IntOrQuantity | None = Field(
        None, description="If set, replaces every task's environment.cpus."
    )
    override_memory: IntOrQuantity | None = Field(
        None, description="If set, replaces every task's environment.memory (bare number: MiB)."
    )
    override_storage: IntOrQuantity | None = Field(
        None, description="If set, replaces every task's environment.storage (bare number: MiB)."
    )

    @field_validator("override_cpus", "override_memory", "override_storage", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        # Unlike job.yaml, no float is taken: the apiserver takes only an integer or a string.
        if isinstance(value, bool):
            raise ValueError(f"expected an integer or a quantity string, got {value}")
        return value

    @field_validator("override_cpus")
    @classmethod
    def _check_cpus(cls, value: int | str | None) -> int | str | None:
        return check_cpus_override(value)

    @field_validator("override_memory", "override_storage")
    @classmethod
    def _check_bytes(cls, value: int | str | None) -> int | str | None:
        return check_bytes_override(value)


class JobVerifierSpec(ResourceModel):
    """Job-level verifier settings."""

    override_timeout_sec: Seconds | None = Field(
        None, description="If set (not 0 or null), replaces each task's verifier.timeout_sec."
    )
    max_timeout_sec: Seconds | None = Field(
        None, description="If set (not 0 or null), the ceiling of every verifier timeout."
    )
    disable: bool = Field(False, description="Do not run the verifier (collect traces only).")

    @field_validator("override_timeout_sec", "max_timeout_sec")
    @classmethod
    def _zero_is_unset(cls, value: float | None) -> float | None:
        return zero_is_unset(value)


class MetricSpec(ResourceModel):
    """A job-level metric over trial rewards."""

    type: MetricType = Field(description="One of sum, min, max, mean.")


class DatasetRef(ResourceModel):
    """A dataset published to storage: its name and the digest of its bundle manifest."""

    name: DatasetName = Field(description="Dataset name; also its results directory.")
    digest: Digest = Field(
        description="sha256 of the dataset's bundle manifest: datasets/<digest>.json in storage."
    )
    source: JobDataset | None = Field(
        None,
        description="The job.yaml entry the dataset was published from (path, or registry with "
        "name and version); kept for display and to give back job.yaml.",
    )


class RolloutJobSpec(ResourceModel):
    """What to run: job.yaml's settings, plus where results go and how trial Pods look."""

    job_name: JobName | None = Field(
        None,
        description="The job's name in job.yaml, which names its results (jobs/<jobName>/); "
        "defaults to metadata.name.",
    )
    jobs_dir: str = Field(
        "jobs", min_length=1, description="Local directory the CLI downloads results to."
    )
    n_attempts: int = Field(1, ge=1, description="Attempts per (agent, task) pair.")
    n_concurrent_trials: int = Field(4, ge=1, description="Most trials running at the same time.")
    timeout_multiplier: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="Multiplies every timeout."
    )
    log_level: LogLevel = Field(LogLevel.ERROR, description="Log level of the runner.")
    instruction_path: InstructionPath = Field(
        DEFAULT_INSTRUCTION_PATH,
        description="Where instruction.md is placed ($ROLLOUT_TASK_INSTRUCTION holds it).",
    )
    environment: JobEnvironmentSpec = Field(
        default_factory=JobEnvironmentSpec, description="Environment provider and overrides."
    )
    verifier: JobVerifierSpec = Field(
        default_factory=JobVerifierSpec, description="Verifier settings."
    )
    metrics: list[MetricSpec] = Field(
        default_factory=list, description="Job-level metrics over trial rewards."
    )
    agents: list[AgentSpec] = Field(min_length=1, description="The agents to evaluate.")
    datasets: list[DatasetRef] = Field(
        min_length=1, description="The datasets to evaluate on, as published to storage."
    )
    storage: StorageSpec | None = Field(
        None, description="Object storage for datasets and results; default: the operator's."
    )
    runner_image: str | None = Field(
        None, min_length=1, description="Image of the runner sidecar; default: the operator's."
    )
    pod: PodOverrides = Field(
        default_factory=PodOverrides, description="Scheduling settings for every trial Pod."
    )
    max_infra_retries: int = Field(
        2,
        ge=0,
        description="Times a trial is retried when its Pod is deleted, evicted or lost "
        "(infrastructure failures, not trial errors).",
    )
    suspend: bool = Field(False, description="While true, no new trial starts.")
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, description="Delete the RolloutJob this many seconds after it finishes."
    )

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: list[AgentSpec]) -> list[AgentSpec]:
        return check_agents(value)

    @field_validator("datasets")
    @classmethod
    def _distinct_datasets(cls, value: list[DatasetRef]) -> list[DatasetRef]:
        # Results are stored per dataset name: two datasets with one name would collide.
        if problems := duplicate_problems([d.name for d in value], "dataset name", "datasets"):
            raise FieldErrors(problems)
        return value

    @field_validator("metrics")
    @classmethod
    def _distinct_metrics(cls, value: list[MetricSpec]) -> list[MetricSpec]:
        names = [m.type.value for m in value]
        if problems := duplicate_problems(names, "metric", "metrics", "type"):
            raise FieldErrors(problems)
        return value


class TrialCounts(ResourceModel):
    """How many trials are where. completed and failed follow the seed's definitions."""

    total: Count = Field(0, description="Trials the job has (agents x tasks x attempts).")
    pending: Count = Field(0, description="Trials not started yet.")
    running: Count = Field(0, description="Trials started and not finished.")
    finished: Count = Field(0, description="Trials that ended, whatever the outcome.")
    completed: Count = Field(0, description="Finished trials whose verifier produced a reward.")
    failed: Count = Field(
        0, description="Finished trials where an error prevented the reward (not teardown)."
    )


class MetricStatus(ResourceModel):
    """A configured metric and its current value."""

    type: MetricType = Field(description="The metric.")
    value: FiniteFloat | None = Field(
        None, description="Over the rewards of completed trials; null when none completed."
    )


class AgentStatus(ResourceModel):
    """One agent's aggregate over its trials."""

    total: Count = Field(0, description="The agent's trials.")
    completed: Count = Field(0, description="Its trials whose verifier produced a reward.")
    failed: Count = Field(0, description="Its trials an error kept from a reward.")
    pass_rate: Fraction | None = Field(None, description="Completed trials with reward 1.0.")
    mean_reward: FiniteFloat | None = Field(None, description="Mean reward of completed trials.")
    total_cost: FiniteFloat | None = Field(None, description="Sum of its trials' costs.")


class RolloutJobStatus(ResourceModel):
    """Progress and results of the job; written by the operator only."""

    phase: JobPhase | None = Field(
        None, description="Pending, Running, Suspended, Completed or Failed."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation this status describes."
    )
    counts: TrialCounts = Field(default_factory=TrialCounts, description="Trials by state.")
    pass_rate: Fraction | None = Field(
        None, description="Share of completed trials with reward 1.0."
    )
    mean_reward: FiniteFloat | None = Field(None, description="Mean reward over completed trials.")
    total_cost: FiniteFloat | None = Field(None, description="Sum of trial costs so far.")
    metrics: list[MetricStatus] = Field(
        default_factory=list, description="The job's configured metrics."
    )
    agents: dict[str, AgentStatus] = Field(
        default_factory=dict, description="Aggregates per agent name."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Valid, Running, Suspended, Complete, Failed; one per type.",
        json_schema_extra=CONDITIONS_LIST_MAP,
    )
    started_at: AwareDatetime | None = Field(None, description="When the first trial started.")
    ended_at: AwareDatetime | None = Field(None, description="When the last trial ended.")
    result_uri: str | None = Field(
        None, description="URI of the job's result.json in storage (s3://bucket/key)."
    )


class RolloutJob(ResourceModel):
    """A job of agent evaluations: trials of every agent on every task of every dataset."""

    resource: ClassVar[ResourceInfo] = ResourceInfo(
        kind="RolloutJob",
        plural="rolloutjobs",
        singular="rolloutjob",
        short_names=("rj",),
        printer_columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Where the job is in its life."),
            PrinterColumn(
                "Completed", "integer", ".status.counts.completed", "Trials with a reward."
            ),
            PrinterColumn(
                "Failed", "integer", ".status.counts.failed", "Trials an error kept from a reward."
            ),
            PrinterColumn("Total", "integer", ".status.counts.total", "Trials of the job."),
            PrinterColumn(
                "Pass Rate", "number", ".status.passRate", "Completed trials with reward 1.0."
            ),
            AGE_COLUMN,
        ),
    )

    api_version: Literal["rollout.dev/v1alpha1"] = Field(
        "rollout.dev/v1alpha1", description="rollout.dev/v1alpha1."
    )
    kind: Literal["RolloutJob"] = Field("RolloutJob", description="RolloutJob.")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta, description="Object metadata.")
    spec: RolloutJobSpec = Field(description="What to run.")
    status: RolloutJobStatus | None = Field(None, description="How far it got.")

    @property
    def job_name(self) -> str:
        """The job's name for storage and display: spec.jobName, else metadata.name."""
        name = self.spec.job_name or self.metadata.name
        if not name:
            raise ValueError("a RolloutJob needs metadata.name or spec.jobName")
        return name

    def manifest(self) -> dict[str, Any]:
        """The object as the Kubernetes API takes it: camelCase, nulls left out."""
        return self.model_dump(mode="json", exclude_none=True)
