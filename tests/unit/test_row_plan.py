"""Data rows in the plan: shards of shard_size per agent and dataset, the units a cluster creates,
the tasks a job picks, a shard's spec, and the job's status counting rows as trials."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.failures import FailureClass
from rollout.api.plan import (
    ResolvedDataset,
    ResolvedRows,
    ResolvedTask,
    pick_tasks,
    plan_job,
)
from rollout.api.resources import (
    AgentSpec,
    DatasetRef,
    RolloutJob,
    RolloutJobSpec,
    RolloutJobStatus,
    SecretKeySelector,
    StorageSpec,
    TrialPhase,
)
from rollout.api.rowrun import RowItem
from rollout.api.task import TaskConfig, parse_task_config
from rollout.api.trial_spec import shard_spec, trial_spec
from rollout.api.trials import trial_resource_name
from rollout.api.verifiers import Metric, VerifierChoice, VerifierKind, VerifierSource
from rollout.controller.index import RowEntry, TrialEntry
from rollout.controller.pod import pod_deadline_sec
from rollout.controller.status import job_status, outcomes, trial_counts

NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
HASH = "a" * 64
STORAGE = StorageSpec(bucket="b")


def rows_dataset(name: str, count: int, config: TaskConfig | None = None) -> ResolvedDataset:
    config = config or TaskConfig()
    verifier = VerifierChoice.of_metric(Metric.F1_SCORE, VerifierSource.DATASET)
    tasks = tuple(ResolvedTask(f"r{i}", HASH, config) for i in range(count))
    return ResolvedDataset(name, "d" * 64, tasks, ResolvedRows(HASH, config, verifier))


def task_dataset(name: str, *tasks: str) -> ResolvedDataset:
    return ResolvedDataset(
        name, "0" * 64, tuple(ResolvedTask(t, "1" * 64, TaskConfig()) for t in tasks)
    )


def job(**spec: object) -> RolloutJob:
    fields: dict[str, object] = {
        "job_name": "job",
        "agents": [AgentSpec(name="oracle"), AgentSpec(name="bot", execute="echo 4")],
        "datasets": [DatasetRef(name="rows", digest="d" * 64)],
        **spec,
    }
    return RolloutJob.model_validate(
        {"metadata": {"name": "job"}, "spec": RolloutJobSpec.model_validate(fields)}
    )


def test_rows_are_cut_into_shards_per_agent_and_dataset_in_trial_order() -> None:
    plan = plan_job(
        "job", ["oracle", "bot"], [rows_dataset("rows", 5), task_dataset("tasks", "t")], 2,
        shard_size=4,
    )  # fmt: skip
    assert len(plan.trials) == 2 * (5 * 2 + 1 * 2)
    shards = [(s.key.agent, s.key.dataset, s.key.task, len(s.trials)) for s in plan.shards]
    assert shards == [
        ("oracle", "rows", "shard-000001", 4),
        ("oracle", "rows", "shard-000002", 4),
        ("oracle", "rows", "shard-000003", 2),
        ("bot", "rows", "shard-000001", 4),
        ("bot", "rows", "shard-000002", 4),
        ("bot", "rows", "shard-000003", 2),
    ]
    first = plan.shards[0]
    assert [(t.key.task, t.key.attempt) for t in first.trials] == [
        ("r0", 1), ("r0", 2), ("r1", 1), ("r1", 2)
    ]  # fmt: skip
    assert first.name == trial_resource_name("job", "oracle", "rows", "shard-000001", 1)
    assert first.key.index == first.trials[0].key.index
    # The units: each shard once, in its first row's place, and each task trial.
    units = [(u.key.agent, u.key.task, u.shard is not None) for u in plan.units]
    assert units == [
        ("oracle", "shard-000001", True), ("oracle", "shard-000002", True),
        ("oracle", "shard-000003", True), ("oracle", "t", False), ("oracle", "t", False),
        ("bot", "shard-000001", True), ("bot", "shard-000002", True),
        ("bot", "shard-000003", True), ("bot", "t", False), ("bot", "t", False),
    ]  # fmt: skip
    cluster = plan.as_units()
    assert cluster.trial_count == len(plan.trials) == 24
    assert len(cluster) == 10
    assert cluster.as_units().trials == cluster.trials


def test_a_plan_without_rows_is_its_own_unit_plan() -> None:
    plan = plan_job("job", ["oracle"], [task_dataset("tasks", "a", "b")], 1)
    assert plan.shards == ()
    assert plan.as_units() is plan
    assert plan.trial_count == 2


def test_a_shard_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="shard_size must be at least 1"):
        plan_job("job", ["oracle"], [rows_dataset("rows", 2)], 1, shard_size=0)


def test_a_job_picks_tasks_by_id_in_dataset_order_then_the_first_n() -> None:
    datasets = [rows_dataset("rows", 6), task_dataset("tasks", "r4", "x")]
    picked = pick_tasks(datasets, max_tasks=None, task_ids=["r4", "r1"])
    assert [[t.name for t in d.tasks] for d in picked] == [["r1", "r4"], ["r4"]]
    assert picked[0].rows is datasets[0].rows
    first = pick_tasks(datasets, max_tasks=2, task_ids=None)
    assert [[t.name for t in d.tasks] for d in first] == [["r0", "r1"], ["r4", "x"]]
    assert pick_tasks(datasets, max_tasks=None, task_ids=None) == datasets
    with pytest.raises(InvalidInput, match=r"'r9'.* not in the dataset"):
        pick_tasks(datasets, max_tasks=None, task_ids=["r9"], where="job.yaml")


def test_a_shard_spec_names_its_rows_verifier_and_image() -> None:
    config = parse_task_config({"agent": {"timeout_sec": 30}}, "t")
    plan = plan_job("job", ["bot"], [rows_dataset("rows", 3, config)], 1, shard_size=2)
    unit = plan.units[0]
    spec = trial_spec(job(), unit, storage=STORAGE, runner_image="runner:1")
    assert (spec.task_name, spec.attempt, spec.task_content_hash) == ("shard-000001", 1, HASH)
    assert spec.rows is not None
    assert spec.rows.items == [RowItem(id="r0", attempt=1), RowItem(id="r1", attempt=1)]
    assert (spec.rows.verifier.kind, spec.rows.verifier.metric) == (
        VerifierKind.METRIC,
        Metric.F1_SCORE,
    )
    # No docker_image declared: the environment container runs the operator's rows image,
    # else the runner's image.
    assert spec.image == "runner:1"
    rows_image = trial_spec(
        job(), unit, storage=STORAGE, runner_image="runner:1", rows_image="python:3.12-slim"
    )
    assert rows_image.image == "python:3.12-slim"
    declared = parse_task_config({"environment": {"docker_image": "alpine:3"}}, "t")
    own = plan_job("job", ["bot"], [rows_dataset("rows", 1, declared)], 1).units[0]
    assert trial_spec(job(), own, storage=STORAGE, runner_image="r", rows_image="x").image == (
        "alpine:3"
    )
    assert spec.timeouts.agent_sec == 30
    # The Pod's deadline has room for every row's agent and verifier.
    single = trial_spec(job(), plan.trials[0], storage=STORAGE, runner_image="runner:1")
    assert pod_deadline_sec(spec) - pod_deadline_sec(single) >= 30 + 600


def test_the_jobs_evaluation_metric_wins_and_llm_judgement_needs_its_settings() -> None:
    plan = plan_job("job", ["bot"], [rows_dataset("rows", 1)], 1)
    shard = plan.shards[0]
    items = [RowItem(id="r0", attempt=1)]
    spec = shard_spec(
        job(evaluation_metric="similarity"), shard, items, storage=STORAGE, runner_image="r"
    )
    assert spec.rows is not None
    assert (spec.rows.verifier.metric, spec.rows.verifier.source) == (
        Metric.SIMILARITY,
        VerifierSource.JOB,
    )
    with pytest.raises(ValueError, match="needs evaluator_model_name and evaluator_base_url"):
        shard_spec(
            job(evaluation_metric="llm_judgement"), shard, items, storage=STORAGE, runner_image="r"
        )
    key = SecretKeySelector(name="job-agent-env", key="evaluator-api-key")
    judged = shard_spec(
        job(
            evaluation_metric="llm_judgement",
            evaluator_model_name="judge",
            evaluator_base_url="http://judge/v1",
            evaluator_extra_params={"max_tokens": 5},
            evaluator_api_key=key,
        ),
        shard,
        items,
        storage=STORAGE,
        runner_image="r",
    )
    assert judged.rows is not None
    evaluator = judged.rows.evaluator
    assert evaluator is not None
    assert (evaluator.model_name, evaluator.extra_params, evaluator.api_key) == (
        "judge",
        {"max_tokens": 5},
        key,
    )


def _shard_entry(name: str, phase: TrialPhase, rows: tuple[RowEntry, ...] = ()) -> TrialEntry:
    return TrialEntry(
        "ns", name, "u", "1", "bot", "rows", "shard", 1, phase=phase, cost=1.0, shard=True,
        rows=rows,
    )  # fmt: skip


def test_the_status_counts_a_shards_rows_as_trials() -> None:
    plan = plan_job("job", ["bot"], [rows_dataset("rows", 5)], 1, shard_size=3).as_units()
    first, second = plan.trials
    rows = (
        RowEntry("r0", 1, reward=1.0),
        RowEntry("r1", 1, reward=0.0),
        RowEntry(
            "r2", 1, error_type=ErrorType.AGENT_EXECUTION_TIMEOUT, failure_class=FailureClass.AGENT
        ),
    )
    trials = {
        first.name: _shard_entry(first.name, TrialPhase.SUCCEEDED, rows),
        second.name: _shard_entry(second.name, TrialPhase.RUNNING),
    }
    listed = outcomes(plan, trials)
    assert [(o.task_name, o.reward, o.error_type) for o in listed] == [
        ("r0", 1.0, None),
        ("r1", 0.0, None),
        ("r2", None, ErrorType.AGENT_EXECUTION_TIMEOUT),
        ("r3", None, None),
        ("r4", None, None),
    ]
    assert [o.cost for o in listed] == pytest.approx([1 / 3] * 3 + [0.5] * 2)
    assert trial_counts(plan, trials) == (1, 3)
    status = job_status(
        plan=plan,
        trials=trials,
        previous=RolloutJobStatus(),
        generation=1,
        suspended=False,
        metrics=[],
        now=NOW,
    )
    assert status.counts is not None
    counts = status.counts.model_dump(by_alias=False)
    assert (counts["total"], counts["finished"], counts["running"]) == (5, 3, 1)
    assert (counts["completed"], counts["failed"]) == (2, 1)
    assert status.pass_rate == pytest.approx(0.5)


def test_a_job_on_a_remote_docker_engine_refuses_data_rows_naming_the_dataset() -> None:
    from rollout.controller.jobspec import Invalid, plan_trials

    remote = job(environment={"type": "docker", "docker_host": "tcp://engine:2376"})
    refused = plan_trials(remote, "job", [rows_dataset("rows", 2)], STORAGE, "RolloutJob ns/job")
    assert isinstance(refused, Invalid)
    assert refused.message == (
        "RolloutJob ns/job: spec.environment.dockerHost: dataset rows is a data dataset, whose "
        "rows run as Pods only: the bridge controller does not run shards of data rows yet "
        "(leave dockerHost out)"
    )
    # Task datasets run there, and rows as Pods.
    assert not isinstance(
        plan_trials(remote, "job", [task_dataset("tasks", "a")], STORAGE, "where"), Invalid
    )
    assert not isinstance(
        plan_trials(job(), "job", [rows_dataset("rows", 2)], STORAGE, "w"), Invalid
    )
