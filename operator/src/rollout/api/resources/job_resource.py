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
list of trials. `failures` splits `counts.failed` by whose failure each was (agent, task,
infrastructure; `rollout.api.failures`), so that infrastructure failures stand out.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import AwareDatetime, Field, field_validator, model_validator

from rollout.api.additions import FailureCounts
from rollout.api.base import ApiModel
from rollout.api.environment import ClusterEnvironmentSettings
from rollout.api.errors import ErrorType
from rollout.api.job import JobDataset
from rollout.api.job_settings import JobSettings, check_agent_names
from rollout.api.metrics import MetricValue
from rollout.api.problems import FieldErrors
from rollout.api.resources.common import (
    AGE_COLUMN,
    AgentSpec,
    CustomResource,
    PodOverrides,
    PrinterColumn,
    ResourceInfo,
    SecretKeySelector,
    StorageSpec,
)
from rollout.api.resources.conditions import CONDITIONS_LIST_MAP, Condition
from rollout.api.results import AgentSummary
from rollout.api.rules import DatasetName, Digest, JobName, duplicate_problems

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


class DatasetRef(ApiModel):
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


class _JobName(ApiModel):
    # A base of its own so that `jobName` comes first in the spec (pydantic orders fields
    # base-first), as `name` does in job.yaml.
    job_name: JobName | None = Field(
        None,
        description="The job's name in job.yaml, which names its results (jobs/<jobName>/); "
        "defaults to metadata.name.",
    )


class RolloutJobSpec(JobSettings, _JobName):
    """What to run: job.yaml's settings, plus where results go and how trial Pods look."""

    environment: ClusterEnvironmentSettings = Field(
        default_factory=ClusterEnvironmentSettings,
        description="Environment provider and overrides.",
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
    resume: bool = Field(
        False,
        exclude_if=lambda v: v is False,
        description="Resume the job of this jobName in storage: a trial whose record there "
        "was scored, or failed for a reason of the agent's or the task's, keeps it and does not "
        "run; the others (no record, an infrastructure failure, an error type in retryErrors) "
        "run again, their earlier tries' files kept under retries/<k>/. Read when the job is "
        "planned (created, or a new generation); result.json counts every trial.",
    )
    retry_errors: list[ErrorType] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="With resume: error types whose trials run again too "
        "(e.g. agent_execution_timeout).",
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, description="Delete the RolloutJob this many seconds after it finishes."
    )
    evaluator_api_key: SecretKeySelector | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="llm_judgement: the Secret key holding the evaluator's API key.",
    )

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: list[AgentSpec]) -> list[AgentSpec]:
        check_agent_names(value)
        return value

    @model_validator(mode="after")
    def _retry_errors_with_resume(self) -> RolloutJobSpec:
        if self.retry_errors and not self.resume:
            raise FieldErrors(
                [("retryErrors", "is only read with resume: true (set resume, or drop it)")]
            )
        return self

    @field_validator("datasets")
    @classmethod
    def _distinct_datasets(cls, value: list[DatasetRef]) -> list[DatasetRef]:
        # Results are stored per dataset name: two datasets with one name would collide.
        if problems := duplicate_problems([d.name for d in value], "dataset name", "datasets"):
            raise FieldErrors(problems)
        return value


class TrialCounts(ApiModel):
    """How many trials are where. completed and failed follow the seed's definitions."""

    total: Count = Field(0, description="Trials the job has (agents x tasks x attempts).")
    pending: Count = Field(0, description="Trials not started yet.")
    running: Count = Field(0, description="Trials started and not finished.")
    finished: Count = Field(0, description="Trials that ended, whatever the outcome.")
    completed: Count = Field(0, description="Finished trials whose verifier produced a reward.")
    failed: Count = Field(
        0, description="Finished trials where an error prevented the reward (not teardown)."
    )


class RolloutJobStatus(ApiModel):
    """Progress and results of the job; written by the operator only."""

    phase: JobPhase | None = Field(
        None, description="Pending, Running, Suspended, Completed or Failed."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation this status describes."
    )
    counts: TrialCounts = Field(default_factory=TrialCounts, description="Trials by state.")
    failures: FailureCounts | None = Field(
        None,
        description="Failed trials by whose failure it was: agent, task, infrastructure.",
    )
    pass_rate: Fraction | None = Field(
        None, description="Share of completed trials with reward 1.0."
    )
    mean_reward: FiniteFloat | None = Field(None, description="Mean reward over completed trials.")
    total_cost: FiniteFloat | None = Field(None, description="Sum of trial costs so far.")
    metrics: list[MetricValue] = Field(
        default_factory=list, description="The job's configured metrics."
    )
    agents: dict[str, AgentSummary] = Field(
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


class RolloutJob(CustomResource):
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
            PrinterColumn(
                "Infra Failed",
                "integer",
                ".status.failures.infrastructure",
                "Failed trials whose error is the infrastructure's.",
                priority=1,
            ),
            PrinterColumn("Total", "integer", ".status.counts.total", "Trials of the job."),
            PrinterColumn(
                "Pass Rate", "number", ".status.passRate", "Completed trials with reward 1.0."
            ),
            AGE_COLUMN,
        ),
    )

    kind: Literal["RolloutJob"] = Field("RolloutJob", description="RolloutJob.")
    spec: RolloutJobSpec = Field(description="What to run.")
    status: RolloutJobStatus | None = Field(None, description="How far it got.")

    @property
    def job_name(self) -> str:
        """The job's name for storage and display: spec.jobName, else metadata.name."""
        name = self.spec.job_name or self.metadata.name
        if not name:
            raise ValueError("a RolloutJob needs metadata.name or spec.jobName")
        return name
