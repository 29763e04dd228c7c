"""A job's trials: its datasets' tasks, and the seed's enumeration over agents, datasets, tasks
and attempts, each trial with its deterministic resource name. Pure: the operator plans from the
manifests it reads from storage, local mode from the ones it has just built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from pydantic import ValidationError

from rollout.api.errors import InvalidInput
from rollout.api.job_settings import DEFAULT_SHARD_SIZE
from rollout.api.manifest import DatasetManifest
from rollout.api.results import TrialError
from rollout.api.rowrun import RowVerifier, shard_task_name
from rollout.api.subset import select_names
from rollout.api.task import TaskConfig
from rollout.api.trials import TrialKey, enumerate_trials, trial_resource_name
from rollout.api.verifiers import VerifierChoice


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
class ResolvedRows:
    """What a data dataset's rows share: their archive, defaults and verifier."""

    content_hash: str
    config: TaskConfig
    verifier: VerifierChoice


@dataclass(frozen=True, slots=True)
class ResolvedDataset:
    """A job's dataset: the name the job gives it (which names its results) and its tasks (a
    data dataset's rows, each a task named by its id)."""

    name: str
    digest: str
    tasks: tuple[ResolvedTask, ...]
    rows: ResolvedRows | None = None


def pick_tasks(
    datasets: Sequence[ResolvedDataset],
    *,
    max_tasks: int | None,
    task_ids: Sequence[str] | None,
    where: str = "job",
) -> list[ResolvedDataset]:
    """The datasets with only the tasks (rows) a job picks: those `task_ids` names that a
    dataset has (an id that no dataset has is an InvalidInput), then each dataset's first
    `max_tasks` (`rollout.api.subset`)."""
    if max_tasks is None and task_ids is None:
        return list(datasets)
    wanted: set[str] | None = None
    if task_ids is not None:
        every = list(dict.fromkeys(t.name for d in datasets for t in d.tasks))
        wanted = set(select_names(every, max_tasks=None, task_ids=task_ids, where=where))
    picked: list[ResolvedDataset] = []
    for dataset in datasets:
        tasks = [t for t in dataset.tasks if wanted is None or t.name in wanted]
        if max_tasks is not None:
            tasks = tasks[:max_tasks]
        picked.append(replace(dataset, tasks=tuple(tasks)))
    return picked


def resolved_dataset(manifest: DatasetManifest, name: str, digest: str) -> ResolvedDataset:
    """A published dataset as a job uses it, under the name the job gives it."""
    where = f"dataset {name}"
    rows = manifest.rows
    if rows is None:
        return ResolvedDataset(name, digest, resolved_tasks(manifest, where))
    try:
        config = rows.task_config()
        verifier = RowVerifier.model_validate(rows.verifier).choice()
    except (InvalidInput, ValidationError, ValueError) as err:
        raise InvalidInput.one(where, "rows", f"the manifest's rows are invalid: {err}") from None
    shared = ResolvedRows(rows.content_hash, config, verifier)
    tasks = tuple(ResolvedTask(row_id, rows.content_hash, config, True) for row_id in rows.ids)
    return ResolvedDataset(name, digest, tasks, shared)


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
    """One trial of the plan: its key (with its place in the order), name and task; or a shard
    of data rows as one trial resource (`shard` set; see `JobPlan.units`)."""

    key: TrialKey
    name: str
    task: ResolvedTask
    shard: PlannedShard | None = None


@dataclass(frozen=True, slots=True)
class PlannedShard:
    """A shard of a data dataset's row trials (`rollout.api.rowrun`): one trial resource and
    one runner for up to shard_size consecutive (row, attempt)s of one agent and dataset."""

    key: TrialKey
    """(agent, dataset, shard-<n>, 1), its index the first row trial's place in the order."""
    name: str
    number: int
    trials: tuple[PlannedTrial, ...]
    rows: ResolvedRows


@dataclass(frozen=True)
class JobPlan:
    """Every trial of a job, in the seed's order, and the shards its data rows run in."""

    trials: tuple[PlannedTrial, ...]
    shards: tuple[PlannedShard, ...] = ()

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

    @cached_property
    def sharded(self) -> frozenset[str]:
        """The names of the trials that run in shards (data rows)."""
        return frozenset(t.name for shard in self.shards for t in shard.trials)

    @cached_property
    def units(self) -> tuple[PlannedTrial, ...]:
        """What runs, in order, one trial resource each: each task trial on its own, and each
        shard once, in the place of its first row (a PlannedTrial with `shard` set, its task
        the shard's rows archive)."""
        sharded = self.sharded
        firsts = {shard.trials[0].name: shard for shard in self.shards}
        units: list[PlannedTrial] = []
        for trial in self.trials:
            if (shard := firsts.get(trial.name)) is not None:
                task = replace(trial.task, name=shard.key.task)
                units.append(PlannedTrial(shard.key, shard.name, task, shard))
            elif trial.name not in sharded:
                units.append(trial)
        return tuple(units)

    def as_units(self) -> JobPlan:
        """The plan whose trials are its units (`units`): what the operator creates, one
        RolloutTrial each; the seed's trials stay countable through each unit's shard."""
        if not self.shards:
            return self
        return JobPlan(self.units, self.shards)

    @cached_property
    def trial_count(self) -> int:
        """The seed's trials the plan stands for: a unit plan's shards count their rows."""
        return sum(len(t.shard.trials) if t.shard is not None else 1 for t in self.trials)


MAX_TRIALS = 250_000
"""The most trials one job may have (agents x tasks or rows x attempts): the operator plans and
keeps every trial of a job in memory (README, "Performance"), and a job beyond this is better
split into several, which also run side by side."""


class TooManyTrials(ValueError):
    """A job of more trials than `MAX_TRIALS`: refused before any is enumerated."""

    def __init__(self, agents: int, tasks: int, attempts: int) -> None:
        self.count = agents * tasks * attempts
        super().__init__(
            f"the job would have {self.count:,} trials ({agents} agents x {tasks} tasks x "
            f"{attempts} attempts), more than the {MAX_TRIALS:,} one job may have: lower the "
            "attempts or the tasks (max_tasks, task_ids), or split it into several jobs"
        )


def plan_job(
    job_resource_name: str,
    agent_names: Sequence[str],
    datasets: Sequence[ResolvedDataset],
    n_attempts: int,
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
) -> JobPlan:
    """The job's trials in order, named from (job resource name, agent, dataset, task, attempt),
    and a data dataset's row trials cut into shards of `shard_size`, per agent and dataset.

    The RolloutJob's metadata.name (unique in its namespace) names the trials, so two jobs that
    share a spec.jobName cannot collide.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size must be at least 1, not {shard_size}")
    task_count = sum(len(d.tasks) for d in datasets)
    if len(agent_names) * task_count * n_attempts > MAX_TRIALS:
        raise TooManyTrials(len(agent_names), task_count, n_attempts)
    tasks = {(d.name, t.name): t for d in datasets for t in d.tasks}
    keys = enumerate_trials(
        agent_names, [(d.name, [t.name for t in d.tasks]) for d in datasets], n_attempts
    )
    trials = tuple(
        PlannedTrial(
            key,
            trial_resource_name(job_resource_name, key.agent, key.dataset, key.task, key.attempt),
            tasks[(key.dataset, key.task)],
        )
        for key in keys
    )
    rows = {d.name: d.rows for d in datasets if d.rows is not None}
    return JobPlan(trials, _shards(job_resource_name, trials, rows, shard_size))


def _shards(
    job_resource_name: str,
    trials: Sequence[PlannedTrial],
    rows: dict[str, ResolvedRows],
    shard_size: int,
) -> tuple[PlannedShard, ...]:
    shards: list[PlannedShard] = []
    block: list[PlannedTrial] = []

    def cut() -> None:
        # A block holds one agent's trials of one data dataset, in order.
        for start in range(0, len(block), shard_size):
            part = tuple(block[start : start + shard_size])
            first = part[0].key
            number = start // shard_size + 1
            task = shard_task_name(number)
            key = TrialKey(first.agent, first.dataset, task, 1, index=first.index)
            name = trial_resource_name(job_resource_name, first.agent, first.dataset, task, 1)
            shards.append(PlannedShard(key, name, number, part, rows[first.dataset]))
        block.clear()

    for trial in trials:
        if trial.key.dataset not in rows:
            continue
        if block and (block[0].key.agent, block[0].key.dataset) != (
            trial.key.agent,
            trial.key.dataset,
        ):
            cut()
        block.append(trial)
    if block:
        cut()
    return tuple(shards)
