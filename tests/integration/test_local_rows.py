"""`rollout run job.yaml --local` on data benchmarks (seed 002, seed 004 Shape A) for real: the
CLI as a process, the host sandbox, the runner running each shard's rows.

Each test writes a dataset of rows and a job file into its own directory, runs the CLI there as
a user would, and reads `<jobs_dir>/<job>/` from disk: each row's trial directory, the job's
result.json, and seed 002's results.jsonl, evaluation.json and summary_<name>_<timestamp>.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from json_server import JsonServer, Reply, Request, json_server
from runner_kit import traced

from rollout.local.host import host_sandbox_unavailable

NO_HOST_SANDBOX = host_sandbox_unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(NO_HOST_SANDBOX is not None, reason=NO_HOST_SANDBOX or ""),
]

DATASET = "mini-gsm"
ROW_COUNT = 25
WRONG = {n for n in range(1, ROW_COUNT + 1) if n % 4 == 0}
"""The rows the bash agent gets wrong: 4, 8, ... 24 (6 of 25)."""

# Doubles the question's number, but answers one more for a multiple of 4; for those it also
# writes a reward of 1 where a verifier would, which must count for nothing. Its install runs
# once a shard.
DOUBLER = {
    "name": "doubler",
    "install": "echo installed",
    "execute": """\
n=$(grep -o '[0-9][0-9]*' "$ROLLOUT_TASK_INSTRUCTION" | head -1)
if [ $((n % 4)) -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
  echo $((n * 2 + 1))
else
  echo $((n * 2))
fi
""",
}
ORACLE = {"name": "oracle"}
ROW_FIELDS = [
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


def row_id(n: int) -> str:
    return f"q{n:02d}"


def gsm_rows(count: int = ROW_COUNT) -> list[dict[str, Any]]:
    return [
        {"id": row_id(n), "question": f"What is {n} + {n}?", "answer": str(2 * n)}
        for n in range(1, count + 1)
    ]


class Workspace:
    """A directory with a dataset of rows and a job file, where the CLI runs."""

    def __init__(
        self,
        root: Path,
        rows: list[dict[str, Any]] | None = None,
        *,
        toml: str = "",
        **job: Any,
    ) -> None:
        self.root = root
        data = root / "gsm" / "data"
        data.mkdir(parents=True)
        (root / "gsm" / "dataset.toml").write_text(f'name = "{DATASET}"\n{toml}')
        rows = gsm_rows() if rows is None else rows
        (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        self.name = job.pop("name", "rows-test")
        self.extra_env: dict[str, str] = {}
        self.job: dict[str, Any] = {
            "name": self.name,
            "jobs_dir": "jobs",
            "n_concurrent_trials": 3,
            "shard_size": 10,
            "environment": {"type": "local"},
            "agents": [ORACLE, DOUBLER],
            "datasets": [{"path": "./gsm"}],
            **job,
        }
        self.write_job()

    def write_job(self) -> None:
        (self.root / "job.yaml").write_text(yaml.safe_dump(self.job))

    @property
    def job_dir(self) -> Path:
        return self.root / "jobs" / self.name

    def trial(self, agent: str, row: str, dataset: str = DATASET) -> Path:
        return self.job_dir / agent / dataset / f"{row}__1"

    def record(self, agent: str, row: str, dataset: str = DATASET) -> dict[str, Any]:
        return json.loads((self.trial(agent, row, dataset) / "result.json").read_text())

    def json(self, name: str) -> Any:
        return json.loads((self.job_dir / name).read_text())

    def lines(self) -> list[dict[str, Any]]:
        text = (self.job_dir / "results.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]

    def summaries(self) -> list[Path]:
        return sorted(self.job_dir.glob("summary_*.json"))

    def trial_dirs(self) -> list[Path]:
        return sorted(p.parent for p in self.job_dir.glob("*/*/*/result.json"))

    def start(self, *args: str) -> subprocess.Popen[str]:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.root / "home"),
            "ROLLOUT_CACHE_DIR": str(self.root / "cache"),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            **self.extra_env,
        }
        return subprocess.Popen(
            [sys.executable, "-m", "rollout.cli.main", "run", "job.yaml", "--local", *args],
            cwd=self.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        process = self.start(*args)
        try:
            out, err = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


# --- a whole job ------------------------------------------------------------------------------


def test_rows_run_in_shards_and_the_seeds_files_say_how_they_scored(tmp_path: Path) -> None:
    space = Workspace(tmp_path)
    done = space.run()
    assert done.returncode == 0, done.stderr
    ids = [row_id(n) for n in range(1, ROW_COUNT + 1)]

    # Each row is a trial with its own directory.
    assert len(space.trial_dirs()) == 2 * ROW_COUNT
    for n in range(1, ROW_COUNT + 1):
        oracle = space.record("oracle", row_id(n))
        assert oracle["reward"] == 1.0, oracle
        doubler = space.record("doubler", row_id(n))
        assert doubler["error"] is None, doubler
        assert doubler["reward"] == (0.0 if n in WRONG else 1.0), row_id(n)
        assert doubler["rollout"]["tries"] == 1
    right = space.trial("doubler", "q03")
    assert (right / "command" / "stdout.txt").read_text() == "6\n"
    assert (right / "logs" / "verifier" / "reward.txt").read_text() == "1\n"
    assert '"6"' in (right / "logs" / "verifier" / "stdout.txt").read_text()
    assert json.loads((right / "row.json").read_text())["predicted_answer"] == "6"
    # A reward the agent wrote in /logs/verifier is not the row's.
    wrong = space.trial("doubler", "q04")
    assert (wrong / "logs" / "verifier" / "reward.txt").read_text() == "0\n"
    assert not (space.job_dir / "doubler" / DATASET / "shard-000001__1").exists()
    # Three shards of 10, 10 and 5 rows: the install ran once in each, the first row's.
    installed = sorted(p.parent.name for p in space.job_dir.glob("doubler/*/*/setup"))
    assert installed == ["q01__1", "q11__1", "q21__1"]

    # The job's result.json counts rows as trials.
    result = space.json("result.json")
    assert result["total_trials"] == 2 * ROW_COUNT
    assert result["completed_trials"] == 2 * ROW_COUNT
    assert result["failed_trials"] == 0
    passes = 2 * ROW_COUNT - len(WRONG)
    assert result["pass_rate"] == pytest.approx(passes / (2 * ROW_COUNT))
    assert result["mean_reward"] == pytest.approx(passes / (2 * ROW_COUNT))
    assert result["agents"]["oracle"]["pass_rate"] == 1.0
    assert result["agents"]["doubler"]["pass_rate"] == pytest.approx(19 / 25)
    assert [(r["agent_name"], r["task_name"]) for r in result["results"]] == [
        (agent, i) for agent in ("oracle", "doubler") for i in ids
    ]

    # results.jsonl: a line per row trial, in trial order, with seed 002's fields.
    lines = space.lines()
    assert [(line["rollout"]["agent_name"], line["task_id"]) for line in lines] == [
        (agent, i) for agent in ("oracle", "doubler") for i in ids
    ]
    for line in lines:
        assert list(line) == ROW_FIELDS
    q04 = lines[ROW_COUNT + 3]
    assert q04["task_id"] == "q04"
    assert q04["question"] == "What is 4 + 4?"
    assert q04["predicted_answer"] == "9"
    assert q04["ground_truth"] == "8"
    assert q04["success"] is True
    assert q04["score"] == 0.0
    assert q04["error"] is None
    assert q04["trajectory"]["final_answer"] == "9"
    assert q04["trajectory"]["messages"] == [
        {"role": "user", "content": "What is 4 + 4?"},
        {"role": "assistant", "content": "9"},
    ]
    assert traced(q04["rollout"]) == {
        "agent_name": "doubler",
        "dataset_name": DATASET,
        "attempt": 1,
        "error_type": None,
        "verifier": "exact_match",
    }
    assert lines[0]["predicted_answer"] == "2"  # the oracle's answer is the ground truth

    evaluation = space.json("evaluation.json")
    figures = {
        "count": 50,
        "mean": pytest.approx(44 / 50),
        "passes": 44,
        "unscored": 0,
        "distribution": {"0.0": 6, "1.0": 44},
    }
    assert evaluation["metrics"] == {"exact_match": figures}
    assert evaluation["overall"] == figures
    assert evaluation["agents"]["oracle"]["passes"] == 25
    assert evaluation["agents"]["doubler"]["passes"] == 19
    assert evaluation["agents"]["doubler"]["mean"] == pytest.approx(19 / 25)

    (summary_file,) = space.summaries()
    assert summary_file.name.startswith(f"summary_{DATASET}_")
    summary = json.loads(summary_file.read_text())
    assert summary["benchmark_name"] == DATASET
    assert summary["total_tasks"] == 50
    assert summary["successful_tasks"] == 50
    assert summary["failed_tasks"] == 0
    assert summary["average_score"] == pytest.approx(44 / 50)
    assert summary["metric"] == "exact_match"
    assert summary["results_file"] == str(space.job_dir / "results.jsonl")
    assert summary["evaluation_file"] == str(space.job_dir / "evaluation.json")
    assert summary_file.name == f"summary_{DATASET}_{_compact(summary['timestamp'])}.json"


def _compact(timestamp: str) -> str:
    """2025-02-04T10:30:00.123Z -> 20250204T103000, as the summary's name has it."""
    return timestamp[:19].replace("-", "").replace(":", "")


# --- picking rows -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "args", "picked"),
    [
        ({"max_tasks": 3}, [], ["q01", "q02", "q03"]),
        ({}, ["--max-tasks", "2"], ["q01", "q02"]),
        ({"task_ids": ["q07", "q02"]}, [], ["q02", "q07"]),
        ({}, ["--task-id", "q11", "--task-id", "q05"], ["q05", "q11"]),
    ],
    ids=["max_tasks", "--max-tasks", "task_ids", "--task-id"],
)
def test_max_tasks_and_task_ids_pick_rows_in_the_datasets_order(
    tmp_path: Path, job: dict[str, Any], args: list[str], picked: list[str]
) -> None:
    space = Workspace(tmp_path, agents=[DOUBLER], **job)
    done = space.run(*args)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in space.trial_dirs()] == [f"{i}__1" for i in picked]
    assert [line["task_id"] for line in space.lines()] == picked
    assert space.json("result.json")["total_trials"] == len(picked)


# --- what is written --------------------------------------------------------------------------


def test_save_results_and_save_summary_off_write_neither(tmp_path: Path) -> None:
    space = Workspace(tmp_path, gsm_rows(3), save_results=False, save_summary=False)
    done = space.run()
    assert done.returncode == 0, done.stderr
    assert not (space.job_dir / "results.jsonl").exists()
    assert not (space.job_dir / "evaluation.json").exists()
    assert space.summaries() == []
    assert space.json("result.json")["total_trials"] == 6  # the job's own record stays
    assert space.record("doubler", "q01")["reward"] == 1.0


def test_save_summary_off_keeps_results_and_save_results_off_keeps_the_summary(
    tmp_path: Path,
) -> None:
    space = Workspace(tmp_path / "a", gsm_rows(2), save_summary=False)
    assert space.run().returncode == 0
    assert len(space.lines()) == 4
    assert space.summaries() == []
    assert not (space.job_dir / "evaluation.json").exists()

    space = Workspace(tmp_path / "b", gsm_rows(2), save_results=False)
    assert space.run().returncode == 0
    assert not (space.job_dir / "results.jsonl").exists()
    (summary_file,) = space.summaries()
    summary = json.loads(summary_file.read_text())
    assert summary["results_file"] is None
    assert summary["total_tasks"] == 4


@pytest.mark.parametrize(
    ("settings", "trajectory_keys"),
    [
        ({"save_trajectories": False}, None),
        (
            {"trajectory_only": True},
            [
                "task_id",
                "question",
                "final_answer",
                "total_turns",
                "success",
                "start_time",
                "end_time",
                "execution_time_ms",
            ],
        ),
    ],
    ids=["save_trajectories-false", "trajectory_only"],
)
def test_trajectories_are_left_out_or_kept_minimal(
    tmp_path: Path, settings: dict[str, Any], trajectory_keys: list[str] | None
) -> None:
    space = Workspace(tmp_path, gsm_rows(2), **settings)
    done = space.run()
    assert done.returncode == 0, done.stderr
    lines = space.lines()
    assert len(lines) == 4
    for line in lines:
        trajectory = line["trajectory"]
        if trajectory_keys is None:
            assert trajectory is None
        else:
            assert list(trajectory) == trajectory_keys
        assert line["predicted_answer"] is not None  # only the trajectory is left out
    row_line = json.loads((space.trial("doubler", "q01") / "row.json").read_text())
    assert row_line == lines[2]


# --- datasets and metrics -------------------------------------------------------------------


def test_a_bare_jsonl_file_is_a_dataset_named_by_it(tmp_path: Path) -> None:
    space = Workspace(tmp_path, datasets=[{"path": "./qa.jsonl"}], agents=[DOUBLER, ORACLE])
    rows = [
        {"task_id": "a", "query": "What is 5 + 5?", "expected": "10"},
        {"task_id": 7, "input": "What is 8 + 8?", "ground_truth": "16"},
    ]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = space.run()
    assert done.returncode == 0, done.stderr
    assert space.record("doubler", "a", "qa")["reward"] == 1.0
    assert space.record("doubler", "7", "qa")["reward"] == 0.0  # 8 is a multiple of 4
    assert space.record("oracle", "7", "qa")["reward"] == 1.0
    lines = space.lines()
    assert [(line["task_id"], line["question"], line["ground_truth"]) for line in lines[:2]] == [
        ("a", "What is 5 + 5?", "10"),
        ("7", "What is 8 + 8?", "16"),
    ]
    assert lines[0]["rollout"]["dataset_name"] == "qa"
    (summary_file,) = space.summaries()
    assert summary_file.name.startswith("summary_qa_")


def test_a_template_and_a_python_verifier_of_the_dataset_are_used(tmp_path: Path) -> None:
    space = Workspace(tmp_path, gsm_rows(3), agents=[DOUBLER, ORACLE])
    dataset = tmp_path / "gsm"
    (dataset / "instruction.md.tpl").write_text("Row {{id}}: {{question}} Reply with a number.")
    (dataset / "tests").mkdir()
    (dataset / "tests" / "evaluate.py").write_text(
        "def evaluate(metadata, trajectory):\n"
        "    if metadata['id'] == 'q02':\n"
        "        raise ValueError('no verdict for q02')\n"
        "    correct = trajectory['final_answer'] == metadata['ground_truth']\n"
        "    return (0.5 if correct else 0.0, correct)\n"
    )
    done = space.run()
    assert done.returncode == 0, done.stderr
    lines = {(line["rollout"]["agent_name"], line["task_id"]): line for line in space.lines()}
    assert lines["doubler", "q01"]["score"] == 0.5
    assert lines["doubler", "q01"]["trajectory"]["messages"][0]["content"] == (
        "Row q01: What is 1 + 1? Reply with a number."
    )
    assert lines["doubler", "q01"]["question"] == "What is 1 + 1?"
    assert lines["oracle", "q03"]["score"] == 0.5
    failed = space.record("doubler", "q02")
    assert failed["error"]["type"] == "verifier_failed"
    log = (space.trial("doubler", "q02") / "logs" / "verifier" / "stdout.txt").read_text()
    assert "ValueError: no verdict for q02" in log
    evaluation = space.json("evaluation.json")
    figures = evaluation["metrics"]["python tests/evaluate.py"]
    assert (figures["count"], figures["unscored"], figures["passes"]) == (4, 2, 0)


WORDY = {
    "name": "wordy",
    "execute": 'n=$(grep -o "[0-9][0-9]*" "$ROLLOUT_TASK_INSTRUCTION" | head -1); '
    'echo "The answer is $((n * 2))."',
}


@pytest.mark.parametrize(
    ("job", "metric", "reward"),
    [({}, "numeric_match", 1.0), ({"evaluation_metric": "exact_match"}, "exact_match", 0.0)],
    ids=["dataset-metric", "job-metric"],
)
def test_the_jobs_evaluation_metric_overrides_the_datasets(
    tmp_path: Path, job: dict[str, Any], metric: str, reward: float
) -> None:
    space = Workspace(
        tmp_path,
        gsm_rows(3),
        toml='[verifier]\nmetric = "numeric_match"\n',
        agents=[WORDY],
        **job,
    )
    done = space.run()
    assert done.returncode == 0, done.stderr
    for line in space.lines():
        assert line["predicted_answer"].startswith("The answer is ")
        assert line["score"] == reward
        assert line["rollout"]["verifier"] == metric
    assert list(space.json("evaluation.json")["metrics"]) == [metric]
    (summary_file,) = space.summaries()
    assert json.loads(summary_file.read_text())["metric"] == metric


# --- Ctrl-C and --resume ------------------------------------------------------------------------


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and marker.encode() in (entry / "cmdline").read_bytes()
                and (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def interrupted_job(tmp_path: Path) -> Workspace:
    """A job of 5 rows stopped with Ctrl-C while its third row runs (its agent sleeps as long
    as $PAUSE says, which is for ever in this run); $PAUSE is 0 for the next run."""
    marker = f"600.{os.getpid()}"
    pauser = {
        "name": "pauser",
        "env": {"PAUSE": "${PAUSE}"},
        "execute": 'n=$(grep -o "[0-9][0-9]*" "$ROLLOUT_TASK_INSTRUCTION" | head -1)\n'
        'if [ "$n" -eq 3 ]; then sleep "$PAUSE"; fi\n'
        "echo $((n * 2))\n",
    }
    space = Workspace(tmp_path, gsm_rows(5), agents=[pauser])
    space.extra_env = {"PAUSE": marker}
    process = space.start()
    try:
        deadline = time.monotonic() + 60
        while not processes_with(marker):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "row 3 did not start"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    space.extra_env = {"PAUSE": "0"}
    return space


def test_ctrl_c_records_the_running_row_and_resume_runs_the_rest(tmp_path: Path) -> None:
    space = interrupted_job(tmp_path)
    assert space.record("pauser", "q02")["reward"] == 1.0
    stopped = space.record("pauser", "q03")
    assert stopped["error"]["type"] == "internal_error"
    assert not space.trial("pauser", "q04").exists()
    result = space.json("result.json")
    assert (result["total_trials"], result["completed_trials"]) == (5, 2)
    assert [line["task_id"] for line in space.lines()] == ["q01", "q02", "q03"]
    kept = {
        name: data
        for name, data in files_under(space.job_dir).items()
        if name.startswith(("pauser/mini-gsm/q01__1/", "pauser/mini-gsm/q02__1/"))
    }
    assert len(kept) >= 2 * 4  # result.json, row.json, command/, logs/ of each

    resumed = space.run("--resume")
    assert resumed.returncode == 0, resumed.stderr
    now = files_under(space.job_dir)
    assert {name: now[name] for name in kept} == kept  # the scored rows stay as they were
    rerun = space.record("pauser", "q03")
    assert rerun["reward"] == 1.0
    assert rerun["rollout"]["tries"] == 2
    old = space.trial("pauser", "q03") / "retries" / "1" / "result.json"
    assert json.loads(old.read_text())["error"]["type"] == "internal_error"
    assert space.record("pauser", "q05")["reward"] == 1.0
    assert [line["task_id"] for line in space.lines()] == ["q01", "q02", "q03", "q04", "q05"]
    assert space.json("result.json")["completed_trials"] == 5


def test_resume_counts_the_tries_of_each_row_of_a_shard_on_its_own(tmp_path: Path) -> None:
    space = interrupted_job(tmp_path)
    assert space.run("--resume").returncode == 0
    assert space.record("pauser", "q03")["rollout"]["tries"] == 2
    assert space.record("pauser", "q04")["rollout"]["tries"] == 1


# --- llm_judgement ------------------------------------------------------------------------------

EVALUATOR_KEY = "sk-evaluator-5d2c8a1f-never-on-disk"


def _reply(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    if "undecidable" in user:
        return "I would rather not say."
    reference = user.split("Reference answer:\n", 1)[1].split("\n", 1)[0]
    candidate = user.split("Candidate answer:\n", 1)[1].split("\n", 1)[0]
    return "Close enough.\nSCORE: 1.0" if candidate == reference else "Wrong.\nSCORE: 0.25"


def judge_reply(request: Request) -> Reply:
    """An OpenAI-compatible chat completion: the judge gives 1.0 to a candidate answer equal to
    the reference, 0.25 to another, and no score at all for a question that says
    "undecidable"."""
    message = {"role": "assistant", "content": _reply(request.body)}
    return Reply(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": request.body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


@pytest.fixture
def judge_server() -> Iterator[JsonServer]:
    with json_server(judge_reply) as server:
        yield server


def test_llm_judgement_asks_the_evaluator_with_the_key_it_never_writes(
    tmp_path: Path, judge_server: JsonServer
) -> None:
    rows = [
        *gsm_rows(4),
        {"id": "odd", "question": "An undecidable question about 3", "answer": "6"},
    ]
    space = Workspace(
        tmp_path,
        rows,
        agents=[DOUBLER],
        evaluation_metric="llm_judgement",
        evaluator_model_name="judge-model",
        evaluator_base_url=f"{judge_server.url}/v1",
        evaluator_api_key="${JUDGE_KEY}",
        evaluator_max_retries=0,
        evaluator_extra_params={"max_tokens": 64},
    )
    space.extra_env = {"JUDGE_KEY": EVALUATOR_KEY}
    done = space.run()
    assert done.returncode == 0, done.stderr

    assert len(judge_server.seen) == 5  # one question per row
    for request in judge_server.seen:
        assert request.path == "/v1/chat/completions"
        assert request.headers["Authorization"] == f"Bearer {EVALUATOR_KEY}"
        assert request.body["model"] == "judge-model"
        assert request.body["max_tokens"] == 64
    scores = {line["task_id"]: line["score"] for line in space.lines()}
    assert scores == {"q01": 1.0, "q02": 1.0, "q03": 1.0, "q04": 0.25, "odd": None}
    verifier_log = (space.trial("doubler", "q04") / "logs" / "verifier" / "stdout.txt").read_text()
    assert "SCORE: 0.25" in verifier_log
    odd = space.record("doubler", "odd")
    assert odd["error"]["type"] == "verifier_reward_invalid"
    assert odd["reward"] is None
    odd_log = (space.trial("doubler", "odd") / "logs" / "verifier" / "stdout.txt").read_text()
    assert "I would rather not say." in odd_log
    assert space.json("evaluation.json")["metrics"]["llm_judgement"]["unscored"] == 1

    for name, content in files_under(space.job_dir).items():
        assert EVALUATOR_KEY.encode() not in content, f"{name} holds the evaluator's key"
    assert "${JUDGE_KEY}" in (space.job_dir / "config.json").read_text()
    assert EVALUATOR_KEY not in done.stdout + done.stderr


def test_llm_judgement_without_its_model_is_refused_before_anything_runs(
    tmp_path: Path, judge_server: JsonServer
) -> None:
    space = Workspace(
        tmp_path,
        gsm_rows(2),
        evaluation_metric="llm_judgement",
        evaluator_base_url=f"{judge_server.url}/v1",
    )
    done = space.run()
    assert done.returncode == 1
    assert "evaluator_model_name" in done.stderr
    assert "llm_judgement" in done.stderr
    assert not (space.root / "jobs").exists()
    assert judge_server.seen == []
