"""A RolloutJob's status, computed from the plan and the index. Pure.

Counting follows the seed's definitions, implemented once in `rollout.api.results.summarize`:
every trial of the plan counts in `total` (created or not), `completed` are trials with a reward,
`failed` trials whose error kept the reward (and `failures` splits them by class: the agent's,
the task's, the infrastructure's). `running` are trials whose runner runs (their status says
Running, or their Pod does before the status says it: `runs`), `finished` trials that ended
whatever the outcome, and `pending` the rest (not created yet, or waiting for their Pod).

Conditions keep their lastTransitionTime while their status holds (`set_condition`), so the same
situation computes to the same status, and the reconciler patches only what changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from rollout.api.additions import FailureCounts
from rollout.api.aggregate import TrialOutcome, summarize
from rollout.api.metrics import MetricType
from rollout.api.plan import JobPlan, PlannedShard
from rollout.api.resources import (
    Condition,
    ConditionStatus,
    JobConditionReason,
    JobConditionType,
    JobPhase,
    RolloutJobStatus,
    TrialCounts,
    TrialPhase,
    find_condition,
    set_condition,
)
from rollout.controller.index import RowEntry, RunnerStarted, TrialEntry, no_runner_started


def outcomes(
    plan: JobPlan,
    trials: Mapping[str, TrialEntry],
    kept_rows: Mapping[str, Sequence[RowEntry]] | None = None,
) -> list[TrialOutcome]:
    """Every trial of the plan in order, as aggregation sees it (not created: no verdict yet);
    a shard's rows each in their place, from the shard's status once it has finished, and a
    resumed job's shard's rows that kept their records (`kept_rows`) from the start."""
    listed: list[TrialOutcome] = []
    for planned in plan.trials:
        entry = trials.get(planned.name)
        if planned.shard is not None:
            kept = (kept_rows or {}).get(planned.name, ())
            listed.extend(_row_outcomes(planned.shard, entry, kept))
        elif entry is not None:
            listed.append(entry.outcome())
        else:
            key = planned.key
            listed.append(TrialOutcome(key.task, key.dataset, key.agent, key.attempt))
    return listed


def _row_outcomes(
    shard: PlannedShard, entry: TrialEntry | None, kept: Sequence[RowEntry] = ()
) -> list[TrialOutcome]:
    """A shard's rows; the shard's cost is shared evenly among the rows it ran."""
    ran = {(row.id, row.attempt): row for row in entry.rows} if entry is not None else {}
    rows = {(row.id, row.attempt): row for row in kept} | ran
    share = None
    if entry is not None and entry.cost is not None and len(shard.trials) > len(kept):
        share = entry.cost / (len(shard.trials) - len(kept))
    listed: list[TrialOutcome] = []
    for trial in shard.trials:
        key = trial.key
        row = rows.get((key.task, key.attempt))
        listed.append(
            TrialOutcome(
                key.task,
                key.dataset,
                key.agent,
                key.attempt,
                reward=row.reward if row is not None else None,
                error_type=row.error_type if row is not None else None,
                cost=share if (key.task, key.attempt) in ran or row is None else None,
                failure_class=row.failure_class if row is not None else None,
            )
        )
    return listed


def runs(entry: TrialEntry, runner_started: RunnerStarted) -> bool:
    """Whether the trial's runner runs (or ran, and the trial has not taken its outcome yet):
    its status says Running, or its Pod does, for the seconds before the operator writes that
    status (`OperatorConfig.running_status_after_sec`)."""
    if entry.phase == TrialPhase.RUNNING:
        return True
    return not entry.finished and entry.runs_in_pod and runner_started(entry)


def trial_counts(
    plan: JobPlan,
    trials: Mapping[str, TrialEntry],
    *,
    rows: bool = True,
    kept_rows: Mapping[str, Sequence[RowEntry]] | None = None,
    runner_started: RunnerStarted = no_runner_started,
) -> tuple[int, int]:
    """(running, finished) among the seed's trials of the plan: a finished shard's rows have
    all finished, a running shard has one row running (it answers them one at a time), and a
    resumed job's shard's kept rows (`kept_rows`) have finished from the start.
    `rows=False`: among the plan's trial resources (a shard is one)."""
    running = finished = 0
    for planned in plan.trials:
        entry = trials.get(planned.name)
        shard = planned.shard
        unfinished = entry is None or not entry.finished
        if unfinished and rows and shard is not None and kept_rows:
            finished += len(kept_rows.get(planned.name, ()))
        if entry is None:
            continue
        if entry.finished:
            finished += len(shard.trials) if rows and shard is not None else 1
        elif runs(entry, runner_started):
            running += 1
    return running, finished


def job_status(
    *,
    plan: JobPlan,
    trials: Mapping[str, TrialEntry],
    previous: RolloutJobStatus,
    generation: int | None,
    suspended: bool,
    metrics: Sequence[MetricType],
    now: datetime,
    result_uri: str | None = None,
    kept_rows: Mapping[str, Sequence[RowEntry]] | None = None,
    kept: int = 0,
    runner_started: RunnerStarted = no_runner_started,
) -> RolloutJobStatus:
    """The status of a valid job: its phase, counts, figures and conditions.

    The job is Completed only once `result_uri` is known (its result.json is written): until
    then a job whose trials have all finished is still Running. A resumed job's trials that
    keep their earlier run's records are among `trials` (shards' rows: `kept_rows`); `kept`
    says how many, for the Valid condition.
    """
    total = plan.trial_count
    running, finished = trial_counts(
        plan, trials, kept_rows=kept_rows, runner_started=runner_started
    )
    summary = summarize(outcomes(plan, trials, kept_rows), metrics=metrics)
    done = finished == total
    if done and result_uri is not None:
        phase = JobPhase.COMPLETED
    elif suspended and not done:
        phase = JobPhase.SUSPENDED
    else:
        phase = JobPhase.RUNNING

    conditions = _without_failure(previous.conditions, now, generation)
    conditions = set_condition(
        conditions,
        JobConditionType.VALID,
        ConditionStatus.TRUE,
        JobConditionReason.SPEC_VALID,
        f"The spec is valid and its {total} trials are planned"
        + (f"; resumed: {kept} keep their earlier records." if kept else "."),
        now=now,
        observed_generation=generation,
    )
    progress = f"{finished} of {total} trials finished, {running} running."
    if phase == JobPhase.RUNNING:
        running_condition = (ConditionStatus.TRUE, JobConditionReason.TRIALS_RUNNING)
    elif phase == JobPhase.SUSPENDED:
        running_condition = (ConditionStatus.FALSE, JobConditionReason.SUSPENDED_BY_SPEC)
    else:
        running_condition = (ConditionStatus.FALSE, JobConditionReason.ALL_TRIALS_FINISHED)
    conditions = set_condition(
        conditions, JobConditionType.RUNNING, *running_condition, progress, now=now,
        observed_generation=generation,
    )  # fmt: skip
    if phase == JobPhase.SUSPENDED:
        conditions = set_condition(
            conditions,
            JobConditionType.SUSPENDED,
            ConditionStatus.TRUE,
            JobConditionReason.SUSPENDED_BY_SPEC,
            "spec.suspend is true: no new trial starts; started trials finish.",
            now=now,
            observed_generation=generation,
        )
    elif find_condition(conditions, JobConditionType.SUSPENDED) is not None:
        conditions = set_condition(
            conditions,
            JobConditionType.SUSPENDED,
            ConditionStatus.FALSE,
            JobConditionReason.RESUMED,
            "spec.suspend is false: trials start again." if not done else "The job finished.",
            now=now,
            observed_generation=generation,
        )
    if phase == JobPhase.COMPLETED:
        conditions = set_condition(
            conditions,
            JobConditionType.COMPLETE,
            ConditionStatus.TRUE,
            JobConditionReason.ALL_TRIALS_FINISHED,
            f"All {total} trials finished: {summary.job.completed_trials} completed, "
            f"{summary.job.failed_trials} failed{_by_class(summary.failures)}.",
            now=now,
            observed_generation=generation,
        )

    return RolloutJobStatus(
        phase=phase,
        observed_generation=generation,
        counts=TrialCounts(
            total=total,
            pending=total - running - finished,
            running=running,
            finished=finished,
            completed=summary.job.completed_trials,
            failed=summary.job.failed_trials,
        ),
        failures=summary.failures,
        pass_rate=summary.job.pass_rate,
        mean_reward=summary.job.mean_reward,
        total_cost=summary.job.total_cost,
        metrics=summary.metrics,
        agents=summary.agents,
        conditions=conditions,
        started_at=previous.started_at or now.replace(microsecond=0),
        ended_at=(previous.ended_at or now.replace(microsecond=0))
        if phase == JobPhase.COMPLETED
        else None,
        result_uri=result_uri if phase == JobPhase.COMPLETED else None,
    )


def _by_class(failures: FailureCounts) -> str:
    if not failures.total:
        return ""
    return (
        f" ({failures.agent} the agent's, {failures.task} the task's, "
        f"{failures.infrastructure} the infrastructure's)"
    )


def _without_failure(
    conditions: Sequence[Condition], now: datetime, generation: int | None
) -> list[Condition]:
    """A job that failed before (an invalid spec since fixed) is no longer failed."""
    if (failed := find_condition(conditions, JobConditionType.FAILED)) is None:
        return list(conditions)
    if failed.status != ConditionStatus.TRUE:
        return list(conditions)
    return set_condition(
        conditions,
        JobConditionType.FAILED,
        ConditionStatus.FALSE,
        JobConditionReason.SPEC_VALID,
        "The spec is valid now.",
        now=now,
        observed_generation=generation,
    )


def invalid_status(
    previous: RolloutJobStatus,
    *,
    reason: JobConditionReason,
    message: str,
    generation: int | None,
    now: datetime,
) -> RolloutJobStatus:
    """A job that cannot run: phase Failed, `Valid` and `Failed` conditions saying why."""
    conditions = set_condition(
        previous.conditions,
        JobConditionType.VALID,
        ConditionStatus.FALSE,
        reason,
        message,
        now=now,
        observed_generation=generation,
    )
    conditions = set_condition(
        conditions,
        JobConditionType.FAILED,
        ConditionStatus.TRUE,
        reason,
        message,
        now=now,
        observed_generation=generation,
    )
    if find_condition(conditions, JobConditionType.RUNNING) is not None:
        conditions = set_condition(
            conditions,
            JobConditionType.RUNNING,
            ConditionStatus.FALSE,
            reason,
            "The job cannot run.",
            now=now,
            observed_generation=generation,
        )
    return previous.model_copy(
        update={
            "phase": JobPhase.FAILED,
            "observed_generation": generation,
            "conditions": conditions,
            "ended_at": previous.ended_at or now.replace(microsecond=0),
        }
    )


def storage_unavailable_status(
    previous: RolloutJobStatus, *, message: str, generation: int | None, now: datetime
) -> RolloutJobStatus:
    """Storage cannot be reached: the job waits (and retries) rather than failing."""
    conditions = set_condition(
        previous.conditions,
        JobConditionType.VALID,
        ConditionStatus.UNKNOWN,
        JobConditionReason.STORAGE_UNAVAILABLE,
        message,
        now=now,
        observed_generation=generation,
    )
    return previous.model_copy(
        update={
            "phase": previous.phase or JobPhase.PENDING,
            "observed_generation": generation,
            "conditions": conditions,
        }
    )


def status_patch(status: RolloutJobStatus) -> dict[str, object]:
    """The status as a merge patch body: every field we own; a top-level field that no longer
    applies (e.g. passRate before any reward) is null, which a merge patch removes. Nothing
    below the top level is null: lists are replaced whole, and the schema allows no nulls."""
    full = status.model_dump(mode="json", by_alias=True)
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"status": {key: dumped.get(key) for key in full}}
