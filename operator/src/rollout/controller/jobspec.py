"""What a RolloutJob's spec means to its reconciler, once per generation. Pure: no I/O.

A job's spec is understood in two steps, and is in one of these states:

- `Unplanned`: the spec is a valid RolloutJob (`parse_job`); its datasets are not read yet;
- `Planned`: its datasets are read from storage and its trials planned (`check_job` before the
  read, `plan_trials` after);
- `Invalid`: the job cannot run as specified (a condition reason and what is wrong);
- `StorageUnavailable`: storage could not be reached to read its datasets (tried again later).

The reconciler keeps a generation's `Planned` or `Invalid` until the spec changes; reading the
datasets (the one step with I/O) is `jobexec.JobExecutor.resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rollout.api.environment import BRIDGE_ROWS
from rollout.api.plan import JobPlan, ResolvedDataset, TooManyTrials, pick_tasks, plan_job
from rollout.api.problems import validation_problems
from rollout.api.resources import JobConditionReason, RolloutJob, RolloutJobStatus, StorageSpec
from rollout.api.trial_spec import evaluator_problem, row_verifier
from rollout.controller.buckets import NoStorage, job_storage_spec
from rollout.controller.netpolicy import PolicyPlan, policy_plan
from rollout.controller.resume import Resumed


@dataclass(frozen=True)
class Unplanned:
    """A valid spec whose datasets are not read yet."""

    job: RolloutJob


@dataclass(frozen=True)
class Planned:
    """A valid spec with its trials planned: a job this operator can run (in Pods)."""

    job: RolloutJob
    plan: JobPlan
    storage: StorageSpec
    policies: PolicyPlan | None = None
    """What the job's NetworkPolicies are made from (None: no trial of it needs one)."""
    resumed: Resumed | None = None
    """A resumed job (`spec.resume`): what its earlier run left (`resume`)."""


@dataclass(frozen=True)
class Invalid:
    """The job cannot run as specified: the reason (a condition reason) and what is wrong."""

    reason: JobConditionReason
    message: str


@dataclass(frozen=True)
class StorageUnavailable:
    """Storage could not be reached to read the job's datasets."""

    message: str


JobSpec = Unplanned | Planned | Invalid | StorageUnavailable


def plain(value: Any) -> Any:
    """A kopf body (mapping views over the raw object) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def parse_status(raw: Any) -> RolloutJobStatus:
    """The job's status as the model; an unreadable status counts as none."""
    try:
        return RolloutJobStatus.model_validate(plain(raw or {}))
    except ValidationError:
        return RolloutJobStatus()


def parse_job(body: Mapping[str, Any], where: str) -> Unplanned | Invalid:
    """The job's body as the model, or what is wrong with it."""
    raw = {key: plain(body.get(key)) for key in ("apiVersion", "kind", "metadata", "spec")}
    try:
        return Unplanned(RolloutJob.model_validate(raw))
    except ValidationError as err:
        problems = validation_problems(err, where, RolloutJob)
        return Invalid(JobConditionReason.INVALID_SPEC, "; ".join(str(p) for p in problems))


def check_job(
    job: RolloutJob, default_storage: StorageSpec | None, where: str
) -> StorageSpec | Invalid:
    """The storage to read the job's datasets from, unless the job cannot run here at all."""
    if refusal := job.spec.environment.refusal_on_cluster():
        # Its trials would wait forever for a provider no bridge controller has.
        return Invalid(
            JobConditionReason.UNSUPPORTED_ENVIRONMENT,
            f"{where}: spec.environment.type is {refusal}",
        )
    try:
        return job_storage_spec(job.spec.storage, default_storage)
    except NoStorage as err:
        return Invalid(JobConditionReason.INVALID_SPEC, f"{where}: {err}")


def plan_trials(
    job: RolloutJob,
    resource_name: str,
    datasets: Sequence[ResolvedDataset],
    storage: StorageSpec,
    where: str,
) -> Planned | Invalid:
    """The job's trials from its resolved datasets (named after the RolloutJob's metadata.name)."""
    spec = job.spec
    try:
        picked = pick_tasks(
            datasets, max_tasks=spec.max_tasks, task_ids=spec.task_ids, where=f"{where}: spec"
        )
        agents = [a.name for a in spec.agents]
        plan = plan_job(
            resource_name, agents, picked, spec.n_attempts, shard_size=spec.shard_size
        ).as_units()
    except TooManyTrials as err:
        return Invalid(JobConditionReason.INVALID_SPEC, f"{where}: spec.nAttempts: {err}")
    except ValueError as err:  # InvalidInput among them
        return Invalid(JobConditionReason.INVALID_SPEC, f"{where}: {err}")
    if problem := _row_problem(job, plan):
        return Invalid(JobConditionReason.INVALID_SPEC, f"{where}: {problem}")
    # Worked out once per plan: a job of many trials is not looked through again at each pass.
    return Planned(job, plan, storage, policy_plan(job, storage, plan))


def _row_problem(job: RolloutJob, plan: JobPlan) -> str | None:
    """What keeps the job's data rows from being scored (llm_judgement without its settings), or
    from running at all (on the bridge, which does not run shards of rows yet)."""
    for shard in plan.shards:
        if job.spec.environment.runs_on_bridge:
            refusal = BRIDGE_ROWS.format(name=shard.key.dataset, field="dockerHost")
            return f"spec.environment.dockerHost: {refusal}"
        if problem := evaluator_problem(job, row_verifier(job, shard)):
            return f"dataset {shard.key.dataset}: {problem}"
    return None
