"""What a resumed job keeps and runs again (`rollout.controller.resume.plan_resume`), and how the
job's counts and figures take the kept trials and rows (`status`)."""

from __future__ import annotations

from collections import ChainMap
from datetime import UTC, datetime

from rollout.api.additions import TrialAdditions
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.plan import JobPlan, ResolvedDataset, ResolvedRows, ResolvedTask, plan_job
from rollout.api.resources import RolloutJobStatus, StorageSpec, TrialPhase
from rollout.api.results import TrialError, TrialResult
from rollout.api.rowrun import RowItem
from rollout.api.task import TaskConfig
from rollout.api.verifiers import Metric, VerifierChoice, VerifierSource
from rollout.controller.index import RowEntry, TrialEntry
from rollout.controller.records import TrialPlace
from rollout.controller.resume import EarlierFiles, plan_resume
from rollout.controller.status import job_status, outcomes, trial_counts

HASH = "a" * 64
PLACE = TrialPlace(StorageSpec(bucket="b"), "job")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def tasks_plan(*names: str) -> JobPlan:
    tasks = tuple(ResolvedTask(n, HASH, TaskConfig()) for n in names)
    return plan_job("job", ["a"], [ResolvedDataset("d", HASH, tasks)], 1).as_units()


def rows_plan(count: int, shard_size: int) -> JobPlan:
    config = TaskConfig()
    verifier = VerifierChoice.of_metric(Metric.F1_SCORE, VerifierSource.DATASET)
    rows = tuple(ResolvedTask(f"r{i}", HASH, config) for i in range(count))
    dataset = ResolvedDataset("d", HASH, rows, ResolvedRows(HASH, config, verifier))
    return plan_job("job", ["a"], [dataset], 1, shard_size=shard_size).as_units()


def result(
    task: str, reward: float | None = None, error: ErrorType | None = None, tries: int | None = None
) -> TrialResult:
    kind = FailureClass.INFRASTRUCTURE if error is ErrorType.INTERNAL_ERROR else None
    return TrialResult(
        task_name=task,
        dataset_name="d",
        agent_name="a",
        attempt=1,
        reward=reward,
        error=TrialError(type=error, message="x") if error else None,
        rollout=TrialAdditions(tries=tries, failure_class=kind) if tries or kind else None,
    )


def names(plan: JobPlan) -> dict[str, str]:
    return {t.key.task: t.name for t in plan.trials}


def test_scored_and_agent_failures_are_kept_and_the_rest_run_again() -> None:
    plan = tasks_plan("scored", "agent", "infra", "none", "moved")
    by_task = names(plan)
    earlier = {
        by_task["scored"]: EarlierFiles(result("scored", 0.0), own_files=True),
        by_task["agent"]: EarlierFiles(
            result("agent", error=ErrorType.AGENT_EXECUTION_TIMEOUT), own_files=True
        ),
        by_task["infra"]: EarlierFiles(
            result("infra", error=ErrorType.INTERNAL_ERROR, tries=2), own_files=True, kept_tries=1
        ),
        # Moved under retries/3/ by an operator that stopped before making its trial.
        by_task["moved"]: EarlierFiles(None, own_files=False, kept_tries=3),
    }
    resumed = plan_resume(plan, PLACE, earlier, namespace="ns")
    assert set(resumed.kept) == {by_task["scored"], by_task["agent"]}
    scored = resumed.kept[by_task["scored"]]
    assert (scored.phase, scored.reward, scored.finished) == (TrialPhase.SUCCEEDED, 0.0, True)
    agent = resumed.kept[by_task["agent"]]
    assert (agent.phase, agent.error_type) == (TrialPhase.FAILED, ErrorType.AGENT_EXECUTION_TIMEOUT)
    assert resumed.kept_count == 2
    infra = resumed.reruns[by_task["infra"]]
    assert infra.earlier_tries == 2
    assert infra.keep is not None
    assert infra.keep.destination.endswith("/a/d/infra__1/retries/2/")
    assert resumed.keeps(by_task["infra"]) == (infra.keep,)
    moved = resumed.reruns[by_task["moved"]]
    assert (moved.earlier_tries, moved.keep) == (3, None)
    assert by_task["none"] not in resumed.reruns  # it never ran: its first try is try 1
    assert resumed.keeps(by_task["none"]) == ()


def test_retry_errors_run_the_named_types_again() -> None:
    plan = tasks_plan("agent")
    earlier = {
        names(plan)["agent"]: EarlierFiles(
            result("agent", error=ErrorType.AGENT_EXECUTION_TIMEOUT), own_files=True
        )
    }
    resumed = plan_resume(
        plan, PLACE, earlier, namespace="ns", retry=[ErrorType.AGENT_EXECUTION_TIMEOUT]
    )
    assert not resumed.kept
    assert resumed.reruns[names(plan)["agent"]].earlier_tries == 1


def test_a_shard_runs_only_its_rows_that_run_again_each_with_its_try() -> None:
    plan = rows_plan(4, shard_size=2)  # shards: (r0, r1) and (r2, r3)
    first, second = plan.trials
    assert first.shard is not None
    assert second.shard is not None
    rows = {row.key.task: row.name for unit in plan.trials for row in unit.shard.trials}  # type: ignore[union-attr]
    earlier = {
        rows["r0"]: EarlierFiles(result("r0", 1.0), own_files=True),
        rows["r1"]: EarlierFiles(result("r1", error=ErrorType.INTERNAL_ERROR), own_files=True),
        rows["r2"]: EarlierFiles(result("r2", 0.0), own_files=True),
        rows["r3"]: EarlierFiles(result("r3", 1.0), own_files=True),
    }
    resumed = plan_resume(plan, PLACE, earlier, namespace="ns")
    # The second shard's rows are all kept: the shard is a finished entry with both rows.
    kept_shard = resumed.kept[second.name]
    assert kept_shard.shard
    assert kept_shard.finished
    assert [(r.id, r.reward) for r in kept_shard.rows] == [("r2", 0.0), ("r3", 1.0)]
    # The first runs r1 alone, as its second try, after moving its files.
    assert resumed.row_items[first.name] == (RowItem(id="r1", attempt=1, try_number=2),)
    assert [k.destination.rsplit("/", 4)[1:] for k in resumed.keeps(first.name)] == [
        ["r1__1", "retries", "1", ""]
    ]
    assert resumed.kept_rows[first.name] == (RowEntry("r0", 1, reward=1.0),)
    assert resumed.kept_count == 3

    # Counted before the shard runs: 3 of 4 rows finished, their rewards in the figures.
    trials = ChainMap({}, resumed.kept)
    assert trial_counts(plan, trials, kept_rows=resumed.kept_rows) == (0, 3)
    listed = outcomes(plan, trials, resumed.kept_rows)
    assert [(o.task_name, o.reward) for o in listed] == [
        ("r0", 1.0),
        ("r1", None),
        ("r2", 0.0),
        ("r3", 1.0),
    ]
    # Once the shard has run r1: every row counts, the shard's cost on the row it ran.
    shard_entry = TrialEntry(
        namespace="ns", name=first.name, uid="u", resource_version="1", agent="a", dataset="d",
        task=first.key.task, attempt=1, phase=TrialPhase.SUCCEEDED, cost=0.5, shard=True,
        rows=(RowEntry("r1", 1, reward=0.5),),
    )  # fmt: skip
    trials = ChainMap({first.name: shard_entry}, resumed.kept)
    listed = outcomes(plan, trials, resumed.kept_rows)
    assert [(o.task_name, o.reward, o.cost) for o in listed[:2]] == [
        ("r0", 1.0, None),
        ("r1", 0.5, 0.5),
    ]
    status = job_status(
        plan=plan, trials=trials, previous=RolloutJobStatus(), generation=1, suspended=False,
        metrics=[], now=NOW, kept_rows=resumed.kept_rows, kept=resumed.kept_count,
    )  # fmt: skip
    assert (status.counts.total, status.counts.finished, status.counts.completed) == (4, 4, 4)
    valid = next(c for c in status.conditions if c.type == "Valid")
    assert valid.message.endswith("resumed: 3 keep their earlier records.")
