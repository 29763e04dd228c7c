"""A job's trials: its datasets' tasks, and the seed's enumeration over agents, datasets, tasks
and attempts, each trial with its deterministic resource name. Pure: the operator plans from the
manifests it reads from storage, local mode from the ones it has just built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from rollout.api.errors import InvalidInput
from rollout.api.manifest import DatasetManifest
from rollout.api.results import TrialError
from rollout.api.task import TaskConfig
from rollout.api.trials import TrialKey, enumerate_trials, trial_resource_name


@dataclass(frozen=True, slots=True)
class ResolvedTask:
    """A task of a published dataset, with its parsed task.toml."""

    name: str
    content_hash: str | None
    """Names the task's archive; None for a broken task, which has none."""
    config: TaskConfig
    has_solution: bool = True
    """Whether the oracle can run it (solution/solve.sh or a root solve.sh)."""
    error: TrialError | None = None
    """Why the task cannot run (task_invalid, task_not_found): its trials fail at creation."""
    environment_hash: str | None = None
    """Content hash of its environment/ with a Dockerfile (names the build context); None:
    nothing to build."""


@dataclass(frozen=True, slots=True)
class ResolvedDataset:
    """A job's dataset: the name the job gives it (which names its results) and its tasks."""

    name: str
    digest: str
    tasks: tuple[ResolvedTask, ...]


def resolved_tasks(manifest: DatasetManifest, where: str) -> tuple[ResolvedTask, ...]:
    """The tasks of a dataset manifest with their task.toml parsed; InvalidInput (naming `where`
    and the task) for an entry whose task.toml does not parse."""
    tasks: list[ResolvedTask] = []
    for task in manifest.tasks:
        try:
            config = task.task_config()
        except InvalidInput as err:
            raise InvalidInput.one(where, f"task {task.name!r}", str(err)) from None
        tasks.append(
            ResolvedTask(
                task.name,
                task.content_hash,
                config,
                task.has_solution,
                task.error,
                task.environment_hash,
            )
        )
    return tuple(tasks)


@dataclass(frozen=True, slots=True)
class PlannedTrial:
    """One trial of the plan: its key (with its place in the order), name and task."""

    key: TrialKey
    name: str
    task: ResolvedTask


@dataclass(frozen=True)
class JobPlan:
    """Every trial of a job, in the seed's order."""

    trials: tuple[PlannedTrial, ...]

    def __len__(self) -> int:
        return len(self.trials)

    @cached_property
    def names(self) -> frozenset[str]:
        """Every trial's name (made once: reconcilers ask on every pass)."""
        return frozenset(t.name for t in self.trials)

    @cached_property
    def by_name(self) -> dict[str, PlannedTrial]:
        """Every trial by its name."""
        return {t.name: t for t in self.trials}


def plan_job(
    job_resource_name: str,
    agent_names: Sequence[str],
    datasets: Sequence[ResolvedDataset],
    n_attempts: int,
) -> JobPlan:
    """The job's trials in order, named from (job resource name, agent, dataset, task, attempt).

    The RolloutJob's metadata.name (unique in its namespace) names the trials, so two jobs that
    share a spec.jobName cannot collide.
    """
    tasks = {(d.name, t.name): t for d in datasets for t in d.tasks}
    keys = enumerate_trials(
        agent_names, [(d.name, [t.name for t in d.tasks]) for d in datasets], n_attempts
    )
    return JobPlan(
        tuple(
            PlannedTrial(
                key,
                trial_resource_name(
                    job_resource_name, key.agent, key.dataset, key.task, key.attempt
                ),
                tasks[(key.dataset, key.task)],
            )
            for key in keys
        )
    )
