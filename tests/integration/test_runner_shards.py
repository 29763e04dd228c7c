"""A shard of a data dataset run by the real runner (`rollout_runner.shard`): its rows one after
another in a fake container through the shim, their files in a bucket of the loopback S3 server.

The rows archive gets into the bucket as the CLI publishes it (`rollout.datasets.bundle`'s
`rows_archive` under the name `rows_manifest` gives it). The agent is a bash script that answers
the last word of its instruction (so that a row's question decides whether it is right), and
appends that word to /app/answered, which tells the test which rows ran in this container.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from runner_kit import DATASET, JOB, KILL_GRACE_SEC, make_spec, new_container_dir, options_for
from s3_kit import S3Settings

from fakecontainer import FakeContainer, eventually, fake_container, requires_fake_container
from rollout.api.dataset import load_dataset_path
from rollout.api.errors import ErrorType
from rollout.api.layout import task_archive_key, trial_prefix
from rollout.api.resources import RolloutTrialSpec
from rollout.api.results import TrialError, TrialResult
from rollout.api.rowrun import EvaluatorSettings, RowItem, ShardRows, shard_task_name
from rollout.api.tracecontext import parse_traceparent
from rollout.datasets.bundle import rows_archive, rows_manifest
from rollout.storage import ObjectStore
from rollout_runner.shard import ShardReport, run_shard
from rollout_runner.shim_environment import ShimEnvironment
from rollout_runner.spec import AgentEnv

pytestmark = [pytest.mark.integration, requires_fake_container()]

ANSWERER = "answerer"

# The last word of the instruction is the answer; "File ..." rows answer in answer.txt (and
# print something else), "Fail ..." rows exit non-zero; "Slow ..." rows take a minute.
EXECUTE = r"""
q=$(cat "$ROLLOUT_TASK_INSTRUCTION")
printf '%s\n' "$TRACEPARENT" > /logs/agent/traceparent.txt
word=${q##* }
echo "$word" >> /app/answered
case "$q" in
  File*) echo "this line is not the answer"; printf '%s\n' "$word" > /logs/agent/answer.txt ;;
  Fail*) echo "cannot answer $word" >&2; exit 3 ;;
  Forge*) echo 1 > /logs/verifier/reward.txt; echo "  $word  " ;;
  Who*) id -un ;;
  Slow*) touch "/app/started-$word"; sleep 60; echo "$word" ;;
  *) echo "  $word  " ;;
esac
"""

ROWS = [
    {"id": "right", "question": "Reply with Paris", "answer": "Paris"},
    {"id": "wrong", "question": "Reply with Lyon", "answer": "Paris"},
    {"id": "in-file", "question": "File says 42", "answer": "42"},
    {"id": "failing", "question": "Fail on 7", "answer": "7"},
    {"id": "forger", "question": "Forge reward Rome", "answer": "Paris"},
]

EVALUATE = """
def evaluate(metadata, trajectory):
    if metadata["id"] == "boom":
        raise RuntimeError("the verifier broke on purpose")
    correct = trajectory["final_answer"] == metadata["ground_truth"]
    return (0.5 if correct else 0.0, correct)
"""


def write_dataset(
    root: Path, rows: list[dict[str, Any]], *, evaluate: str | None = None, toml: str = ""
) -> Path:
    """A Shape A dataset: dataset.toml, data/test.jsonl, and tests/evaluate.py if given."""
    (root / "data").mkdir(parents=True)
    (root / "dataset.toml").write_text(f'name = "{DATASET}"\n{toml}')
    (root / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if evaluate is not None:
        (root / "tests").mkdir()
        (root / "tests" / "evaluate.py").write_text(textwrap.dedent(evaluate))
    return root


def publish_rows(store: ObjectStore, dataset: Path) -> tuple[str, dict[str, Any]]:
    """Put the dataset's rows archive into the bucket as the CLI does: its content hash, and
    its verifier as the manifest names it."""
    rows = load_dataset_path(dataset).rows
    assert rows is not None
    manifest = rows_manifest(rows)
    store.put_bytes(task_archive_key(store.prefix, manifest.content_hash), rows_archive(rows))
    return manifest.content_hash, manifest.verifier


def shard_spec(
    store: ObjectStore,
    content_hash: str,
    verifier: dict[str, Any],
    ids: list[str],
    *,
    agent: str = ANSWERER,
    install: str | None = None,
    execute: str = EXECUTE,
    spec_fields: dict[str, Any] | None = None,
    **shard: Any,
) -> RolloutTrialSpec:
    rows = ShardRows(
        number=1,
        items=[RowItem(id=i, attempt=1) for i in ids],
        verifier=verifier,
        **shard,
    )
    return make_spec(
        store,
        shard_task_name(1),
        content_hash,
        agent=agent,
        install=install,
        execute=execute,
        rows=rows.model_dump(mode="json"),
        **(spec_fields or {}),
    )


def row_prefix(store: ObjectStore, row: str, agent: str = ANSWERER) -> str:
    return trial_prefix(store.location.prefix, JOB, agent, DATASET, row, 1)


def row_files(store: ObjectStore, row: str, agent: str = ANSWERER) -> dict[str, bytes]:
    """Every object of the row's trial directory, by its path in it."""
    prefix = row_prefix(store, row, agent)
    return {key[len(prefix) :]: store.get_bytes(key) for key in store.list_keys(prefix)}


def row_result(files: dict[str, bytes]) -> TrialResult:
    return TrialResult.from_json(files["result.json"])


def answered(container: FakeContainer) -> list[str]:
    """The words the agent answered in this container, in order."""
    path = container.root / "app" / "answered"
    return path.read_text().split() if path.exists() else []


async def run_in(
    container: FakeContainer,
    tmp_path: Path,
    spec: RolloutTrialSpec,
    store: ObjectStore,
    *,
    try_number: int | None = None,
    evaluator_key: str | None = None,
) -> ShardReport:
    return await run_shard(
        spec,
        ShimEnvironment(container.control_dir, kill_grace_sec=KILL_GRACE_SEC),
        store,
        agent_env=AgentEnv(),
        options=options_for(container, tmp_path / "work"),
        try_number=try_number,
        evaluator_key=evaluator_key,
    )


def subdir(tmp_path: Path, name: str) -> Path:
    """A new directory in `tmp_path`, for one of several runs of a test."""
    path = tmp_path / name
    path.mkdir()
    return path


async def run_fresh(
    tmp_path: Path, spec: RolloutTrialSpec, store: ObjectStore, **kwargs: Any
) -> tuple[ShardReport, list[str]]:
    """Run the shard in a fresh fake container: its report and the words its agent answered."""
    with fake_container(new_container_dir(tmp_path)) as container:
        report = await run_in(container, tmp_path, spec, store, **kwargs)
        return report, answered(container)


# --- a shard scored by a metric -------------------------------------------------------------


async def test_each_row_is_answered_scored_and_recorded_in_its_own_directory(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS))
    assert verifier["metric"] == "exact_match"  # the default of a dataset that declares none
    ids = [r["id"] for r in ROWS]
    spec = shard_spec(store, content_hash, verifier, ids, install="echo installed once")
    report, words = await run_fresh(tmp_path, spec, store)

    assert words == ["Paris", "Lyon", "42", "7", "Rome"]  # one row after another, each once
    rewards = {i: r.reward for (i, _), r in report.results.items()}
    assert rewards == {"right": 1.0, "wrong": 0.0, "in-file": 1.0, "failing": None, "forger": 0.0}

    right = row_files(store, "right")
    assert set(right) >= {
        "result.json",
        "row.json",
        "command/stdout.txt",
        "command/stderr.txt",
        "logs/verifier/stdout.txt",
        "logs/verifier/reward.txt",
    }
    assert "error.txt" not in right
    assert right["command/stdout.txt"] == b"  Paris  \n"
    assert right["logs/verifier/reward.txt"] == b"1\n"
    verifier_log = right["logs/verifier/stdout.txt"].decode()
    assert "exact_match" in verifier_log
    assert '"Paris"' in verifier_log
    result = row_result(right)
    assert result.task_name == "right"
    assert result.dataset_name == DATASET
    assert result.agent_name == ANSWERER
    assert result.error is None
    assert result.durations.agent_execution_sec is not None
    assert result.durations.verifier_sec is not None
    line = json.loads(right["row.json"])
    assert list(line) == [
        "task_id",
        "question",
        "predicted_answer",
        "success",
        "ground_truth",
        "score",
        "error",
        "trajectory",
        "rollout",
    ]
    assert line["task_id"] == "right"
    assert line["question"] == "Reply with Paris"
    assert line["predicted_answer"] == "Paris"  # stdout, stripped
    assert line["success"] is True
    assert line["ground_truth"] == "Paris"
    assert line["score"] == 1.0
    assert line["error"] is None
    assert line["trajectory"]["final_answer"] == "Paris"
    assert line["trajectory"]["messages"][0] == {"role": "user", "content": "Reply with Paris"}
    assert result.rollout is not None
    assert line["rollout"] == {
        "agent_name": ANSWERER,
        "dataset_name": DATASET,
        "attempt": 1,
        "error_type": None,
        "verifier": "exact_match",
        "trace_id": result.rollout.trace_id,
    }
    # The script agent got the row's own trace context as TRACEPARENT (W3C).
    traceparent = right["logs/agent/traceparent.txt"].decode().strip()
    assert traceparent == f"00-{result.rollout.trace_id}-" + traceparent[36:52] + "-01"
    assert parse_traceparent(traceparent) is not None
    # The install ran once, for the shard; its output is the first row's.
    assert right["setup/stdout.txt"] == b"installed once\n"
    assert result.durations.agent_setup_sec is not None

    wrong = row_files(store, "wrong")
    assert wrong["logs/verifier/reward.txt"] == b"0\n"
    assert json.loads(wrong["row.json"])["predicted_answer"] == "Lyon"
    assert json.loads(wrong["row.json"])["score"] == 0.0
    assert row_result(wrong).reward == 0.0
    assert row_result(wrong).error is None
    assert "setup/stdout.txt" not in wrong

    # answer.txt is the answer, over what the agent printed.
    in_file = json.loads(row_files(store, "in-file")["row.json"])
    assert in_file["predicted_answer"] == "42"
    assert in_file["score"] == 1.0

    # An agent that exits non-zero: no answer, no verifier.
    failing = row_files(store, "failing")
    result = row_result(failing)
    assert result.error is not None
    assert result.error.type is ErrorType.AGENT_EXECUTION_FAILED
    assert result.reward is None
    assert result.durations.verifier_sec is None
    assert "logs/verifier/reward.txt" not in failing
    assert failing["error.txt"].startswith(b"agent_execution_failed: ")
    assert b"cannot answer 7" in failing["command/stderr.txt"]
    line = json.loads(failing["row.json"])
    assert line["success"] is False
    assert line["score"] is None
    assert line["predicted_answer"] is None
    assert line["rollout"]["error_type"] == "agent_execution_failed"
    assert "exited with code 3" in line["error"]

    # The verifier's files are the runner's, whatever the agent wrote in /logs/verifier.
    forger = row_files(store, "forger")
    assert row_result(forger).reward == 0.0
    assert forger["logs/verifier/reward.txt"] == b"0\n"
    assert json.loads(forger["row.json"])["predicted_answer"] == "Rome"  # not in-file's answer.txt

    message = json.loads(report.termination_message())
    assert message["rows"] == {"total": 5, "recorded": 5, "kept": 0, "scored": 4, "failed": 1}


async def test_the_oracle_answers_each_rows_ground_truth(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    rows = [
        {"id": "text", "question": "Capital of France?", "answer": "Paris"},
        {"id": "several", "question": "A primary colour?", "answer": ["red", "blue"]},
        {"id": "number", "question": "6 * 7?", "answer": 42},
    ]
    dataset = write_dataset(tmp_path / "dataset", rows, toml='[verifier]\nmetric = "exact_match"\n')
    content_hash, verifier = publish_rows(store, dataset)
    spec = shard_spec(store, content_hash, verifier, [r["id"] for r in rows], agent="oracle")
    report, words = await run_fresh(tmp_path, spec, store)

    assert words == []  # nothing of the agent ran
    for row_id, answer in (("text", "Paris"), ("several", "red"), ("number", "42")):
        files = row_files(store, row_id, "oracle")
        result = row_result(files)
        assert result.error is None, files.get("error.txt")
        assert result.reward == 1.0
        line = json.loads(files["row.json"])
        assert line["predicted_answer"] == answer
        assert line["success"] is True
        assert files["logs/verifier/reward.txt"] == b"1\n"
    assert json.loads(report.termination_message())["rows"]["scored"] == 3


async def test_a_row_whose_ground_truth_a_metric_cannot_compare_is_task_invalid(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    rows = [
        {"id": "none", "question": "Reply with Paris"},
        {"id": "object", "question": "Reply with Paris", "answer": {"city": "Paris"}},
        {"id": "empty", "question": "Reply with Paris", "answer": []},
        {"id": "fine", "question": "Reply with Paris", "answer": "Paris"},
    ]
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", rows))
    report, words = await run_fresh(
        tmp_path, shard_spec(store, content_hash, verifier, [r["id"] for r in rows]), store
    )

    assert words == ["Paris"] * 4
    for row_id in ("none", "object", "empty"):
        files = row_files(store, row_id)
        result = row_result(files)
        assert result.error is not None, row_id
        assert result.error.type is ErrorType.TASK_INVALID, result.error
        assert "ground truth" in result.error.message
        assert json.loads(files["row.json"])["predicted_answer"] == "Paris"
    assert row_result(row_files(store, "fine")).reward == 1.0
    assert json.loads(report.termination_message())["rows"]["failed"] == 3


async def test_rows_missing_from_the_archive_or_an_archive_missing_are_task_not_found(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS[:2]))
    spec = shard_spec(store, content_hash, verifier, ["right", "ghost", "wrong"])
    _, words = await run_fresh(subdir(tmp_path, "ghost"), spec, store)
    assert words == ["Paris", "Lyon"]
    ghost = row_result(row_files(store, "ghost"))
    assert ghost.error is not None
    assert ghost.error.type is ErrorType.TASK_NOT_FOUND
    assert "'ghost'" in ghost.error.message
    assert row_result(row_files(store, "wrong")).reward == 0.0

    store.delete(task_archive_key(store.prefix, content_hash))
    spec = shard_spec(store, content_hash, verifier, ["in-file", "failing"])
    report, words = await run_fresh(subdir(tmp_path, "gone"), spec, store)
    assert words == []
    for row_id in ("in-file", "failing"):
        result = row_result(row_files(store, row_id))
        assert result.error is not None
        assert result.error.type is ErrorType.TASK_NOT_FOUND
        assert "was the dataset published" in result.error.message
    assert json.loads(report.termination_message())["rows"]["failed"] == 2


# --- a Python verifier ------------------------------------------------------------------------


async def test_a_python_verifier_scores_rows_and_its_failure_is_the_rows(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    rows = [
        {"id": "right", "question": "Reply with Paris", "answer": "Paris"},
        {"id": "boom", "question": "Reply with Paris", "answer": "Paris"},
        {"id": "wrong", "question": "Reply with Lyon", "answer": "Paris"},
    ]
    dataset = write_dataset(tmp_path / "dataset", rows, evaluate=EVALUATE)
    content_hash, verifier = publish_rows(store, dataset)
    assert verifier["script"] == "tests/evaluate.py"
    report, _ = await run_fresh(
        tmp_path, shard_spec(store, content_hash, verifier, [r["id"] for r in rows]), store
    )

    right = row_files(store, "right")
    result = row_result(right)
    assert result.error is None, right.get("error.txt")
    assert result.reward == 0.5
    assert result.rollout.rewards == {"reward": 0.5, "is_correct": True}
    assert right["logs/verifier/reward.txt"] == b"0.5\n"
    assert json.loads(right["row.json"])["rollout"]["verifier"] == "python tests/evaluate.py"
    wrong = row_result(row_files(store, "wrong"))
    assert wrong.reward == 0.0
    assert wrong.error is None

    boom = row_files(store, "boom")
    result = row_result(boom)
    assert result.reward is None
    assert result.error is not None
    assert result.error.type is ErrorType.VERIFIER_FAILED
    log = boom["logs/verifier/stdout.txt"].decode()
    assert "Traceback" in log
    assert "RuntimeError: the verifier broke on purpose" in log
    assert "logs/verifier/reward.txt" not in boom
    line = json.loads(boom["row.json"])
    assert line["success"] is True  # the agent answered; the verifier failed
    assert line["score"] is None
    assert line["rollout"]["error_type"] == "verifier_failed"
    assert json.loads(report.termination_message())["rows"]["failed"] == 1


async def test_evaluator_settings_the_judge_refuses_fail_the_verifier_not_the_runner(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, _ = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS[:2]))
    evaluator = EvaluatorSettings(
        model_name="judge-model",
        base_url="http://127.0.0.1:9/v1",  # never called
        extra_params={"temperature": 1.5},  # the judge sets it from evaluator_temperature
    )
    verifier = {"kind": "metric", "metric": "llm_judgement", "source": "job.yaml"}
    spec = shard_spec(store, content_hash, verifier, ["right", "wrong"], evaluator=evaluator)
    await run_fresh(tmp_path, spec, store)

    for row_id in ("right", "wrong"):
        result = row_result(row_files(store, row_id))
        assert result.error is not None
        assert result.error.type is ErrorType.VERIFIER_FAILED, result.error
        assert "temperature" in result.error.message


# --- the shard's setup ------------------------------------------------------------------------


async def test_an_install_that_fails_is_every_rows_error(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS[:3]))
    ids = [r["id"] for r in ROWS[:3]]
    spec = shard_spec(
        store, content_hash, verifier, ids, install="echo 'no compiler here' >&2; exit 9"
    )
    report, words = await run_fresh(tmp_path, spec, store)

    assert words == []  # no row was answered
    for row_id in ids:
        files = row_files(store, row_id)
        result = row_result(files)
        assert result.error is not None
        assert result.error.type is ErrorType.AGENT_INSTALL_FAILED
        assert result.reward is None
        assert files["error.txt"].startswith(b"agent_install_failed: ")
        assert b"no compiler here" in files["setup/stderr.txt"]
        line = json.loads(files["row.json"])
        assert line["success"] is False
        assert line["rollout"]["error_type"] == "agent_install_failed"
    message = json.loads(report.termination_message())
    assert message["rows"] == {"total": 3, "recorded": 3, "kept": 0, "scored": 0, "failed": 3}


# --- a shard that runs again ------------------------------------------------------------------


async def test_a_shard_run_again_keeps_the_rows_recorded_and_runs_the_others(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS[:4]))
    ids = [r["id"] for r in ROWS[:4]]
    spec = shard_spec(store, content_hash, verifier, ids)
    _, words = await run_fresh(subdir(tmp_path, "first"), spec, store)
    assert words == ["Paris", "Lyon", "42", "7"]

    # The first try's Pod died: "in-file" never got its result.json, and "wrong" has a record
    # of an infrastructure failure. "right" was scored; "failing" failed by the agent's fault.
    store.delete(row_prefix(store, "in-file") + "result.json")
    lost = row_result(row_files(store, "wrong")).model_copy(
        update={"reward": None, "error": TrialError(type=ErrorType.INTERNAL_ERROR, message="lost")}
    )
    store.put_bytes(row_prefix(store, "wrong") + "result.json", lost.to_json().encode())
    kept = {i: row_files(store, i)["result.json"] for i in ("right", "failing")}

    second, words = await run_fresh(subdir(tmp_path, "second"), spec, store, try_number=2)

    assert words == ["Lyon", "42"]  # only the rows without a record worth keeping ran
    for row_id, data in kept.items():
        assert row_files(store, row_id)["result.json"] == data, row_id
    for row_id in ("wrong", "in-file"):
        result = row_result(row_files(store, row_id))
        assert result.error is None
        assert result.rollout.tries == 2
    assert second.kept == 2
    assert json.loads(second.termination_message())["rows"] == {
        "total": 4,
        "recorded": 4,
        "kept": 2,
        "scored": 3,
        "failed": 1,
    }


# --- a stop request -----------------------------------------------------------------------------


def runner_env(settings: S3Settings) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "ROLLOUT_STORAGE_BUCKET": settings.location.bucket,
        "ROLLOUT_STORAGE_ENDPOINT": settings.location.endpoint or "",
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": settings.credentials.access_key_id.get_secret_value(),
        "AWS_SECRET_ACCESS_KEY": settings.credentials.secret_access_key.get_secret_value(),
    }


def start_runner(
    tmp_path: Path, container: FakeContainer, spec: RolloutTrialSpec, settings: S3Settings
) -> subprocess.Popen[str]:
    """`rollout-runner` as a trial Pod's runner container runs it, for the shard `spec`."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    argv = [
        sys.executable, "-m", "rollout_runner.main",
        "--spec", str(spec_file),
        "--control-dir", str(container.control_dir),
        "--logs-dir", str(container.logs_dir),
        "--work-dir", str(tmp_path / "work"),
        "--termination-log", str(tmp_path / "termination-log"),
        "--ready-timeout-sec", "20",
    ]  # fmt: skip
    return subprocess.Popen(
        argv,
        env=runner_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


async def stop_when(runner: subprocess.Popen[str], started: Path) -> str:
    """SIGTERM to the runner once `started` exists; its log once it has ended (within 30 s)."""
    try:
        await eventually(started.exists, f"{started.name} to be there", within=30)
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=30)
    finally:
        if runner.poll() is None:
            runner.kill()
    return stderr


async def test_sigterm_records_the_running_row_and_leaves_the_later_ones(
    tmp_path: Path, s3_settings: S3Settings, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    rows = [
        {"id": "quick", "question": "Reply with Paris", "answer": "Paris"},
        {"id": "slow", "question": "Slow answer s2", "answer": "s2"},
        {"id": "later", "question": "Slow answer s3", "answer": "s3"},
    ]
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", rows))
    spec = shard_spec(store, content_hash, verifier, [r["id"] for r in rows])
    with fake_container(new_container_dir(tmp_path)) as container:
        runner = start_runner(tmp_path, container, spec, s3_settings)
        stderr = await stop_when(runner, container.root / "app" / "started-s2")
        assert container.wait_exit(20) == 0  # the runner still told the shim to exit
        words = answered(container)

    assert runner.returncode == 0, stderr
    assert words == ["Paris", "s2"]
    assert row_result(row_files(store, "quick")).reward == 1.0
    slow = row_files(store, "slow")
    result = row_result(slow)
    assert result.error is not None
    assert result.error.type is ErrorType.INTERNAL_ERROR
    assert "SIGTERM" in result.error.message
    assert json.loads(slow["row.json"])["rollout"]["error_type"] == "internal_error"
    assert row_files(store, "later") == {}  # for the next try
    message = json.loads((tmp_path / "termination-log").read_bytes())
    assert message["rows"] == {"total": 3, "recorded": 2, "kept": 0, "scored": 1, "failed": 1}


async def test_sigterm_during_the_install_leaves_every_row_for_the_next_try(
    tmp_path: Path, s3_settings: S3Settings, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS[:2]))
    install = "touch /app/installing; sleep 300"
    spec = shard_spec(
        store,
        content_hash,
        verifier,
        ["right", "wrong"],
        install=install,
        spec_fields={"install_sec": 600},  # the stop, not the install's timeout, ends it
    )
    with fake_container(new_container_dir(tmp_path)) as container:
        runner = start_runner(tmp_path, container, spec, s3_settings)
        stderr = await stop_when(runner, container.root / "app" / "installing")
        assert container.wait_exit(20) == 0
        words = answered(container)

    assert runner.returncode == 0, stderr
    assert words == []
    assert row_files(store, "right") == {}
    assert row_files(store, "wrong") == {}
    message = json.loads((tmp_path / "termination-log").read_bytes())
    assert message["rows"] == {"total": 2, "recorded": 0, "kept": 0, "scored": 0, "failed": 0}


class HeldUploads:
    """The bucket, where the upload of keys ending in `held` waits until the test lets it go."""

    def __init__(self, store: ObjectStore, held: str) -> None:
        self._store = store
        self._held = held
        self.reached = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def upload_file(self, local_path: Path | str, key: str) -> None:
        if key.endswith(self._held):
            self.reached.set()
            self.release.wait(30)
        self._store.upload_file(local_path, key)


def rows_cancelled() -> bool:
    """Whether every row the runner is running has been asked to stop."""
    rows = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "run_row"]
    return all(t.cancelling() for t in rows)


async def test_a_stop_while_a_row_is_being_recorded_lets_its_record_finish(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    store = fast_retry_store
    content_hash, verifier = publish_rows(store, write_dataset(tmp_path / "dataset", ROWS[:3]))
    ids = [r["id"] for r in ROWS[:3]]
    spec = shard_spec(store, content_hash, verifier, ids)
    held = HeldUploads(store, "/wrong__1/row.json")
    stop = asyncio.Event()
    with fake_container(new_container_dir(tmp_path)) as container:
        shard = asyncio.create_task(
            run_shard(
                spec,
                ShimEnvironment(container.control_dir, kill_grace_sec=KILL_GRACE_SEC),
                held,  # type: ignore[arg-type]
                agent_env=AgentEnv(),
                options=options_for(container, tmp_path / "work"),
                stop=stop,
            )
        )
        try:
            await eventually(held.reached.is_set, "the second row's record to be uploaded")
            stop.set()  # SIGTERM, while the row's files go to the bucket
            await eventually(rows_cancelled, "the running row to be asked to stop")
        finally:
            held.release.set()
        report = await asyncio.wait_for(shard, 30)
        words = answered(container)

    assert words == ["Paris", "Lyon"]
    wrong = row_files(store, "wrong")
    assert row_result(wrong).reward == 0.0  # recorded whole, as it was scored
    assert "row.json" in wrong
    assert row_files(store, "in-file") == {}
    assert json.loads(report.termination_message())["rows"]["recorded"] == 2
