"""result.json models, the seed's field definitions for aggregation, and job-level metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from rollout.api.additions import FailureCounts, TrialAdditions
from rollout.api.aggregate import TrialOutcome, aggregate, summarize, trial_span
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.failures import FailureClass
from rollout.api.metrics import MetricType, compute_metric
from rollout.api.results import JobResult, TrialError, TrialResult, format_timestamp

SEED = Path(__file__).parent.parent / "data" / "seed"


def seed_text(name: str) -> str:
    return (SEED / name).read_text()


# --- the seed's files -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("trial_result_success.json", TrialResult),
        ("trial_result_error.json", TrialResult),
        ("job_result.json", JobResult),
    ],
)
def test_seed_examples_round_trip_to_identical_text(
    name: str, model: type[TrialResult] | type[JobResult]
) -> None:
    text = seed_text(name)
    parsed = model.from_json(text, name)
    # Byte for byte: same keys, same order, same number formatting, same timestamps.
    assert parsed.to_json() == text
    assert json.dumps(parsed.model_dump(mode="json"), indent=2) + "\n" == text
    assert parsed.model_validate(parsed.model_dump()) == parsed


def test_seed_trial_result_fields() -> None:
    ok = TrialResult.from_json(seed_text("trial_result_success.json"))
    assert (ok.task_name, ok.dataset_name, ok.agent_name, ok.attempt) == (
        "hello-world",
        "terminal-bench",
        "cpe",
        1,
    )
    assert ok.reward == 1.0
    assert ok.cost == 0.0342
    assert ok.error is None
    assert ok.durations.agent_execution_sec == 65.1
    assert ok.timestamps.verifier_ended_at == datetime(2025, 1, 15, 10, 34, 5, tzinfo=UTC)
    assert ok.completed
    assert not ok.failed

    bad = TrialResult.from_json(seed_text("trial_result_error.json"))
    assert bad.error == TrialError(
        type=ErrorType.AGENT_EXECUTION_TIMEOUT,
        message="Agent execution exceeded timeout of 600 seconds",
    )
    assert bad.reward is None
    assert bad.durations.verifier_sec is None
    assert bad.timestamps.verifier_started_at is None
    assert not bad.completed
    assert bad.failed


def test_seed_job_result_has_no_project_key_and_keeps_agent_order() -> None:
    job = JobResult.from_json(seed_text("job_result.json"))
    assert job.rollout is None
    assert job.metrics == []
    dumped = job.model_dump(mode="json")
    assert "rollout" not in dumped
    assert "metrics" not in dumped
    assert list(dumped["agents"]) == ["cpe", "oracle"]
    assert job.agents["oracle"].pass_rate == 0.8
    assert [r.reward for r in job.results] == [1.0, 1.0, 0.0, 1.0]


# --- timestamps --------------------------------------------------------------------------------


def trial_json(**changes: object) -> str:
    data = json.loads(seed_text("trial_result_success.json"))
    data.update(changes)
    return json.dumps(data)


def test_timestamps_with_offsets_are_written_in_utc_with_z() -> None:
    stamps = json.loads(seed_text("trial_result_success.json"))["timestamps"]
    stamps["started_at"] = "2025-01-15T12:30:00+02:00"
    stamps["ended_at"] = "2025-01-15T10:34:05+00:00"
    stamps["verifier_ended_at"] = "2025-01-15T10:34:05.250000Z"
    result = TrialResult.from_json(trial_json(timestamps=stamps))
    written = json.loads(result.to_json())["timestamps"]
    assert written["started_at"] == "2025-01-15T10:30:00Z"
    assert written["ended_at"] == "2025-01-15T10:34:05Z"
    # Fractional seconds are kept when the time has them, so nothing is lost.
    assert written["verifier_ended_at"] == "2025-01-15T10:34:05.250000Z"
    assert result.timestamps.started_at == datetime(2025, 1, 15, 10, 30, tzinfo=UTC)


def test_format_timestamp_converts_to_utc() -> None:
    plus_five = timezone(timedelta(hours=5))
    assert format_timestamp(datetime(2025, 1, 15, 15, 30, tzinfo=plus_five)) == (
        "2025-01-15T10:30:00Z"
    )


def test_timestamp_without_timezone_is_refused_naming_file_and_field() -> None:
    stamps = json.loads(seed_text("trial_result_success.json"))["timestamps"]
    stamps["agent_setup_started_at"] = "2025-01-15T10:32:00"
    with pytest.raises(InvalidInput) as caught:
        TrialResult.from_json(trial_json(timestamps=stamps), "jobs/j/a/d/t__1/result.json")
    [problem] = caught.value.problems
    assert problem.file == "jobs/j/a/d/t__1/result.json"
    assert problem.field == "timestamps.agent_setup_started_at"
    assert "timezone" in problem.message


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"surprise": 1}, "surprise"),
        ({"error": {"type": "agent_exploded", "message": "boom"}}, "error.type"),
        ({"attempt": 0}, "attempt"),
        ({"cost": -1.0}, "cost"),
        ({"durations": {"total_sec": -3}}, "durations.total_sec"),
    ],
)
def test_bad_trial_result_names_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        TrialResult.from_json(trial_json(**changes), "result.json")
    assert [p.field for p in caught.value.problems] == [field]


def test_non_finite_reward_is_refused() -> None:
    with pytest.raises(ValidationError):
        TrialResult(task_name="t", dataset_name="d", agent_name="a", attempt=1, reward=float("nan"))


def test_job_result_counts_must_add_up() -> None:
    data = json.loads(seed_text("job_result.json"))
    data["failed_trials"] = 3  # 18 completed + 3 failed > 20 trials
    with pytest.raises(InvalidInput, match="exceed total_trials"):
        JobResult.from_json(json.dumps(data))


# --- aggregation -------------------------------------------------------------------------------


def trial(
    agent: str,
    task: str,
    reward: float | None,
    *,
    error: ErrorType | None = None,
    cost: float | None = None,
    attempt: int = 1,
    dataset: str = "terminal-bench",
) -> TrialResult:
    return TrialResult(
        task_name=task,
        dataset_name=dataset,
        agent_name=agent,
        attempt=attempt,
        reward=reward,
        cost=cost,
        error=TrialError(type=error, message=f"{error} happened") if error else None,
    )


TEARDOWN = ErrorType.ENVIRONMENT_TEARDOWN_FAILED

MIXED = [
    trial("cpe", "passes", 1.0, cost=0.5),
    trial("cpe", "partial", 0.5),  # completed, not passed; no cost
    trial("cpe", "verifier-fails", None, error=ErrorType.VERIFIER_FAILED, cost=0.25),
    trial("cpe", "teardown-fails", 0.0, error=TEARDOWN, cost=0.1),  # completed, not failed
    trial("cpe", "verifier-disabled", None),  # neither completed nor failed
    trial("cpe", "teardown-only", None, error=TEARDOWN),  # no reward, but not failed
    trial("oracle", "passes", 1.0),
    trial("oracle", "partial", 1.0),
    trial("oracle", "times-out", None, error=ErrorType.AGENT_EXECUTION_TIMEOUT),
]


def test_aggregate_applies_each_field_definition() -> None:
    job = aggregate("mixed", MIXED)
    assert job.job_name == "mixed"
    assert job.total_trials == 9
    # Rewards 1.0, 0.5, 0.0 (with a teardown error) for cpe; 1.0, 1.0 for oracle.
    assert job.completed_trials == 5
    # verifier_failed (cpe) and agent_execution_timeout (oracle); never the teardown errors.
    assert job.failed_trials == 2
    assert job.pass_rate == pytest.approx(3 / 5)
    assert job.mean_reward == pytest.approx(3.5 / 5)
    assert job.total_cost == pytest.approx(0.85)

    assert list(job.agents) == ["cpe", "oracle"]
    cpe, oracle = job.agents["cpe"], job.agents["oracle"]
    assert (cpe.total_trials, cpe.completed_trials, cpe.failed_trials) == (6, 3, 1)
    assert cpe.pass_rate == pytest.approx(1 / 3)
    assert cpe.mean_reward == pytest.approx(0.5)
    assert cpe.total_cost == pytest.approx(0.85)
    assert (oracle.total_trials, oracle.completed_trials, oracle.failed_trials) == (3, 2, 1)
    assert oracle.pass_rate == 1.0
    assert oracle.mean_reward == 1.0
    assert oracle.total_cost is None  # no oracle trial reported a cost

    assert [(r.agent_name, r.task_name, r.reward) for r in job.results] == [
        (t.agent_name, t.task_name, t.reward) for t in MIXED
    ]
    # What the project adds is under `rollout`, after the seed's keys, which keep their order.
    written = json.loads(job.to_json())
    seed_keys = list(json.loads(seed_text("job_result.json")))
    assert list(written) == [*seed_keys, "rollout"]
    assert "metrics" not in written
    assert written["rollout"]["metrics"] == []
    # verifier_failed is the agent's; the oracle's agent_execution_timeout is the task's (the
    # oracle runs the task's solution); teardown errors are no failed trials.
    assert written["rollout"]["failures"] == {"agent": 1, "task": 1, "infrastructure": 0}
    assert written["rollout"]["agents"] == {
        "cpe": {"failures": {"agent": 1, "task": 0, "infrastructure": 0}},
        "oracle": {"failures": {"agent": 0, "task": 1, "infrastructure": 0}},
    }
    assert JobResult.from_json(job.to_json()) == job


def test_aggregate_reproduces_the_seed_results_list() -> None:
    seed = JobResult.from_json(seed_text("job_result.json"))
    trials = [
        trial(r.agent_name, r.task_name, r.reward, dataset=r.dataset_name, attempt=r.attempt)
        for r in seed.results
    ]
    job = aggregate(seed.job_name, trials, started_at=seed.started_at, ended_at=seed.ended_at)
    assert job.results == seed.results
    assert (
        job.model_dump(mode="json")["results"]
        == json.loads(seed_text("job_result.json"))["results"]
    )
    assert (job.total_trials, job.completed_trials, job.failed_trials) == (4, 4, 0)
    assert job.pass_rate == 0.75
    assert job.mean_reward == 0.75
    assert job.agents["cpe"].pass_rate == 0.5
    assert job.total_duration_sec == 3600.0
    assert json.loads(job.to_json())["started_at"] == "2025-01-15T10:00:00Z"


def test_reward_half_completes_but_does_not_pass() -> None:
    job = aggregate("j", [trial("a", "t", 0.5)])
    assert (job.completed_trials, job.failed_trials, job.pass_rate, job.mean_reward) == (
        1,
        0,
        0.0,
        0.5,
    )


def test_error_with_a_reward_still_counts_completed() -> None:
    # The definitions hinge on the reward: an internal error after the verifier gave a reward
    # (e.g. an upload failing) leaves the trial completed.
    job = aggregate("j", [trial("a", "t", 1.0, error=ErrorType.INTERNAL_ERROR)])
    assert (job.completed_trials, job.failed_trials, job.pass_rate) == (1, 0, 1.0)


def test_nothing_completed_gives_null_not_zero() -> None:
    job = aggregate(
        "j",
        [trial("a", "t", None, error=ErrorType.TASK_NOT_FOUND), trial("a", "u", None)],
        metrics=[MetricType.MEAN, MetricType.SUM],
    )
    written = json.loads(job.to_json())
    assert written["pass_rate"] is None
    assert written["mean_reward"] is None
    assert written["total_cost"] is None
    assert written["agents"]["a"]["pass_rate"] is None
    assert written["rollout"]["metrics"] == [
        {"type": "mean", "value": None},
        {"type": "sum", "value": None},
    ]
    assert (job.total_trials, job.completed_trials, job.failed_trials) == (2, 0, 1)
    assert written["rollout"]["failures"] == {"agent": 0, "task": 1, "infrastructure": 0}


def test_empty_job() -> None:
    job = aggregate("empty", [])
    assert (job.total_trials, job.completed_trials, job.failed_trials) == (0, 0, 0)
    assert job.pass_rate is None
    assert job.agents == {}
    assert job.results == []


def test_metrics_follow_job_yaml_order_over_completed_rewards() -> None:
    job = aggregate(
        "j",
        MIXED,
        metrics=[MetricType.MAX, MetricType.MIN, MetricType.SUM, MetricType.MEAN],
    )
    assert [(m.type, m.value) for m in job.metrics] == [
        (MetricType.MAX, 1.0),
        (MetricType.MIN, 0.0),
        (MetricType.SUM, 3.5),
        (MetricType.MEAN, pytest.approx(0.7)),
    ]
    written = json.loads(job.to_json())
    assert list(written)[-1] == "rollout"
    assert "metrics" not in written
    assert written["rollout"]["metrics"][0] == {"type": "max", "value": 1.0}
    assert JobResult.from_json(job.to_json()) == job


def test_duration_is_the_job_span_when_known() -> None:
    start = datetime(2025, 1, 15, 10, 0, tzinfo=UTC)
    assert aggregate("j", [], started_at=start).total_duration_sec is None
    job = aggregate("j", [], started_at=start, ended_at=start + timedelta(seconds=3600.5))
    assert job.total_duration_sec == 3600.5
    with pytest.raises(ValueError, match="before it starts"):
        aggregate("j", [], started_at=start, ended_at=start - timedelta(seconds=1))


def test_outcomes_and_results_aggregate_alike() -> None:
    outcomes = [TrialOutcome.from_result(t) for t in MIXED]
    metrics = [MetricType.MEAN]
    assert aggregate("j", outcomes, metrics=metrics) == aggregate("j", MIXED, metrics=metrics)
    summary = summarize(outcomes, metrics=metrics)
    job = aggregate("j", MIXED, metrics=metrics)
    figures = summary.job
    assert (figures.total_trials, figures.completed_trials, figures.failed_trials) == (9, 5, 2)
    assert summary.agents == job.agents
    assert summary.job.pass_rate == job.pass_rate
    assert summary.metrics == job.metrics
    assert [o.completed for o in outcomes] == [t.completed for t in MIXED]
    assert [o.failed for o in outcomes] == [t.failed for t in MIXED]


def test_pending_outcomes_count_only_in_totals() -> None:
    pending = TrialOutcome(task_name="t", dataset_name="d", agent_name="a", attempt=2)
    done = TrialOutcome(task_name="t", dataset_name="d", agent_name="a", attempt=1, reward=1.0)
    summary = summarize([done, pending])
    figures = summary.job
    assert (figures.total_trials, figures.completed_trials, figures.failed_trials) == (2, 1, 0)
    assert summary.job.pass_rate == 1.0
    assert summary.agents["a"].total_trials == 2


def test_trial_span() -> None:
    ok = TrialResult.from_json(seed_text("trial_result_success.json"))
    bad = TrialResult.from_json(seed_text("trial_result_error.json"))
    blank = trial("a", "t", None)
    assert trial_span([bad, blank, ok]) == (
        datetime(2025, 1, 15, 10, 30, tzinfo=UTC),
        datetime(2025, 1, 15, 11, 12, tzinfo=UTC),
    )
    assert trial_span([blank]) == (None, None)


# --- metrics -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (MetricType.SUM, 2.5),
        (MetricType.MIN, 0.0),
        (MetricType.MAX, 1.0),
        (MetricType.MEAN, 0.625),
    ],
)
def test_compute_metric(metric: MetricType, expected: float) -> None:
    assert compute_metric(metric, [1.0, 0.0, 0.5, 1.0]) == expected
    assert compute_metric(metric, []) is None


def test_mean_of_many_rewards_does_not_drift() -> None:
    assert compute_metric(MetricType.MEAN, [0.1] * 100_000) == 0.1
    assert MetricType("mean") is MetricType.MEAN


# --- what the project adds: the `rollout` key ----------------------------------------------------


def test_a_job_result_of_the_previous_version_with_top_level_metrics_still_parses() -> None:
    # The previous version wrote the metrics as a top-level key after the seed's.
    previous = json.loads(seed_text("job_result.json"))
    previous["metrics"] = [{"type": "mean", "value": 0.85}, {"type": "max", "value": 1.0}]
    job = JobResult.from_json(json.dumps(previous, indent=2))
    assert [(m.type, m.value) for m in job.metrics] == [
        (MetricType.MEAN, 0.85),
        (MetricType.MAX, 1.0),
    ]
    # Written again, the metrics are under `rollout`; failures that file never counted stay
    # unknown (absent), not zeros.
    written = json.loads(job.to_json())
    assert "metrics" not in written
    assert written["rollout"] == {
        "metrics": [{"type": "mean", "value": 0.85}, {"type": "max", "value": 1.0}]
    }
    assert JobResult.from_json(job.to_json()) == job


def test_metrics_in_both_places_are_refused() -> None:
    data = json.loads(seed_text("job_result.json"))
    data["metrics"] = [{"type": "mean", "value": 0.85}]
    data["rollout"] = {"metrics": [{"type": "mean", "value": 0.85}]}
    with pytest.raises(InvalidInput, match="both a top-level key"):
        JobResult.from_json(json.dumps(data))


def test_failures_must_add_up_to_the_failed_trials() -> None:
    data = json.loads(seed_text("job_result.json"))  # 2 failed trials
    data["rollout"] = {"failures": {"agent": 1, "task": 0, "infrastructure": 0}}
    with pytest.raises(InvalidInput, match="count 1 failed trials, failed_trials 2"):
        JobResult.from_json(json.dumps(data))
    data["rollout"]["failures"]["infrastructure"] = 1
    assert JobResult.from_json(json.dumps(data)).rollout is not None


@pytest.mark.parametrize(
    ("name", "model"),
    [("trial_result_error.json", TrialResult), ("job_result.json", JobResult)],
)
def test_keys_of_a_later_version_under_rollout_are_kept(
    name: str, model: type[TrialResult] | type[JobResult]
) -> None:
    data = json.loads(seed_text(name))
    known = {"failure_class": "agent"} if model is TrialResult else {"metrics": []}
    data["rollout"] = {**known, "tries": 2, "trace_ids": ["abc"]}
    text = json.dumps(data, indent=2) + "\n"
    assert model.from_json(text).to_json() == text


def test_a_trial_result_records_its_failure_class_under_rollout() -> None:
    data = json.loads(seed_text("trial_result_error.json"))
    data["rollout"] = {"failure_class": "infrastructure"}
    text = json.dumps(data, indent=2) + "\n"
    result = TrialResult.from_json(text)
    assert result.failure_class is FailureClass.INFRASTRUCTURE  # as recorded
    assert result.to_json() == text
    assert TrialOutcome.from_result(result).error_class is FailureClass.INFRASTRUCTURE
    # A seed file records none: the table's class (agent_execution_timeout is the agent's).
    seed = TrialResult.from_json(seed_text("trial_result_error.json"))
    assert seed.rollout is None
    assert seed.failure_class is FailureClass.AGENT
    assert TrialResult.from_json(seed_text("trial_result_success.json")).failure_class is None
    with pytest.raises(InvalidInput) as caught:
        TrialResult.from_json(json.dumps({**data, "rollout": {"failure_class": "cosmic-ray"}}))
    assert [p.field for p in caught.value.problems] == ["rollout.failure_class"]


def test_the_class_a_trial_records_is_the_one_the_job_counts() -> None:
    lost = trial("cpe", "t", None, error=ErrorType.INTERNAL_ERROR)
    recorded = lost.model_copy(update={"rollout": TrialAdditions(failure_class=FailureClass.TASK)})
    table = aggregate("j", [lost]).rollout
    assert table is not None
    assert table.failures == FailureCounts(infrastructure=1)
    counted = aggregate("j", [recorded]).rollout
    assert counted is not None
    assert counted.failures == FailureCounts(task=1)
