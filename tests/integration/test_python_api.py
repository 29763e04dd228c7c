"""Seed 002's Python API for real: `rollout()` in local mode with a model agent answering through
an OpenAI-compatible server on loopback written here, `rollout()` on the loopback Kubernetes API
and S3 with the test playing the operator, and `load_tasks` on files and lists.

The local runs use the host sandbox (environment type local: no container engine); they skip
where it is not available, saying why.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_kit import job_status, wait_for_watch
from json_server import JsonServer, Reply, Request, json_server
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS, SECRETS
from rollout import load_tasks, rollout
from rollout.api.aggregate import aggregate
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.layout import job_config_key, job_prefix, job_result_key, trial_prefix
from rollout.api.results import TrialError, TrialResult, TrialTimestamps
from rollout.api.rowresults import (
    ROW_LINE,
    ResultLine,
    RowAdditions,
    RowFileSettings,
    row_files,
)
from rollout.api.rows import DataRow
from rollout.cli.errors import CliError
from rollout.local.host import host_sandbox_unavailable
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

NO_HOST_SANDBOX = host_sandbox_unavailable()
needs_host_sandbox = pytest.mark.skipif(NO_HOST_SANDBOX is not None, reason=NO_HOST_SANDBOX or "")

API_KEY = "sk-python-api-test-5c0e9a2d-never-written"
MODEL = "tiny-model"
SUMMARY_KEYS = {
    "benchmark_name",
    "total_tasks",
    "successful_tasks",
    "failed_tasks",
    "average_score",
    "metric",
    "total_time_seconds",
    "results_file",
    "evaluation_file",
    "timestamp",
}
NOW = datetime(2025, 2, 4, 10, 30, tzinfo=UTC)

# The benchmark: q1 and q2 answered right, q3 wrong, q4 refused by the server (HTTP 400, no
# retry): the agent fails that row. q2's first reply asks for a tool, so it takes two turns.
ROWS = [
    {"id": "q1", "question": "What is 2 + 2?", "answer": "4"},
    {"task_id": "q2", "query": "What is the capital of France?", "ground_truth": "Paris"},
    {"id": "q3", "input": "What is 3 * 3?", "expected": "9", "level": "easy"},
    {"id": "q4", "question": "Please break.", "answer": "x"},
]
ANSWERS = {
    "What is 2 + 2?": "The sum is <answer>4</answer>",
    "What is the capital of France?": "<answer>Paris</answer>",
    "What is 3 * 3?": "<answer>10</answer>",
}


# --- an OpenAI-compatible chat-completions server -----------------------------------------------


def model_reply(request: Request) -> Reply:
    """Answers each question from `ANSWERS` by the conversation's user message; asks for a tool
    first when the question is about France; refuses the rest with a 400."""
    path, body = request.path, request.body
    messages = body.get("messages") or []
    question = next((m["content"] for m in messages if m.get("role") == "user"), "")
    if path != "/v1/chat/completions" or question not in ANSWERS:
        return Reply(400, {"error": {"message": "cannot answer that", "type": "invalid_request"}})
    message: dict[str, Any] = {"role": "assistant", "content": ANSWERS[question]}
    if "France" in question and not any(m.get("role") == "tool" for m in messages):
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "web_search", "arguments": '{"q": "France"}'},
                }
            ],
        }
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        },
    )


@pytest.fixture
def model_server() -> Iterator[JsonServer]:
    with json_server(model_reply) as server:
        yield server


# --- a project as seed 002 lays it out ------------------------------------------------------


def write_project(root: Path, base_url: str, name: str = "mini", **config: Any) -> Path:
    """benchmark/mini.jsonl and configs/rollout/<name>.json, seed 002's layout (paths in the
    config relative to the project root, the working directory)."""
    (root / "benchmark").mkdir(parents=True, exist_ok=True)
    (root / "benchmark" / "mini.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (root / "configs" / "rollout").mkdir(parents=True, exist_ok=True)
    settings = {
        "data_path": "benchmark/mini.jsonl",
        "output_dir": "results/mini_eval",
        "model_name": MODEL,
        "api_key": API_KEY,
        "base_url": base_url,
        "max_turns": 3,
        "max_retries": 0,
        "max_workers": 2,
        "parallel": True,
        "evaluation_metric": "exact_match",
        "benchmark_name": "mini_v1",
        **config,
    }
    path = root / "configs" / "rollout" / f"{name}.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def local_environ(root: Path) -> dict[str, str]:
    """A clean environment for a local run (the runner gets PATH, HOME and PYTHONPATH)."""
    (root / "home").mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(root / "home"),
        "ROLLOUT_CACHE_DIR": str(root / "cache"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }


def jobs_in(results: Path) -> list[Path]:
    """The job directories in a jobs_dir (local mode keeps its scratch space in `.rollout-tmp`)."""
    return sorted(p for p in results.iterdir() if not p.name.startswith("."))


def files_containing(root: Path, text: str) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*"))
        if p.is_file() and text.encode() in p.read_bytes()
    ]


# --- rollout(local=True) -------------------------------------------------------------------


@needs_host_sandbox
def test_rollout_locally_answers_every_row_with_the_model_and_returns_the_summary(
    tmp_path: Path, model_server: JsonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_project(tmp_path, f"{model_server.url}/v1")

    summary = rollout(
        config_path="configs/rollout/mini.json", local=True, environ=local_environ(tmp_path)
    )

    assert set(summary) == SUMMARY_KEYS
    assert summary["benchmark_name"] == "mini"  # the data's name (the file's stem)
    assert summary["total_tasks"] == 4
    assert summary["successful_tasks"] == 3  # q4: the server refused, the agent failed
    assert summary["failed_tasks"] == 1
    assert summary["average_score"] == pytest.approx(2 / 3)  # q1 and q2 of the three scored
    assert summary["metric"] == "exact_match"
    assert summary["total_time_seconds"] > 0
    (job_dir,) = jobs_in(tmp_path / "results" / "mini_eval")
    assert job_dir.name.startswith("mini_v1-")  # benchmark_name and the time
    assert summary["results_file"] == str(job_dir / "results.jsonl")
    assert summary["evaluation_file"] == str(job_dir / "evaluation.json")
    (summary_file,) = job_dir.glob("summary_mini_*.json")
    assert {**json.loads(summary_file.read_text()), **summary} == json.loads(
        summary_file.read_text()
    )

    lines = {
        line["task_id"]: line
        for line in map(json.loads, (job_dir / "results.jsonl").read_text().splitlines())
    }
    assert [lines[i]["score"] for i in ("q1", "q2", "q3", "q4")] == [1.0, 1.0, 0.0, None]
    assert lines["q1"]["predicted_answer"] == "4"
    assert lines["q2"]["question"] == "What is the capital of France?"  # `query`, an alias
    assert lines["q2"]["trajectory"]["total_turns"] == 2  # a tool call, then the answer
    assert [c["name"] for c in lines["q2"]["trajectory"]["tool_calls"]] == ["web_search"]
    assert lines["q4"]["success"] is False
    assert lines["q4"]["rollout"]["error_type"] == "agent_execution_failed"
    assert {line["rollout"]["agent_name"] for line in lines.values()} == {MODEL}

    # The model was asked with the config's settings and key, the key never written anywhere.
    assert model_server.seen
    for request in model_server.seen:
        assert request.headers["Authorization"] == f"Bearer {API_KEY}"
        assert request.body["model"] == MODEL
    assert files_containing(tmp_path / "results", API_KEY) == []
    submitted = json.loads((job_dir / "config.json").read_text())
    assert submitted["agents"][0]["model"]["api_key"] == "${ROLLOUT_MODEL_API_KEY}"
    assert submitted["n_concurrent_trials"] == 2
    assert submitted["shard_size"] == 2  # 4 rows over 2 workers
    assert config.read_text().count(API_KEY) == 1  # the config itself is left as it was


@needs_host_sandbox
async def test_rollout_arguments_override_the_config(
    tmp_path: Path, model_server: JsonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Called from a running event loop, as in a notebook: local mode runs its own loop, in a
    # thread of its own then.
    monkeypatch.chdir(tmp_path)
    write_project(tmp_path, f"{model_server.url}/v1")

    summary = rollout(
        config_path="configs/rollout/mini.json",
        output_dir="elsewhere",
        task_ids=["q3", "q1"],
        metric="contains_answer",
        local=True,
        environ=local_environ(tmp_path),
    )
    assert (summary["total_tasks"], summary["successful_tasks"]) == (2, 2)
    assert summary["metric"] == "contains_answer"
    assert summary["average_score"] == pytest.approx(0.5)  # q1 right, q3 wrong
    assert Path(summary["results_file"]).parent.parent == tmp_path / "elsewhere"

    unscored = rollout(
        config_path="configs/rollout/mini.json",
        output_dir="elsewhere",
        max_tasks=1,
        evaluate=False,
        local=True,
        environ=local_environ(tmp_path),
    )
    assert (unscored["total_tasks"], unscored["successful_tasks"]) == (1, 1)
    assert unscored["average_score"] is None  # nothing was scored
    assert len(jobs_in(tmp_path / "elsewhere")) == 2  # a job of its own each call

    # Without seed 002's files, the summary is made from the rows' own lines.
    quiet = write_project(tmp_path, f"{model_server.url}/v1", "quiet", save_summary=False)
    unsaved = rollout(config_path=quiet, local=True, environ=local_environ(tmp_path))
    (job_dir,) = jobs_in(tmp_path / "results" / "mini_eval")
    assert list(job_dir.glob("summary_*.json")) == []
    assert (unsaved["total_tasks"], unsaved["successful_tasks"]) == (4, 3)
    assert unsaved["average_score"] == pytest.approx(2 / 3)
    assert unsaved["results_file"] == str(job_dir / "results.jsonl")  # save_results is on
    assert unsaved["evaluation_file"] is None


def test_rollout_refuses_bad_input_before_running_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = write_project(tmp_path, "http://127.0.0.1:9/v1", available_tools=["web:search"])
    with pytest.raises(InvalidInput) as err:
        rollout(config_path=config, local=True, environ=local_environ(tmp_path))
    assert [(p.file, p.field) for p in err.value.problems] == [(str(config), "available_tools")]

    config = write_project(tmp_path / "b", "http://127.0.0.1:9/v1")
    bad = tmp_path / "b" / "benchmark" / "mini.jsonl"
    bad.write_text(
        '{"id": "q1", "question": "?"}\n{"question": "no id"}\n{"id": "q1", "query": "!"}\n'
    )
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(InvalidInput) as err:
        rollout(config_path=config, local=True, environ=local_environ(tmp_path))
    text = str(err.value)
    assert f"{bad}: line 2: id: missing" in text
    assert f"{bad}: line 3: id: duplicate id 'q1'" in text
    assert all(p.file == f"{config} (as job.yaml)" for p in err.value.problems)
    assert str(config) in text  # the generated job file is named as the config
    assert "rollout-python-" not in text
    with pytest.raises(InvalidInput) as err:
        rollout(config_path=config, max_tasks=0, local=True, environ=local_environ(tmp_path))
    assert [(p.file, p.field) for p in err.value.problems] == [("rollout()", "max_tasks")]
    assert not (tmp_path / "b" / "results").exists()


# --- rollout() on a cluster --------------------------------------------------------------------


def cluster_environ(root: Path, kubeconfig: Path, storage: S3Settings) -> dict[str, str]:
    (root / "home").mkdir(exist_ok=True)
    (root / "home" / "config.yaml").write_text("")
    assert storage.location.endpoint is not None
    return {
        "HOME": str(root / "home"),
        "KUBECONFIG": str(kubeconfig),
        "ROLLOUT_CONFIG": str(root / "home" / "config.yaml"),
        "ROLLOUT_CACHE_DIR": str(root / "cache"),
        "ROLLOUT_STORAGE_BUCKET": storage.location.bucket,
        "ROLLOUT_STORAGE_ENDPOINT": storage.location.endpoint,
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": storage.credentials.access_key_id.get_secret_value(),
        "AWS_SECRET_ACCESS_KEY": storage.credentials.secret_access_key.get_secret_value(),
    }


def operator_results(
    store: ObjectStore, job: str, agent: str
) -> dict[tuple[str, str, str], float | None]:
    """What the operator and the rows' runners leave in storage for the job's four rows: each
    row's result.json and row.json, the job's result.json, and seed 002's files."""
    scores = {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": None}
    answers = {"q1": "4", "q2": "Paris", "q3": "10", "q4": None}
    prefix = store.location.prefix
    lines: list[ResultLine] = []
    trials: list[TrialResult] = []
    rewards: dict[tuple[str, str, str], float | None] = {}
    for row in ROWS:
        row_id = str(row.get("id") or row.get("task_id"))
        score = scores[row_id]
        rewards[(agent, "mini", row_id)] = score
        failed = ErrorType.AGENT_EXECUTION_FAILED
        error = None if answers[row_id] else TrialError(type=failed, message="400")
        result = TrialResult(
            task_name=row_id,
            dataset_name="mini",
            agent_name=agent,
            attempt=1,
            reward=score,
            error=error,
            timestamps=TrialTimestamps(started_at=NOW, ended_at=NOW + timedelta(seconds=3)),
        )
        line = ResultLine(
            task_id=row_id,
            question=str(row.get("question") or row.get("query") or row.get("input")),
            predicted_answer=answers[row_id],
            success=answers[row_id] is not None,
            ground_truth=row.get("answer") or row.get("ground_truth") or row.get("expected"),
            score=score,
            error=None if error is None else "400",
            trajectory={"final_answer": answers[row_id]},
            rollout=RowAdditions(
                agent_name=agent,
                dataset_name="mini",
                attempt=1,
                error_type=None if error is None else failed,
                verifier="exact_match",
            ),
        )
        base = trial_prefix(prefix, job, agent, "mini", row_id, 1)
        store.put_bytes(base + "result.json", result.to_json().encode())
        store.put_bytes(base + ROW_LINE, line.to_json().encode())
        trials.append(result)
        lines.append(line)
    made = aggregate(job, trials, started_at=NOW, ended_at=NOW + timedelta(seconds=42))
    store.put_bytes(job_result_key(prefix, job), made.to_json().encode())
    base = job_prefix(prefix, job)
    files = row_files(
        lines,
        RowFileSettings(),
        benchmark_name="mini",
        total_time_seconds=made.total_duration_sec,
        at=NOW + timedelta(seconds=42),
        uri=lambda name: store.uri(base + name),
    )
    for name, data in files.items():
        store.put_bytes(base + name, data)
    return rewards


async def submit_on_cluster(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> tuple[asyncio.Task[dict[str, Any]], dict[str, Any]]:
    """`rollout()` of the project's config on the cluster, in a thread: the call under way and
    the RolloutJob it submitted."""
    write_project(tmp_path, "https://models.example.com/v1")
    environ = cluster_environ(tmp_path, kube.write_kubeconfig(tmp_path / "kubeconfig"), s3_settings)
    run = asyncio.create_task(
        asyncio.to_thread(rollout, config_path="configs/rollout/mini.json", environ=environ)
    )

    async def submitted() -> dict[str, Any] | None:
        found = await kube.list(ROLLOUT_JOBS, kube.namespace)
        return found[0] if found else None

    return run, await kube.wait_for(submitted, what="the RolloutJob rollout() submits")


async def test_rollout_on_the_cluster_returns_the_summary_of_that_run(
    kube: Kube,
    s3_settings: S3Settings,
    store: ObjectStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    run, body = await submit_on_cluster(kube, s3_settings, tmp_path)
    job = body["spec"]["jobName"]
    assert job.startswith("mini_v1-")
    assert API_KEY not in json.dumps(body)
    (agent,) = body["spec"]["agents"]
    assert agent["name"] == MODEL
    # The key went where agent secrets go: the job's Secret, not the RolloutJob or config.json.
    secrets = await kube.list(SECRETS, kube.namespace)
    values = [base64.b64decode(v).decode() for s in secrets for v in (s.get("data") or {}).values()]
    assert API_KEY in values
    config = store.get_bytes(job_config_key("", job))
    assert API_KEY.encode() not in config
    assert json.loads(config)["agents"][0]["model"]["api_key"] == "${ROLLOUT_MODEL_API_KEY}"

    # The operator's part: the rows answered, seed 002's files written, the job completed.
    await wait_for_watch(kube)
    rewards = await asyncio.to_thread(operator_results, store, job, MODEL)
    await kube.patch_status(
        ROLLOUT_JOBS, body["metadata"]["name"], job_status("Completed", rewards)
    )
    summary = await run

    job_dir = tmp_path / "results" / "mini_eval" / job
    assert summary == {
        "benchmark_name": "mini",
        "total_tasks": 4,
        "successful_tasks": 3,
        "failed_tasks": 1,
        "average_score": pytest.approx(2 / 3),
        "metric": "exact_match",
        "total_time_seconds": 42.0,
        "results_file": str(job_dir / "results.jsonl"),  # the downloaded copy, not s3://
        "evaluation_file": str(job_dir / "evaluation.json"),
        "timestamp": "2025-02-04T10:30:42Z",
    }
    assert (job_dir / "results.jsonl").read_text().count("\n") == 4


async def test_rollout_raises_when_the_cluster_job_fails(
    kube: Kube,
    s3_settings: S3Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    run, body = await submit_on_cluster(kube, s3_settings, tmp_path)
    await wait_for_watch(kube)
    message = "dataset mini is not in storage"
    await kube.patch_status(
        ROLLOUT_JOBS, body["metadata"]["name"], job_status("Failed", {}, message=message)
    )
    with pytest.raises(CliError, match=rf"job {body['spec']['jobName']} failed"):
        await run


# --- load_tasks ------------------------------------------------------------------------------


def test_load_tasks_reads_jsonl_json_and_lists_with_the_seeds_aliases(tmp_path: Path) -> None:
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "\n")
    as_json = tmp_path / "b.json"
    as_json.write_text(json.dumps(ROWS))
    for source in (jsonl, str(as_json), ROWS):
        rows = load_tasks(source)
        assert all(isinstance(row, DataRow) for row in rows)
        assert [row.id for row in rows] == ["q1", "q2", "q3", "q4"]
        assert [row.question for row in rows] == [
            "What is 2 + 2?",
            "What is the capital of France?",
            "What is 3 * 3?",
            "Please break.",
        ]
        assert [row.answer for row in rows] == ["4", "Paris", "9", "x"]
        assert rows[2].metadata["level"] == "easy"  # any other field is metadata
        assert rows[2].metadata["ground_truth"] == "9"
    assert load_tasks([]) == []


def test_load_tasks_names_the_file_line_and_field_of_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "?"}\n{"id": "b"}\n{"id": "a", "question": "?"}\n')
    with pytest.raises(InvalidInput) as err:
        load_tasks(bad)
    assert [(p.file, p.field) for p in err.value.problems] == [
        (str(bad), "line 2: question"),
        (str(bad), "line 3: id"),
    ]
    bad.write_text('{"id": "a", "question": "?"}\n{oops\n')
    with pytest.raises(InvalidInput, match=r"bad\.jsonl: line 2: not JSON"):
        load_tasks(bad)

    with pytest.raises(InvalidInput) as err:
        load_tasks([{"id": "a", "question": "?"}, {"question": "no id"}, "text"])  # type: ignore[list-item]
    assert [str(p) for p in err.value.problems] == [
        "tasks[1]: id: missing: a row needs an `id` (or `task_id`)",
        "tasks[2]: a row is a JSON object, and this is a string",
    ]
    with pytest.raises(InvalidInput, match="does not exist"):
        load_tasks(tmp_path / "absent.jsonl")
    with pytest.raises(InvalidInput, match=r"is one task \(a dict\)"):
        load_tasks({"id": "a", "question": "?"})  # type: ignore[arg-type]
