"""The termination message: compact JSON of the trial's outcome, never over 4096 bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rollout.api.errors import ErrorType
from rollout.api.results import TrialDurations, TrialError, TrialResult, TrialTimestamps
from rollout.api.wire.termination import (
    MAX_BYTES,
    TRUNCATED,
    RunnerTimes,
    TerminationMessage,
    from_result,
    render,
)

URI = "s3://bucket/jobs/job/agent/dataset/task__1/result.json"


def result_with(message: str | None = None, reward: float | None = None) -> TrialResult:
    started = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    return TrialResult(
        task_name="task",
        dataset_name="dataset",
        agent_name="agent",
        attempt=1,
        reward=reward,
        error=TrialError(type=ErrorType.AGENT_EXECUTION_FAILED, message=message)
        if message is not None
        else None,
        durations=TrialDurations(total_sec=12.5, environment_setup_sec=1.25),
        timestamps=TrialTimestamps(started_at=started, ended_at=started),
    )


def test_a_passing_trial() -> None:
    data = render(from_result(result_with(reward=1.0), result_uri=URI, upload_error=None))
    document = json.loads(data)
    assert document == {
        "reward": 1.0,
        "error": None,
        "durations": {
            "total_sec": 12.5,
            "environment_setup_sec": 1.25,
            "agent_setup_sec": None,
            "agent_execution_sec": None,
            "verifier_sec": None,
        },
        "timestamps": {
            "started_at": "2025-01-15T10:30:00Z",
            "environment_setup_started_at": None,
            "environment_setup_ended_at": None,
            "agent_setup_started_at": None,
            "agent_setup_ended_at": None,
            "agent_execution_started_at": None,
            "agent_execution_ended_at": None,
            "verifier_started_at": None,
            "verifier_ended_at": None,
            "ended_at": "2025-01-15T10:30:00Z",
        },
        "result_uri": URI,
        "upload_error": None,
    }
    assert b" " not in data  # compact
    assert TerminationMessage.model_validate_json(data).reward == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "x" * 1_000_000,
        "é" * 300_000,  # two bytes each in UTF-8
        '\x00\x01\n"\\' * 200_000,  # each escaped to several bytes in JSON
        "🙂" * 100_000,
    ],
    ids=["ascii", "two-byte", "escapes", "emoji"],
)
def test_an_enormous_error_message_still_gives_valid_json_under_4096_bytes(text: str) -> None:
    fields = from_result(result_with(message=text), result_uri=URI, upload_error=text[:5000])
    data = render(fields)
    assert len(data) <= MAX_BYTES
    message = TerminationMessage.model_validate_json(data)
    assert message.error is not None
    assert message.error.type is ErrorType.AGENT_EXECUTION_FAILED
    assert message.error.message.endswith(TRUNCATED)
    assert text.startswith(message.error.message.removesuffix(TRUNCATED))
    assert message.result_uri == URI
    assert message.durations is not None
    assert message.durations.total_sec == 12.5
    # Room is used, not wasted: the message fills most of the 4 KiB.
    assert len(data) > MAX_BYTES - 200


def test_a_short_message_is_kept_whole() -> None:
    data = render(from_result(result_with(message="boom"), result_uri=URI, upload_error="down"))
    document = json.loads(data)
    assert document["error"]["message"] == "boom"
    assert document["upload_error"] == "down"


def test_without_a_result_only_the_error_is_given() -> None:
    fields = from_result(None, result_uri=None, upload_error=None)
    fields["error"] = {"type": "internal_error", "message": "m" * 10_000}
    data = render(fields)
    assert len(data) <= MAX_BYTES
    assert json.loads(data)["reward"] is None


def test_when_text_is_not_enough_the_big_parts_go() -> None:
    fields = from_result(
        result_with(message="short"), result_uri="s3://b/" + "k" * 5000, upload_error=None
    )
    data = render(fields)
    assert len(data) <= MAX_BYTES
    document = json.loads(data)
    assert document["result_uri"] is None
    assert document["timestamps"] is not None


RUNNER = RunnerTimes(
    started_at=datetime(2025, 1, 15, 10, 30, 0, 120_000, tzinfo=UTC),
    trial_started_at=datetime(2025, 1, 15, 10, 30, 0, 480_000, tzinfo=UTC),
    environment_ready_at=datetime(2025, 1, 15, 10, 30, 0, 300_500, tzinfo=UTC),
    ended_at=None,
)


def test_the_runners_times_go_with_the_outcome_snake_case_to_the_microsecond() -> None:
    fields = from_result(result_with(reward=1.0), result_uri=URI, upload_error=None, runner=RUNNER)
    data = render(fields)
    assert json.loads(data)["runner"] == {
        "started_at": "2025-01-15T10:30:00.120000Z",
        "trial_started_at": "2025-01-15T10:30:00.480000Z",
        "environment_ready_at": "2025-01-15T10:30:00.300500Z",
        "ended_at": None,
    }
    assert TerminationMessage.model_validate_json(data).runner == RUNNER


def test_the_runners_times_are_the_first_to_go_when_the_message_is_too_long() -> None:
    def fields_with(uri: str) -> dict[str, object]:
        return from_result(
            result_with(message="short"), result_uri=uri, upload_error=None, runner=RUNNER
        )

    # A result_uri long enough that the message fits without the runner's times only.
    runner_size = len(json.dumps(json.loads(render(fields_with(URI)))["runner"]))
    whole = len(render(fields_with("")))
    uri = "s3://b/" + "k" * (MAX_BYTES - whole + runner_size // 2 - len("s3://b/"))
    assert len(render(fields_with(uri))) <= MAX_BYTES  # render() made it fit
    document = json.loads(render(fields_with(uri)))
    assert document["runner"] is None
    assert document["result_uri"] == uri
    assert document["error"]["message"] == "short"


def test_a_newer_runners_message_is_read_whatever_it_adds() -> None:
    """An operator older than the runner (a job's own runnerImage) still reads its outcome."""
    document = json.loads(
        render(
            from_result(result_with(reward=1.0), result_uri=URI, upload_error=None, runner=RUNNER)
        )
    )
    document["spans"] = {"upload_sec": 0.2}
    document["runner"]["uploads_started_at"] = "2025-01-15T10:30:01Z"
    message = TerminationMessage.model_validate_json(json.dumps(document))
    assert message.reward == 1.0
    assert message.runner == RUNNER
