"""Seed 002's result files over rows' lines (results.jsonl, evaluation.json, the summary), and
the job settings and translation that data benchmarks add."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.job import parse_job
from rollout.api.resources import DatasetRef
from rollout.api.results import TrialError, TrialResult
from rollout.api.rowresults import (
    EVALUATION_JSON,
    RESULTS_JSONL,
    ResultLine,
    RowAdditions,
    RowFileSettings,
    evaluation,
    line_from_result,
    parse_line,
    row_files,
    summary_file_name,
)
from rollout.api.translate import EVALUATOR_SECRET_KEY, job_to_rollout_job, rollout_job_to_job
from rollout.cli.render import agent_env_secret_ref, create_secret_command

AT = datetime(2025, 2, 4, 10, 30, tzinfo=UTC)


def line(task: str, score: float | None, *, agent: str = "a", verifier: str = "f1_score",
         answered: bool = True) -> ResultLine:  # fmt: skip
    return ResultLine(
        task_id=task,
        question=f"{task}?",
        predicted_answer="x" if answered else None,
        success=answered,
        ground_truth="y",
        score=score,
        error=None if answered else "boom",
        trajectory={"final_answer": "x"},
        rollout=RowAdditions(agent_name=agent, dataset_name="d", attempt=1, verifier=verifier),
    )


LINES = [
    line("q1", 1.0),
    line("q2", 0.5),
    line("q3", 0.5, agent="b"),
    line("q4", None, agent="b", answered=False),
    line("q5", 1.0, verifier="exact_match"),
]


def test_evaluation_counts_means_passes_and_the_distribution_per_metric_and_agent() -> None:
    found = evaluation(LINES)
    f1 = found.metrics["f1_score"]
    assert (f1.count, f1.mean, f1.passes, f1.unscored) == (3, pytest.approx(2 / 3), 1, 1)
    assert f1.distribution == {"0.5": 2, "1.0": 1}
    assert found.metrics["exact_match"].distribution == {"1.0": 1}
    assert (found.overall.count, found.overall.passes) == (4, 2)
    assert found.overall.mean == pytest.approx(3 / 4)
    assert found.agents["b"].mean == pytest.approx(0.5)
    assert found.agents["b"].unscored == 1


def test_the_files_follow_the_settings_and_the_summary_has_seed_002s_fields() -> None:
    files = row_files(
        LINES,
        RowFileSettings(),
        benchmark_name="rag benchmark/v1",
        total_time_seconds=12.5,
        at=AT,
        uri=lambda name: f"s3://b/jobs/j/{name}",
    )
    name = "summary_rag_benchmark_v1_20250204T103000.json"
    assert set(files) == {RESULTS_JSONL, EVALUATION_JSON, name}
    assert summary_file_name("rag benchmark/v1", AT) == name
    results = [json.loads(text) for text in files[RESULTS_JSONL].decode().splitlines()]
    assert [r["task_id"] for r in results] == ["q1", "q2", "q3", "q4", "q5"]
    assert list(results[0])[:8] == [
        "task_id", "question", "predicted_answer", "success", "ground_truth", "score", "error",
        "trajectory",
    ]  # fmt: skip
    summary = json.loads(files[name])
    assert summary == {
        "benchmark_name": "rag benchmark/v1",
        "total_tasks": 5,
        "successful_tasks": 4,
        "failed_tasks": 1,
        "average_score": pytest.approx(0.75),
        "metric": "f1_score,exact_match",
        "total_time_seconds": 12.5,
        "results_file": "s3://b/jobs/j/results.jsonl",
        "evaluation_file": "s3://b/jobs/j/evaluation.json",
        "timestamp": "2025-02-04T10:30:00Z",
    }
    only_summary = row_files(
        LINES,
        RowFileSettings(save_results=False),
        benchmark_name="b",
        total_time_seconds=None,
        at=AT,
    )
    assert RESULTS_JSONL not in only_summary
    assert json.loads(only_summary["summary_b_20250204T103000.json"])["results_file"] is None
    assert row_files(
        LINES, RowFileSettings(save_summary=False), benchmark_name="b",
        total_time_seconds=None, at=AT,
    ).keys() == {RESULTS_JSONL}  # fmt: skip


def test_a_line_reads_back_and_a_row_without_one_gets_its_records() -> None:
    text = LINES[0].to_json().encode()
    assert parse_line(text, "row.json") == LINES[0]
    with pytest.raises(InvalidInput, match=r"row\.json"):
        parse_line(b'{"task_id": 1}', "row.json")
    record = TrialResult.model_validate(
        {
            "task_name": "q9",
            "dataset_name": "d",
            "agent_name": "a",
            "attempt": 2,
            "reward": None,
            "error": TrialError(type=ErrorType.ENVIRONMENT_START_FAILED, message="no image"),
        }
    )
    made = line_from_result(record, verifier="exact_match")
    assert (made.task_id, made.success, made.score, made.error) == ("q9", False, None, "no image")
    assert made.rollout.error_type is ErrorType.ENVIRONMENT_START_FAILED
    assert made.rollout.attempt == 2


JOB = {
    "name": "rows",
    "agents": [{"name": "oracle"}],
    "datasets": [{"path": "./gsm", "split": "train"}],
    "evaluation_metric": "llm_judgement",
    "evaluator_model_name": "judge",
    "evaluator_base_url": "http://judge/v1",
    "evaluator_api_key": "${JUDGE_KEY}",
    "shard_size": 50,
    "max_tasks": 10,
}


def test_the_evaluator_key_goes_into_the_secret_and_comes_back_as_its_reference() -> None:
    job = parse_job(JOB)
    ref = [DatasetRef(name="gsm", digest="a" * 64)]
    rj, secret = job_to_rollout_job(
        job, namespace="ns", datasets=ref, environ={"JUDGE_KEY": "sk-judge-123456"}
    )
    assert secret is not None
    assert EVALUATOR_SECRET_KEY in secret["data"]
    assert rj.spec.evaluator_api_key is not None
    assert rj.spec.evaluator_api_key.key == EVALUATOR_SECRET_KEY
    manifest = json.dumps(rj.manifest())
    assert "sk-judge-123456" not in manifest
    assert '"shardSize": 50' in manifest
    assert '"maxTasks": 10' in manifest
    back = rollout_job_to_job(rj)
    assert back.evaluator_api_key == "${JUDGE_KEY}"
    assert (back.shard_size, back.max_tasks, back.evaluation_metric) == (50, 10, "llm_judgement")
    with pytest.raises(InvalidInput, match=r"evaluator_api_key: refers to \$\{JUDGE_KEY\}"):
        job_to_rollout_job(job, namespace="ns", datasets=ref, environ={})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"evaluator_api_key": "sk-literal"}, "must be a \\$\\{VAR\\} reference"),
        ({"evaluator_temperature": 2.5}, "evaluator_temperature"),
        ({"shard_size": 0}, "shard_size"),
        ({"evaluator_extra_params": {"model": "x"}}, "may not set model"),
        ({"max_tasks": True}, "max_tasks"),
        ({"datasets": [{"registry": {"path": "r.json"}, "name": "x", "split": "a"}]}, "split"),
    ],
)
def test_data_settings_are_checked(change: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_job({**JOB, **change})


def test_data_settings_at_their_defaults_stay_out_of_a_dump() -> None:
    dumped = parse_job({"agents": [{"name": "oracle"}], "datasets": [{"path": "d"}]}).model_dump()
    for name in ("shard_size", "save_results", "max_tasks", "evaluator_extra_params"):
        assert name not in dumped


def test_render_names_the_evaluator_key_in_the_secret_it_asks_for() -> None:
    job = parse_job({**JOB, "agents": [{"name": "oracle"}]})
    rj, _ = job_to_rollout_job(
        job, namespace="ns", datasets=[DatasetRef(name="gsm", digest="a" * 64)], environ=None
    )
    name = agent_env_secret_ref(rj)
    assert name == "rows-agent-env"
    command = create_secret_command(rj, name, "evals")
    assert command == (
        "kubectl create secret generic rows-agent-env --namespace evals "
        '"--from-literal=evaluator-api-key=${JUDGE_KEY}"'
    )
