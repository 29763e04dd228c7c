"""The records the operator writes for trials whose runner could not (`controller.records`), as
`trials.act` decides them, what a lost try leaves to keep (`KeepTry`), and a trial's cost in its
status and its record."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.resources import StorageSpec, TrialPhase
from rollout.api.results import TrialResult
from rollout.api.wire.termination import TerminationMessage
from rollout.controller.config import OperatorConfig
from rollout.controller.index import PodEntry, TrialEntry
from rollout.controller.podstatus import Failed, Finished, Lost
from rollout.controller.prices import UnitPrices
from rollout.controller.records import (
    WRITTEN_BY_OPERATOR,
    RecordCost,
    TrialPlace,
)
from rollout.controller.trials import (
    OLD_RUNNER_MARGIN_SEC,
    CreatePod,
    Nothing,
    PatchStatus,
    RetryPod,
    TrialAction,
    act,
    decide,
)

NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
PLACE = TrialPlace(StorageSpec(bucket="b", prefix="p"), "my-job")
TRIAL = TrialEntry(
    "ns", "t1", "uid", "7", "claude", "d", "t", 2, created_at=NOW - timedelta(seconds=90)
)
PREFIX = "p/jobs/my-job/claude/d/t__2/"


def pod(
    *,
    runner: dict[str, Any] | None = None,
    deleted_at: datetime | None = None,
    name: str = "t1",
) -> PodEntry:
    metadata: dict[str, Any] = {"name": name, "creationTimestamp": "2025-01-15T10:29:00Z"}
    if deleted_at is not None:
        metadata["deletionTimestamp"] = deleted_at.isoformat().replace("+00:00", "Z")
    statuses = [{"name": "runner", "state": runner}] if runner is not None else []
    return PodEntry("ns", name, "pod-uid", "t1", {"metadata": metadata, "status": {
        "containerStatuses": statuses}})  # fmt: skip


def step(
    trial: TrialEntry, found: PodEntry | None, verdict: Any, prices: UnitPrices | None = None
) -> TrialAction:
    return act(trial, found, verdict, now=NOW, place=PLACE, prices=prices, max_infra_retries=2)


def finished(action: TrialAction) -> PatchStatus:
    assert isinstance(action, PatchStatus)
    assert action.final
    return action


def test_a_trial_whose_image_will_not_pull_gets_the_operators_record() -> None:
    failure = Failed(ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED, "no such image 127.0.0.1:1/x:1")
    action = finished(step(TRIAL, pod(runner={"waiting": {"reason": "PodInitializing"}}), failure))
    record = action.record
    assert record is not None
    assert record.result_key == PREFIX + "result.json"
    assert record.error_key == PREFIX + "error.txt"
    assert action.status["resultUri"] == f"s3://b/{PREFIX}result.json" == record.result_uri
    # Every field of the seed's result.json, with what the operator knows.
    result = TrialResult.from_json(record.result.to_json())
    assert (result.task_name, result.dataset_name, result.agent_name, result.attempt) == (
        "t", "d", "claude", 2
    )  # fmt: skip
    assert result.reward is None
    assert result.cost is None
    assert result.error is not None
    assert result.error.type == ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
    assert result.error.message == "no such image 127.0.0.1:1/x:1"
    # It started with its Pod and spent its life in environment setup (the image pull).
    created = datetime(2025, 1, 15, 10, 29, tzinfo=UTC)
    assert result.timestamps.started_at == created
    assert result.timestamps.environment_setup_started_at == created
    assert result.timestamps.environment_setup_ended_at == NOW
    assert result.timestamps.ended_at == NOW
    assert result.durations.total_sec == 60.0
    assert result.durations.environment_setup_sec == 60.0
    assert result.durations.agent_setup_sec is None
    assert result.timestamps.agent_execution_started_at is None
    assert result.rollout is not None
    assert result.rollout.failure_class == "infrastructure" == action.status["failureClass"]
    assert result.rollout.tries == 1
    assert record.error_text is not None
    lines = record.error_text.splitlines()
    assert lines[0] == "environment_image_pull_failed: no such image 127.0.0.1:1/x:1"
    assert "Trial: my-job/claude/d/t__2" in lines
    assert "Pod: t1" in lines
    assert WRITTEN_BY_OPERATOR in record.error_text


def test_a_runner_that_wrote_its_files_needs_no_record() -> None:
    message = TerminationMessage.model_validate(
        {"reward": 1.0, "result_uri": f"s3://b/{PREFIX}result.json", "upload_error": None}
    )
    action = finished(step(TRIAL, pod(runner={"terminated": {}}), Finished(message, "{}")))
    assert action.record is None
    assert action.status["resultUri"] == f"s3://b/{PREFIX}result.json"


def test_a_runner_whose_uploads_failed_gets_its_outcome_recorded_by_the_operator() -> None:
    message = TerminationMessage.model_validate(
        {
            "reward": None,
            "error": {"type": "verifier_timeout", "message": "too slow"},
            "durations": {"total_sec": 12.5},
            "timestamps": {"started_at": "2025-01-15T10:29:10Z"},
            "result_uri": f"s3://b/{PREFIX}result.json",
            "upload_error": "storage down; 0 of 5 objects were uploaded",
        }
    )
    action = finished(step(TRIAL, pod(runner={"terminated": {}}), Finished(message, "{}")))
    record = action.record
    assert record is not None
    result = record.result
    assert result.error is not None
    assert result.error.type == ErrorType.VERIFIER_TIMEOUT
    assert result.durations.total_sec == 12.5
    assert result.timestamps.started_at == datetime(2025, 1, 15, 10, 29, 10, tzinfo=UTC)
    assert result.rollout is not None
    assert result.rollout.failure_class == "agent"
    assert record.error_text is not None
    assert "The runner's uploads failed: storage down" in record.error_text
    # Without an error there is no error.txt (the seed writes it only for an error).
    clean = message.model_copy(update={"error": None, "reward": 1.0})
    action = finished(step(TRIAL, pod(runner={"terminated": {}}), Finished(clean, "{}")))
    assert action.record is not None
    assert action.record.result.reward == 1.0
    assert action.record.error_text is None


def test_a_runner_that_died_without_a_word_gets_a_record_without_phases() -> None:
    action = finished(
        step(TRIAL, pod(runner={"terminated": {"startedAt": "x"}}), Finished(None, None))
    )
    record = action.record
    assert record is not None
    assert record.result.error is not None
    assert record.result.error.type == ErrorType.INTERNAL_ERROR
    # The runner ran: which phase it was in is not the operator's to guess.
    assert record.result.timestamps.environment_setup_started_at is None
    assert record.result.durations.total_sec == 60.0


def test_a_trial_lost_too_often_is_recorded_with_its_tries() -> None:
    tired = replace(TRIAL, infra_retries=2, pod_name="t1-r2", phase=TrialPhase.RUNNING)
    action = finished(step(tired, None, Lost("Evicted.")))
    record = action.record
    assert record is not None
    assert record.result.rollout is not None
    assert record.result.rollout.tries == 3
    assert record.error_text is not None
    assert "Tries: 3 (the earlier ones' files are under retries/)" in record.error_text
    # No Pod known: the trial started when it was created.
    assert record.result.timestamps.started_at == TRIAL.created_at
    assert record.result.durations.total_sec == 90.0


def test_a_lost_try_is_kept_under_retries_before_the_next_pod() -> None:
    retry = step(replace(TRIAL, phase=TrialPhase.RUNNING), None, Lost("Gone."))
    assert isinstance(retry, RetryPod)  # recorded first; the Pod follows
    first_retry = replace(TRIAL, infra_retries=1, pod_name="t1-r1")
    action = look(first_retry, previous=None)
    assert isinstance(action, CreatePod)
    assert (action.pod_name, action.retry) == ("t1-r1", 1)
    assert action.keep is not None
    assert action.keep.prefix == PREFIX
    assert action.keep.number == 1
    assert action.keep.destination == PREFIX + "retries/1/"
    second = look(replace(TRIAL, infra_retries=2, pod_name="t1-r2"), previous=None)
    assert isinstance(second, CreatePod)
    assert second.keep is not None
    assert second.keep.destination == PREFIX + "retries/2/"
    # A first try has nothing to keep.
    first = look(TRIAL, previous=None)
    assert isinstance(first, CreatePod)
    assert first.keep is None


def look(trial: TrialEntry, *, previous: PodEntry | None) -> TrialAction:
    return decide(
        trial,
        None,
        now=NOW,
        config=OperatorConfig(runner_image="r:1"),
        place=PLACE,
        max_infra_retries=2,
        previous_pod=previous,
    )


def test_the_next_try_waits_for_the_lost_runner_to_stop_writing() -> None:
    running = {"running": {"startedAt": "2025-01-15T10:29:05Z"}}
    retried = replace(TRIAL, infra_retries=1, pod_name="t1-r1")
    # The lost Pod is being deleted; its runner uploads what it has in its grace period.
    soon = pod(runner=running, deleted_at=NOW)
    assert look(retried, previous=soon) == Nothing(waiting=True)
    # Not deleted (yet) and running: it may write too.
    assert look(retried, previous=pod(runner=running)) == Nothing(waiting=True)
    # A runner that shows as running long after its Pod's deletion time is on a lost node.
    long_ago = pod(runner=running, deleted_at=NOW - timedelta(seconds=OLD_RUNNER_MARGIN_SEC + 1))
    assert isinstance(look(retried, previous=long_ago), CreatePod)
    # A runner that stopped has written what it will.
    stopped = pod(runner={"terminated": {"exitCode": 143}}, deleted_at=NOW)
    assert isinstance(look(retried, previous=stopped), CreatePod)
    # The lost Pod itself is deleted when the retry is recorded, even while its runner runs.
    lost = step(TRIAL, pod(runner=running), Lost("Preempted."))
    assert isinstance(lost, RetryPod)
    assert lost.old_pod == "t1"


# --- cost -----------------------------------------------------------------------------------------

PRICES = UnitPrices(per_hour={"cpu": 1.0})
"""One unit of currency per core-hour, nothing else priced: costs are easy to check by hand."""


def priced_pod(*, started: datetime | None, runner: dict[str, Any], cpus: str = "2") -> PodEntry:
    """A trial Pod as the index keeps it: 2 cores for the task, 50m for the runner."""
    body: dict[str, Any] = {
        "metadata": {"name": "t1", "creationTimestamp": "2025-01-15T10:29:00Z"},
        "spec": {"containers": [
            {"name": "environment", "resources": {"requests": {"cpu": cpus}}},
            {"name": "runner", "resources": {"requests": {"cpu": "50m"}}},
        ]},
        "status": {"containerStatuses": [{"name": "runner", "state": runner}]},
    }  # fmt: skip
    if started is not None:
        body["status"]["startTime"] = started.isoformat().replace("+00:00", "Z")
    return PodEntry("ns", "t1", "pod-uid", "t1", body)


def test_a_runner_record_gets_the_cost_of_its_pod_from_its_start_to_the_runners_end() -> None:
    started = NOW - timedelta(hours=2)
    ended = NOW - timedelta(hours=1)  # the runner ended an hour ago; the operator looks now
    runner = {"terminated": {"exitCode": 0, "finishedAt": ended.isoformat()}}
    message = TerminationMessage.model_validate({"reward": 1.0, "upload_error": None})
    found = priced_pod(started=started, runner=runner)
    action = finished(step(TRIAL, found, Finished(message, "{}"), PRICES))
    assert action.status["cost"] == 2.05  # 2.05 cores for one hour
    assert action.record is None  # the runner wrote result.json: the operator sets its cost
    assert action.cost == RecordCost(PLACE.storage, PREFIX + "result.json", 2.05)
    # No prices, no cost, nothing to write.
    unpriced = finished(step(TRIAL, found, Finished(message, "{}")))
    assert "cost" not in unpriced.status
    assert unpriced.cost is None


def test_an_operator_record_has_the_cost_too_and_a_pod_never_started_cost_nothing() -> None:
    pulling = priced_pod(started=NOW - timedelta(minutes=30), runner={"waiting": {}})
    failure = Failed(ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED, "no such image")
    action = finished(step(TRIAL, pulling, failure, PRICES))
    assert action.status["cost"] == 1.025  # held its node for half an hour while pulling
    assert action.record is not None
    assert action.record.result.cost == 1.025
    assert action.cost is None  # the record carries it
    unscheduled = priced_pod(started=None, runner={"waiting": {}})
    nowhere = Failed(ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED, "0/3 nodes are available")
    action = finished(step(TRIAL, unscheduled, nowhere, PRICES))
    assert action.status["cost"] == 0.0
    assert action.record is not None
    assert action.record.result.cost == 0.0


def test_a_retried_trial_costs_its_lost_tries_too() -> None:
    evicted = priced_pod(started=NOW - timedelta(hours=1), runner={"terminated": {"exitCode": 137}})
    retry = step(TRIAL, evicted, Lost("Evicted."), PRICES)
    assert isinstance(retry, RetryPod)
    assert retry.status["cost"] == 2.05
    # The status keeps it; the next try adds its own.
    second = replace(TRIAL, infra_retries=1, pod_name="t1-r1", cost=2.05)
    runner = {"terminated": {"exitCode": 0, "finishedAt": NOW.isoformat()}}
    message = TerminationMessage.model_validate({"reward": 0.0})
    action = finished(
        step(second, priced_pod(started=NOW - timedelta(hours=1), runner=runner),
             Finished(message, "{}"), PRICES)
    )  # fmt: skip
    assert action.status["cost"] == 4.1
