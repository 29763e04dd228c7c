"""A new trial's spec, from its job and its planned task: everything its environment and its
runner need, so that neither ever reads the job. Pure; the operator puts it in a RolloutTrial,
local mode hands it to the runner.

Effective timeouts are the task's after the job's overrides and multiplier; effective resources
are the job's override_cpus/memory/storage over the task's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rollout.api.errors import ErrorType
from rollout.api.plan import PlannedShard, PlannedTrial
from rollout.api.quantity import normalize_cpus, normalize_memory
from rollout.api.resources import (
    UNBUILT_IMAGE,
    RolloutJob,
    RolloutTrialSpec,
    StorageSpec,
    TrialResources,
)
from rollout.api.results import TrialError
from rollout.api.rowrun import EvaluatorSettings, RowItem, RowVerifier, ShardRows
from rollout.api.rules import ORACLE_AGENT
from rollout.api.task import TaskConfig
from rollout.api.taskdir import no_solution_message
from rollout.api.timeouts import effective_timeouts
from rollout.api.verifiers import Metric, VerifierChoice


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
    rows_image: str | None = None,
    items: Sequence[RowItem] | None = None,
) -> RolloutTrialSpec:
    """A trial's spec: everything its Pod and its runner need, without reading the job.

    `built`: (image, RolloutImage name) when the operator builds the task's image in the
    cluster; the trial's Pod then waits for that RolloutImage. A shard's unit (`planned.shard`)
    gets its shard's spec, with `items` (a resumed job's rows that run again) or every row in
    it (`rows_image`: see `shard_spec`).
    """
    if planned.shard is not None:
        if items is None:
            items = [RowItem(id=t.key.task, attempt=t.key.attempt) for t in planned.shard.trials]
        return shard_spec(
            job,
            planned.shard,
            list(items),
            storage=storage,
            runner_image=runner_image,
            rows_image=rows_image,
        )
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
        environment_type=spec.environment.cluster_type,
        docker_host=spec.environment.docker_host,
        provider_secret=spec.environment.provider_secret,
        # The bridge's provider builds the image where it runs (the cluster's builds are Pods').
        force_build=spec.environment.force_build and spec.environment.runs_on_bridge,
        max_infra_retries=spec.max_infra_retries if spec.environment.runs_on_bridge else None,
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


def row_verifier(job: RolloutJob, planned: PlannedShard) -> VerifierChoice:
    """How a shard's rows are scored: job.yaml's evaluation_metric, else the dataset's own."""
    return planned.rows.verifier.under(job.spec.evaluation_metric)


def evaluator_problem(job: RolloutJob, verifier: VerifierChoice) -> str | None:
    """What an llm_judgement verifier lacks in the job's settings, or None."""
    if verifier.metric is not Metric.LLM_JUDGEMENT:
        return None
    missing = [
        name
        for name, value in (
            ("evaluator_model_name", job.spec.evaluator_model_name),
            ("evaluator_base_url", job.spec.evaluator_base_url),
        )
        if value is None
    ]
    if missing:
        return f"llm_judgement ({verifier.describe()}) needs {' and '.join(missing)} in the job"
    return None


def shard_spec(
    job: RolloutJob,
    shard: PlannedShard,
    items: list[RowItem],
    *,
    storage: StorageSpec,
    runner_image: str,
    rows_image: str | None = None,
) -> RolloutTrialSpec:
    """A shard's spec: its first row's trial spec, named shard-<n>, with the rows it runs
    (`items`: all of the shard's, or those a resumed job runs again). Its environment image is
    the dataset's docker_image, else `rows_image` (an operator setting), else the runner's."""
    spec = job.spec
    verifier = row_verifier(job, shard)
    evaluator = None
    if verifier.metric is Metric.LLM_JUDGEMENT:
        if problem := evaluator_problem(job, verifier):
            raise ValueError(problem)
        assert spec.evaluator_model_name is not None
        assert spec.evaluator_base_url is not None
        evaluator = EvaluatorSettings(
            model_name=spec.evaluator_model_name,
            base_url=spec.evaluator_base_url,
            temperature=spec.evaluator_temperature,
            max_retries=spec.evaluator_max_retries,
            extra_params=spec.evaluator_extra_params,
            api_key=spec.evaluator_api_key,
        )
    first = trial_spec(job, shard.trials[0], storage=storage, runner_image=runner_image)
    # Rows need no image of their own: without the dataset's docker_image, the environment
    # container runs the operator's rows image, else the runner's image (it has sh, and it holds
    # no credentials there: the environment container never gets them).
    image = first.image if first.image != UNBUILT_IMAGE else rows_image or runner_image
    return first.model_copy(
        update={
            "task_name": shard.key.task,
            "attempt": 1,
            "image": image,
            "rows": ShardRows(
                number=shard.number,
                items=items,
                verifier=RowVerifier.of(verifier),
                evaluator=evaluator,
                save_trajectories=spec.save_trajectories,
                trajectory_only=spec.trajectory_only,
            ),
        }
    )
