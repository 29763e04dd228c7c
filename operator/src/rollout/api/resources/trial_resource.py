"""The RolloutTrial resource: one agent's attempt at one task, and what came of it.

The spec holds everything needed to render the trial's Pod and run it, so that neither the Pod
renderer nor the runner (nor a bridge controller, later) reads the RolloutJob: the agent with its
env, the task's archive (`tasks/<taskContentHash>.tar.gz` in storage), the environment image, the
effective resources and timeouts (task values after the job's overrides and multiplier), users,
storage and pod overrides. Where the trial writes is derived, not stored:
`<storage.prefix>/jobs/<jobName>/<agent>/<datasetName>/<taskName>__<attempt>/`.

Status phases: `Pending` (no Pod running yet), `Running`, `Succeeded` (the trial ran to its end
without an error that kept the reward; the reward may be null when the verifier is disabled;
a teardown error alone still counts as Succeeded) and `Failed` (an error prevented the reward; its
type is one of the seed's error types). `failureClass` says whose failure the error is (agent,
task or infrastructure; `rollout.api.failures`), as the trial's result.json does. Durations and
timestamps use the names of the trial's result.json in camelCase (`agentExecutionSec`,
`verifierStartedAt`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from rollout.api.base import ApiModel
from rollout.api.environment import DockerHost, EnvironmentType, SecretName
from rollout.api.failures import FailureClass
from rollout.api.job_settings import LogLevel
from rollout.api.network import TrialEgress
from rollout.api.quantity import QUANTITY_PATTERN
from rollout.api.resources.common import (
    AGE_COLUMN,
    AgentSpec,
    CustomResource,
    PodOverrides,
    PrinterColumn,
    ResourceInfo,
    StorageSpec,
)
from rollout.api.resources.conditions import CONDITIONS_LIST_MAP, Condition
from rollout.api.results import TrialDurations, TrialError, TrialTimestamps
from rollout.api.rowrun import RowOutcome, ShardRows
from rollout.api.rules import (
    DEFAULT_INSTRUCTION_PATH,
    DatasetName,
    Digest,
    InstructionPath,
    JobName,
    TaskName,
    matching_pattern,
)
from rollout.api.service_agents import AgentKind
from rollout.api.timeouts import PhaseTimeouts

UNBUILT_IMAGE = "unbuilt"
"""spec.image of a trial whose image must be built and is not named yet (the field is
required): local mode and a bridge's provider build it themselves, and on a cluster a Pod's
trial fails when it is made (no registry, no Dockerfile); one built in the cluster is named
(`rollout.api.trial_spec.trial_spec`'s `built`)."""

Quantity = Annotated[
    str,
    matching_pattern(QUANTITY_PATTERN, "a Kubernetes quantity such as '1', '500m', '2G' or '10Gi'"),
    Field(json_schema_extra={"pattern": QUANTITY_PATTERN}),
]
TimeoutSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
User = int | str


class TrialPhase(StrEnum):
    """Where a RolloutTrial is in its life (see the module docstring)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class TrialResources(ApiModel):
    """The environment container's resources, as requests and limits."""

    cpus: Quantity = Field(description="CPU quantity, e.g. '1' or '500m'.")
    memory: Quantity = Field(description="Memory quantity, e.g. '2G' or '2048Mi'.")
    storage: Quantity = Field(description="Ephemeral storage quantity, e.g. '10G'.")
    gpus: int = Field(0, ge=0, description="Number of GPUs.")


class RolloutTrialSpec(ApiModel):
    """What to run for one trial; written by the operator from the RolloutJob."""

    job_name: JobName = Field(description="The job's name (spec.jobName of the RolloutJob).")
    environment_type: EnvironmentType = Field(
        EnvironmentType.KUBERNETES,
        description="kubernetes: the operator runs a Pod. docker (with dockerHost) and the "
        "provider types: the bridge controller (rollout-bridge) runs the trial.",
    )
    docker_host: DockerHost | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="type docker: the remote Docker engine the bridge runs the trial on.",
    )
    provider_secret: SecretName | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="A cloud provider's trial: the Secret (in the trial's namespace) whose keys "
        "are the provider's credentials, over the bridge's own.",
    )
    force_build: bool = Field(
        False,
        exclude_if=lambda v: v is False,
        description="A bridge trial: build the image from the task's environment/ even when the "
        "task names one (the job's environment.force_build).",
    )
    max_infra_retries: int | None = Field(
        None,
        ge=0,
        exclude_if=lambda v: v is None,
        description="A bridge trial: times it runs again after its sandbox or its bridge was "
        "lost (the job's maxInfraRetries; the operator reads the job's own for a Pod).",
    )
    agent: AgentSpec = Field(description="The agent, with its env.")
    dataset_name: DatasetName = Field(description="Dataset the task belongs to.")
    task_name: TaskName = Field(description="The task's name in its dataset.")
    attempt: int = Field(ge=1, description="Attempt number, from 1.")
    task_content_hash: Digest | None = Field(
        None,
        description="Content hash of the task; its files are tasks/<hash>.tar.gz in storage. "
        "Absent for a task that cannot run (task_invalid, task_not_found): its trial fails when "
        "it is created, with no Pod.",
    )
    image: str = Field(min_length=1, description="Image of the environment container.")
    image_build: str | None = Field(
        None,
        description="The RolloutImage that builds the image (an image built in the cluster): "
        "the trial's Pod waits until it is Ready and runs the image it names, pinned to its "
        "digest; a failed build fails the trial.",
    )
    resources: TrialResources = Field(description="Resources of the environment container.")
    timeouts: PhaseTimeouts = Field(description="Effective timeouts.")
    instruction_path: InstructionPath = Field(
        DEFAULT_INSTRUCTION_PATH, description="Where instruction.md is placed."
    )
    verifier_disabled: bool = Field(False, description="Skip the verifier.")
    agent_user: User | None = Field(
        None, description="User (name or uid) the agent runs as; default: the image's."
    )
    verifier_user: User | None = Field(
        None, description="User (name or uid) the verifier runs as; default: the image's."
    )
    isolate_agent: bool = Field(
        False,
        exclude_if=lambda v: v is False,  # absent when off: resources of earlier versions stay
        description="Without an agent user (agentUser, or the task's [agent] user), run the "
        "agent as an unprivileged user the runner creates in the container.",
    )
    workdir: str | None = Field(
        None, description="Working directory for agent and verifier; default: the image's."
    )
    egress: TrialEgress | None = Field(
        None,
        description="The task's restricted network access, which the job's NetworkPolicies "
        "enforce; null: no limit.",
    )
    storage: StorageSpec = Field(description="Object storage for the task files and results.")
    runner_image: str = Field(min_length=1, description="Image of the runner sidecar.")
    pod: PodOverrides = Field(
        default_factory=PodOverrides, description="Scheduling settings for the Pod."
    )
    preserve_env: bool = Field(False, description="Keep the environment after the trial.")
    log_level: LogLevel = Field(LogLevel.ERROR, description="Log level of the runner.")
    earlier_tries: int = Field(
        0,
        ge=0,
        exclude_if=lambda v: v == 0,
        description="Tries the trial had before this RolloutTrial (a resumed job's): its files "
        "are under retries/1..n/, and this trial's first Pod is try n+1.",
    )
    rows: ShardRows | None = Field(
        None,
        description="A shard of a data dataset: the rows this trial runs, each with its own "
        "trial directory (taskName is then shard-<n>, and taskContentHash names the rows "
        "archive); absent for a task's trial.",
    )

    @property
    def builds_image(self) -> bool:
        """Whether the trial's image is built from the task's environment/ where the trial runs
        (a bridge's provider): it names none yet, or the job forces a build."""
        return self.image == UNBUILT_IMAGE or self.force_build

    @property
    def needs_environment(self) -> bool:
        """Whether the trial has an environment container. Data rows answered by the oracle
        (from their ground truth), an endpoint or a model (HTTP clients in the runner) have none:
        the Pod holds the runner alone."""
        return not (self.rows is not None and self.agent.kind is not AgentKind.SCRIPT)


class RolloutTrialStatus(ApiModel):
    """What happened; written by the operator (or the bridge controller) only."""

    phase: TrialPhase | None = Field(None, description="Pending, Running, Succeeded or Failed.")
    observed_generation: int | None = Field(
        None, ge=0, description="The metadata.generation this status describes."
    )
    reward: float | None = Field(
        None, allow_inf_nan=False, description="The verifier's reward; null without one."
    )
    cost: float | None = Field(
        None, allow_inf_nan=False, description="Cost of the trial, when known."
    )
    error: TrialError | None = Field(None, description="The trial's error, if any.")
    failure_class: FailureClass | None = Field(
        None, description="Whose failure the error is: agent, task or infrastructure."
    )
    durations: TrialDurations | None = Field(None, description="Seconds per phase.")
    timestamps: TrialTimestamps | None = Field(None, description="Start and end of each phase.")
    result_uri: str | None = Field(
        None, description="URI of the trial's result.json in storage (s3://bucket/key)."
    )
    pod_name: str | None = Field(None, description="The Pod running (or that ran) the trial.")
    rows: list[RowOutcome] | None = Field(
        None,
        description="A shard of data rows: each row's outcome, once the shard has finished.",
    )
    infra_retries: int = Field(
        0, ge=0, description="Times the trial was restarted after its Pod was lost."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="PodReady, Complete, Failed; one per type.",
        json_schema_extra=CONDITIONS_LIST_MAP,
    )


class RolloutTrial(CustomResource):
    """One trial: an agent's attempt at a task, run in its own Pod."""

    resource: ClassVar[ResourceInfo] = ResourceInfo(
        kind="RolloutTrial",
        plural="rollouttrials",
        singular="rollouttrial",
        short_names=("rt",),
        printer_columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Where the trial is."),
            PrinterColumn("Agent", "string", ".spec.agent.name", "The agent."),
            PrinterColumn("Dataset", "string", ".spec.datasetName", "The dataset.", priority=1),
            PrinterColumn("Task", "string", ".spec.taskName", "The task."),
            PrinterColumn("Attempt", "integer", ".spec.attempt", "Attempt number."),
            PrinterColumn("Reward", "number", ".status.reward", "The verifier's reward."),
            PrinterColumn("Error", "string", ".status.error.type", "The error type, if any."),
            PrinterColumn(
                "Class",
                "string",
                ".status.failureClass",
                "Whose failure: agent, task, infrastructure.",
            ),
            PrinterColumn("Pod", "string", ".status.podName", "The trial's Pod.", priority=1),
            AGE_COLUMN,
        ),
    )

    kind: Literal["RolloutTrial"] = Field("RolloutTrial", description="RolloutTrial.")
    spec: RolloutTrialSpec = Field(description="What to run.")
    status: RolloutTrialStatus | None = Field(None, description="What happened.")
