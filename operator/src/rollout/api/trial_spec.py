"""A new trial's spec, from its job and its planned task: everything its environment and its
runner need, so that neither ever reads the job. Pure; the operator puts it in a RolloutTrial,
local mode hands it to the runner.

Effective timeouts are the task's after the job's overrides and multiplier; effective resources
are the job's override_cpus/memory/storage over the task's.
"""

from __future__ import annotations

from collections.abc import Callable

from rollout.api.errors import ErrorType
from rollout.api.plan import PlannedTrial
from rollout.api.quantity import normalize_cpus, normalize_memory
from rollout.api.resources import RolloutJob, RolloutTrialSpec, StorageSpec, TrialResources
from rollout.api.results import TrialError
from rollout.api.rules import ORACLE_AGENT
from rollout.api.task import TaskConfig
from rollout.api.taskdir import no_solution_message
from rollout.api.timeouts import effective_timeouts

UNBUILT_IMAGE = "unbuilt"
"""spec.image of a trial whose image must be built and is not named yet (the field is
required): local mode builds it itself, and on a cluster such a trial fails when it is made
(no registry, no Dockerfile); one built in the cluster is named (`built`)."""


def task_error(planned: PlannedTrial) -> TrialError | None:
    """Why a new trial cannot run because of its task (None: it can): the task is broken (its
    manifest entry's error), or the agent is the oracle and the task has no solution."""
    task = planned.task
    if task.error is not None:
        return task.error
    if planned.key.agent == ORACLE_AGENT and not task.has_solution:
        return TrialError(type=ErrorType.TASK_INVALID, message=no_solution_message(task.name))
    return None


def effective_resources(task: TaskConfig, job: RolloutJob) -> TrialResources:
    """The task's cpus/memory/storage after the job's overrides, as canonical quantities."""
    env = job.spec.environment

    def override(value: int | str | None, canonical: Callable[[int | str], str], own: str) -> str:
        return canonical(value) if value is not None else own

    return TrialResources(
        cpus=override(env.override_cpus, normalize_cpus, task.environment.cpus),
        memory=override(env.override_memory, normalize_memory, task.environment.memory),
        storage=override(env.override_storage, normalize_memory, task.environment.storage),
        gpus=task.environment.gpus,
    )


def trial_spec(
    job: RolloutJob,
    planned: PlannedTrial,
    *,
    storage: StorageSpec,
    runner_image: str,
    built: tuple[str, str] | None = None,
) -> RolloutTrialSpec:
    """A trial's spec: everything its Pod and its runner need, without reading the job.

    `built`: (image, RolloutImage name) when the operator builds the task's image in the
    cluster; the trial's Pod then waits for that RolloutImage.
    """
    spec = job.spec
    task = planned.task.config
    timeouts = effective_timeouts(
        task,
        multiplier=spec.timeout_multiplier,
        verifier_override_sec=spec.verifier.override_timeout_sec,
        verifier_max_sec=spec.verifier.max_timeout_sec,
    )
    agent = next(a for a in spec.agents if a.name == planned.key.agent)
    return RolloutTrialSpec(
        job_name=job.job_name,
        environment_type=spec.environment.type.on_cluster(),
        agent=agent,
        dataset_name=planned.key.dataset,
        task_name=planned.key.task,
        attempt=planned.key.attempt,
        task_content_hash=planned.task.content_hash,
        image=built[0] if built else task.environment.docker_image or UNBUILT_IMAGE,
        image_build=built[1] if built else None,
        resources=effective_resources(task, job),
        timeouts=timeouts,
        instruction_path=spec.instruction_path,
        verifier_disabled=spec.verifier.disable,
        agent_user=task.agent.user,
        verifier_user=task.verifier.user,
        isolate_agent=spec.isolate_agents,
        workdir=task.environment.workdir,
        egress=task.environment.egress if task.environment.egress.restricted else None,
        storage=storage,
        runner_image=runner_image,
        pod=spec.pod,
        preserve_env=spec.environment.preserve_env,
        log_level=spec.log_level,
    )
