"""`rollout benchmarks list | pull | run` for real: a registry.json whose tasks are in a git
repository made here (fetched with the real git over file:// URLs), local datasets copied into
the workspace, jobs run on this machine (`--local`, the host sandbox: the CLI as a process, as a
user runs it) and on the loopback Kubernetes API with S3 (the test plays the operator, as in
test_cli_run.py), and an endpoint agent answered by an HTTP server on loopback written here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from cli_kit import Cli, git, job_status, wait_for_job, wait_for_watch, write_results, write_task
from json_server import Reply, Request, json_server

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS, SECRETS
from loopback import HOST, free_port
from paths import REPO
from rollout.api.dataset import load_dataset_path
from rollout.api.errors import ErrorType
from rollout.api.layout import job_config_key
from rollout.api.taskdir import BrokenTask, Task
from rollout.cli.main import main
from rollout.local.host import host_sandbox_unavailable
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

NO_HOST_SANDBOX = host_sandbox_unavailable()
needs_host_sandbox = pytest.mark.skipif(NO_HOST_SANDBOX is not None, reason=NO_HOST_SANDBOX or "")

ARITH = REPO / "examples" / "benchmarks" / "arith"
SUMS = """\
question=$(grep 'What is' "$ROLLOUT_TASK_INSTRUCTION")
expression=$(echo "$question" | sed -e 's/What is //' -e 's/?//')
echo $(( expression )) > /logs/agent/answer.txt
"""
"""A command agent that answers arith's rows right (examples/data-job.yaml's scripted agent)."""
HEADER_SECRET = "Bearer tok-5d1e9a7c-never-written-anywhere"


# --- a user of the CLI: home, cache, config file, working directory ----------------------------


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


@dataclass
class User:
    """One user's machine: `rollout` in-process (quick commands) or as a process (runs)."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        (self.root / "home").mkdir(parents=True)
        config = self.root / "home" / "config.yaml"
        config.write_text("")
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.root / "home"),
            "ROLLOUT_CONFIG": str(config),
            "ROLLOUT_CACHE_DIR": str(self.cache),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            **self.env,
        }

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def datasets(self) -> Path:
        return self.cache / "benchmarks" / "datasets"

    def rollout(self, capsys: pytest.CaptureFixture[str], *argv: str) -> Outcome:
        capsys.readouterr()
        code = main(list(argv), self.env)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    def process(self, *argv: str, timeout: float = 90) -> Outcome:
        done = subprocess.run(
            [sys.executable, "-m", "rollout.cli.main", *argv],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.fixture
def user(tmp_path: Path) -> User:
    return User(tmp_path / "user")


def arith_copy(root: Path) -> Path:
    """examples/benchmarks/arith, copied where the test may change it."""
    return Path(shutil.copytree(ARITH, root / "arith"))


def table(stdout: str) -> list[list[str]]:
    """`benchmarks list`'s lines, as cells (columns are two spaces or more apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in stdout.splitlines()]


def files_under(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --- a registry.json with tasks in a git repository ---------------------------------------------


@dataclass
class Registry:
    """`mini` 1.0 (hello and sort in the repository, `gone` not there) and `other` 0.1."""

    root: Path

    def __post_init__(self) -> None:
        self.repo = self.root / "tasks-repo"
        self.repo.mkdir(parents=True)
        git("init", "--quiet", "--initial-branch=main", cwd=self.repo)
        write_task(self.repo / "tasks" / "hello", "Say hello.\n")
        write_task(self.repo / "tasks" / "sort", "Sort the list.\n")
        git("add", "-A", cwd=self.repo)
        git("commit", "--quiet", "-m", "tasks", cwd=self.repo)
        commit = git("rev-parse", "HEAD", cwd=self.repo)

        def task(name: str) -> dict[str, str]:
            url = self.repo.as_uri()
            return {"name": name, "git_url": url, "git_commit_id": commit, "path": f"tasks/{name}"}

        datasets = [
            {"name": "mini", "version": "1.0", "description": "Two tasks and a missing one.",
             "tasks": [task("hello"), task("sort"), task("gone")]},
            {"name": "other", "version": "0.1", "tasks": [task("hello")]},
        ]  # fmt: skip
        self.path = self.root / "registry.json"
        self.path.write_text(json.dumps(datasets))


@pytest.fixture
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "registry")


# --- list and pull ------------------------------------------------------------------------------


def test_pull_fetches_a_registry_dataset_once_and_list_shows_where_it_is(
    user: User, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    user.env["ROLLOUT_REGISTRY"] = str(registry.path)  # as the flag would
    listed = user.rollout(capsys, "benchmarks", "list")
    assert listed.code == 0, listed.stderr
    assert table(listed.stdout) == [
        ["NAME", "VERSION", "TASKS", "SOURCE"],
        ["mini", "1.0", "3 tasks", "registry"],
        ["other", "0.1", "1 task", "registry"],
    ]

    pulled = user.rollout(capsys, "benchmarks", "pull", "mini")
    assert pulled.code == 0, pulled.stderr
    where = user.datasets / "mini@1.0" / "dataset"
    assert pulled.stdout == f"pulled mini@1.0: 3 tasks into {where}\n"
    assert sorted(p.name for p in user.datasets.iterdir()) == ["mini@1.0"]  # nothing half-made
    dataset = load_dataset_path(where)
    assert dataset.name == "mini"
    assert dataset.config.description == "Two tasks and a missing one."
    hello, sort, gone = dataset.tasks
    assert isinstance(hello, Task)
    assert (hello.name, hello.instruction) == ("hello", "Say hello.\n")
    assert isinstance(sort, Task)
    assert isinstance(gone, BrokenTask)
    assert (gone.name, gone.error_type) == ("gone", ErrorType.TASK_NOT_FOUND)

    listed = user.rollout(capsys, "benchmarks", "list")
    assert table(listed.stdout)[1:] == [
        ["mini", "1.0", "3 tasks", "registry, pulled"],
        ["other", "0.1", "1 task", "registry"],
    ]

    # Pulled once: again is a no-op, which needs neither the registry nor the repository.
    shutil.rmtree(registry.repo)
    registry.path.unlink()
    before = files_under(user.datasets)
    for reference in ("mini@1.0", "mini"):
        again = user.rollout(capsys, "benchmarks", "pull", reference)
        assert again.code == 0, again.stderr
        assert again.stdout == f"mini@1.0 is already pulled (3 tasks, {where}): nothing to do\n"
    assert files_under(user.datasets) == before

    # The registry gone, the workspace is still listed, and why the registry is not.
    listed = user.rollout(capsys, "benchmarks", "list")
    assert listed.code == 0
    assert table(listed.stdout)[1:] == [["mini", "1.0", "3 tasks", "pulled"]]
    assert listed.stderr == (
        f"warning: registry {registry.path} skipped (registry file does not exist); listing the "
        f"workspace only ({user.cache / 'benchmarks'})\n"
    )


def test_list_offline_lists_the_workspace_and_says_why_the_registry_was_skipped(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    assert user.rollout(capsys, "benchmarks", "pull", str(arith_copy(user.root))).code == 0
    unreachable = f"http://{HOST}:{free_port()}/registry.json"  # nothing listens there
    for how in (["--registry", unreachable], []):
        user.env["ROLLOUT_REGISTRY"] = unreachable if not how else "/not/used.json"
        listed = user.rollout(capsys, "benchmarks", "list", *how)
        assert listed.code == 0, listed.stderr
        assert listed.stdout.splitlines() == [
            "NAME   VERSION  TASKS    SOURCE",
            "arith  local    20 rows  pulled",
        ]
        assert listed.stderr.startswith(
            f"warning: registry {unreachable} skipped (cannot download the registry: "
        )
        assert listed.stderr.endswith(
            f"); listing the workspace only ({user.cache / 'benchmarks'})\n"
        )


def test_the_config_file_names_the_registry_relative_to_itself(
    user: User, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Path(user.env["ROLLOUT_CONFIG"])
    shutil.copy(registry.path, config.parent / "team-registry.json")
    config.write_text("registry: ./team-registry.json\n")
    listed = user.rollout(capsys, "benchmarks", "list")
    assert listed.code == 0, listed.stderr
    assert [row[0] for row in table(listed.stdout)[1:]] == ["mini", "other"]
    # $ROLLOUT_REGISTRY wins over the file, --registry over both.
    user.env["ROLLOUT_REGISTRY"] = str(user.root / "missing.json")
    assert "missing.json skipped" in user.rollout(capsys, "benchmarks", "list").stderr
    flag = user.rollout(capsys, "benchmarks", "list", "--registry", str(registry.path))
    assert (flag.code, flag.stderr) == (0, "")


def test_pull_copies_local_datasets_under_their_names_once(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = user.root / "mine"
    write_task(sources / "mytasks" / "hello", "Say hello.\n")
    write_task(sources / "mytasks" / "count", "Count to three.\n")
    write_task(sources / "solo", "Alone.\n")
    rows = [
        {"id": f"q{n}", "question": f"What is {n} + {n}?", "answer": str(2 * n)} for n in (1, 2)
    ]
    qa = sources / "qa.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    arith = arith_copy(sources)

    expected = {
        sources / "mytasks": ("mytasks", "2 tasks"),
        qa: ("qa", "2 rows"),
        sources / "solo": ("solo", "1 task"),
        arith: ("arith", "20 rows"),
    }
    for source, (name, size) in expected.items():
        pulled = user.rollout(capsys, "benchmarks", "pull", str(source))
        assert pulled.code == 0, pulled.stderr
        where = user.datasets / f"{name}@local" / "dataset"
        assert pulled.stdout == f"pulled {name}@local: {size} into {where}\n"
        original, copy = load_dataset_path(source), load_dataset_path(where)
        assert copy.name == original.name == name
        assert [t.name for t in copy.tasks] == [t.name for t in original.tasks]
        assert (copy.rows is None) == (original.rows is None)
        again = user.rollout(capsys, "benchmarks", "pull", str(source))
        assert again.stdout == f"{name}@local is already pulled ({size}, {where}): nothing to do\n"
    # By name, a pulled dataset is there already: the registry is not asked.
    by_name = user.rollout(capsys, "benchmarks", "pull", "qa", "--registry", "/no/registry.json")
    assert (by_name.code, by_name.stdout.split(" (")[0]) == (0, "qa@local is already pulled")

    # Its source changed: not replaced unless asked.
    qa.write_text(qa.read_text() + json.dumps({"id": "q3", "question": "1?", "answer": "1"}) + "\n")
    changed = user.rollout(capsys, "benchmarks", "pull", str(qa))
    assert changed.code == 1
    assert f"{qa} differs from it: pass --force to replace it" in changed.stderr
    kept = load_dataset_path(user.datasets / "qa@local" / "dataset").rows
    assert kept is not None
    assert len(kept.rows) == 2
    forced = user.rollout(capsys, "benchmarks", "pull", str(qa), "--force")
    assert forced.stdout.startswith("pulled qa@local: 3 rows into ")

    listed = user.rollout(capsys, "benchmarks", "list", "--registry", str(user.root / "none"))
    assert table(listed.stdout)[1:] == [
        ["arith", "local", "20 rows", "pulled"],
        ["mytasks", "local", "2 tasks", "pulled"],
        ["qa", "local", "3 rows", "pulled"],
        ["solo", "local", "1 task", "pulled"],
    ]
    assert not [p for p in user.datasets.iterdir() if p.name.startswith(".")]


def test_a_pull_that_fails_half_way_leaves_nothing(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    dataset = user.root / "half"
    write_task(dataset / "a-first", "Copied first.\n")
    write_task(dataset / "b-second", "Cannot be copied.\n")
    os.mkfifo(dataset / "b-second" / "environment" / "pipe")  # no file to copy
    pulled = user.rollout(capsys, "benchmarks", "pull", str(dataset))
    assert pulled.code == 1
    assert "pipe" in pulled.stderr
    assert list(user.datasets.iterdir()) == []  # not even the hidden staging directory
    listed = user.rollout(capsys, "benchmarks", "list", "--registry", str(user.root / "none"))
    assert listed.stdout == ""
    assert "no benchmarks: the workspace" in listed.stderr


# --- run on this machine ----------------------------------------------------------------------


def summary_part(stdout: str, job: str) -> list[str]:
    """What `rollout run` prints when the job ends: the table per agent and the rows' summary
    line, the job's name made neutral (the summary file's path has a timestamp)."""
    lines = stdout.splitlines()
    start = lines.index(f"Job {job}")
    part = [line.replace(job, "JOB") for line in lines[start:]]
    return [line for line in part if not line.startswith("Summary: ")]


@needs_host_sandbox
def test_run_a_data_benchmark_with_a_command_agent_runs_max_tasks_rows_as_rollout_run_does(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    assert user.rollout(capsys, "benchmarks", "pull", str(arith_copy(user.root))).code == 0
    bench = user.process(
        "benchmarks", "run", "arith", "--agent-command", SUMS, "--max-tasks", "3",
        "--local", "--environment-type", "local", "--job-name", "bench",
    )  # fmt: skip
    assert bench.code == 0, bench.stderr
    job_dir = user.root / "jobs" / "bench"
    lines = [json.loads(line) for line in (job_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["score"]) for r in lines] == [
        ("arith-01", 1.0),
        ("arith-02", 1.0),
        ("arith-03", 1.0),
    ]
    assert sorted(p.parent.name for p in job_dir.glob("agent/arith/*/result.json")) == [
        "arith-01__1",
        "arith-02__1",
        "arith-03__1",
    ]
    # The job file stays in the workspace; config.json is it, as submitted.
    job_file = user.cache / "benchmarks" / "jobs" / "bench.yaml"
    job = yaml.safe_load(job_file.read_text())
    assert job == {
        "name": "bench",
        "environment": {"type": "local"},
        "max_tasks": 3,
        "agents": [{"name": "agent", "execute": SUMS}],
        "datasets": [{"path": str(user.datasets / "arith@local" / "dataset")}],
    }
    assert json.loads((job_dir / "config.json").read_text()) == job
    assert f"job file {job_file}" in bench.stderr

    # The same job written by hand and run with `rollout run`: the same summary.
    by_hand = {**job, "name": "by-hand", "datasets": [{"path": "./arith"}]}
    (user.root / "job.yaml").write_text(yaml.safe_dump(by_hand))
    run = user.process("run", "job.yaml", "--local")
    assert run.code == 0, run.stderr
    assert summary_part(bench.stdout, "bench") == summary_part(run.stdout, "by-hand")
    assert summary_part(bench.stdout, "bench")[-1] == (
        "Benchmark arith: 3 rows, 3 answered, 0 failed, average score 1.000 (numeric_match)"
    )
    assert (
        "bench Completed: 3/3 trials done, 0 running, 0 errors, pass rate 100.0%, mean reward 1.000"
        in bench.stdout.splitlines()
    )


@needs_host_sandbox
def test_run_pulls_a_registry_benchmark_first_and_runs_its_tasks(
    user: User, registry: Registry
) -> None:
    done = user.process(
        "benchmarks", "run", "mini@1.0", "--registry", str(registry.path),
        "--agent-command", "echo working", "--agent-name", "worker", "--local",
        "--environment-type", "local", "--job-name", "from-registry",
    )  # fmt: skip
    assert done.code == 0, done.stderr
    where = user.datasets / "mini@1.0" / "dataset"
    assert f"pulled mini@1.0: 3 tasks into {where}" in done.stderr
    assert "task_not_found: Task 'gone' was not found" in done.stderr  # listed before it starts
    job_dir = user.root / "jobs" / "from-registry"
    records = {
        task: json.loads((job_dir / "worker" / "mini" / f"{task}__1" / "result.json").read_text())
        for task in ("hello", "sort", "gone")
    }
    assert records["hello"]["reward"] == records["sort"]["reward"] == 1.0
    assert records["gone"]["error"]["type"] == "task_not_found"
    assert "Job from-registry" in done.stdout


def arith_agent(token: str) -> Callable[[Request], Reply]:
    """seed 003's agent service: answers arith's questions, wants its token."""

    def reply(request: Request) -> Reply:
        if request.headers.get("Authorization") != token:
            return Reply(401, {"detail": "unauthorized"})
        found = re.search(r"What is (\d+) ([+*]) (\d+)\?", request.body["task"]["instruction"])
        assert found is not None, request.body
        a, op, b = int(found[1]), found[2], int(found[3])
        return Reply(200, {"output": str(a + b if op == "+" else a * b)})

    return reply


@needs_host_sandbox
def test_an_endpoint_benchmark_forwards_headers_and_never_writes_their_values(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    assert user.rollout(capsys, "benchmarks", "pull", str(arith_copy(user.root))).code == 0
    with json_server(arith_agent(HEADER_SECRET)) as agent:
        url = f"{agent.url}/rollout/eval"
        done = user.process(
            "benchmarks", "run", "arith", "--agent-endpoint", url,
            "--header", f"Authorization: {HEADER_SECRET}", "--header", "X-Team: evals",
            "--max-tasks", "3", "--timeout-seconds", "10", "--local",
            "--environment-type", "local", "--job-name", "endpoint",
        )  # fmt: skip
    assert done.code == 0, done.stderr
    assert len(agent.seen) == 3
    for request in agent.seen:
        assert request.headers["Authorization"] == HEADER_SECRET
        assert request.headers["X-Team"] == "evals"
        assert set(request.body) == {"benchmark", "run", "attempt", "task", "trace"}
    job_dir = user.root / "jobs" / "endpoint"
    lines = [json.loads(line) for line in (job_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["score"]) for r in lines] == [
        ("arith-01", 1.0),
        ("arith-02", 1.0),
        ("arith-03", 1.0),
    ]
    job = yaml.safe_load((user.cache / "benchmarks" / "jobs" / "endpoint.yaml").read_text())
    assert job["agents"] == [
        {
            "name": "agent",
            "endpoint": url,
            "headers": {
                "Authorization": "${ROLLOUT_BENCHMARK_HEADER_1}",
                "X-Team": "${ROLLOUT_BENCHMARK_HEADER_2}",
            },
            "timeout_sec": 10.0,
        }
    ]
    token = HEADER_SECRET.split()[1]
    assert token not in done.stdout + done.stderr
    written = {**files_under(job_dir), **files_under(user.cache)}
    assert [name for name, data in written.items() if token.encode() in data] == []


# --- run on the cluster -------------------------------------------------------------------------


def cluster_args(cli: Cli, root: Path) -> list[str]:
    return [*cli.cluster_args(), *cli.storage_args(), "--jobs-dir", str(root / "jobs")]


async def test_run_on_the_cluster_submits_the_job_follows_it_and_prints_its_summary(
    kube: Kube,
    cli: Cli,
    store: ObjectStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pulled = await cli.run(capsys, "benchmarks", "pull", str(arith_copy(tmp_path)))
    assert pulled.code == 0, pulled.stderr
    args = ["benchmarks", "run", "arith", "--agent-command", SUMS, "--max-tasks", "3",
            "--job-name", "bench-cluster", *cluster_args(cli, tmp_path)]  # fmt: skip
    run = asyncio.create_task(cli.run(capsys, *args))

    body = await wait_for_job(kube, "bench-cluster")
    spec = body["spec"]
    assert spec["maxTasks"] == 3
    (agent,) = spec["agents"]
    assert (agent["name"], agent["execute"], agent.get("install")) == ("agent", SUMS, None)
    assert [d["name"] for d in spec["datasets"]] == ["arith"]
    config = json.loads(store.get_bytes(job_config_key("", "bench-cluster")))
    assert config["agents"] == [{"name": "agent", "execute": SUMS}]
    assert config["max_tasks"] == 3

    # The operator's part: three rows scored, the job done.
    await wait_for_watch(kube)
    rewards = {("agent", "arith", f"arith-0{n}"): 1.0 for n in (1, 2, 3)}
    await asyncio.to_thread(write_results, store, "bench-cluster", rewards, (), config=False)
    await kube.patch_status(ROLLOUT_JOBS, "bench-cluster", job_status("Completed", rewards))
    outcome = await run
    assert outcome.code == 0, outcome.stderr
    assert "bench-cluster Completed: 3/3 trials done" in outcome.stdout
    summary = outcome.stdout[outcome.stdout.index("Job bench-cluster") :]
    assert re.search(r"agent\s*│\s*3\s*│\s*3\s*│\s*0\s*│\s*100.0%\s*│\s*1.000", summary), summary
    assert (tmp_path / "jobs" / "bench-cluster" / "agent" / "arith" / "arith-02__1").is_dir()


async def test_an_endpoint_header_on_the_cluster_is_only_in_the_job_secret(
    kube: Kube,
    cli: Cli,
    store: ObjectStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (await cli.run(capsys, "benchmarks", "pull", str(arith_copy(tmp_path)))).code == 0
    outcome = await cli.run(
        capsys,
        "benchmarks", "run", "arith", "--agent-endpoint", "https://agent.example.com/rollout/eval",
        "--header", f"Authorization: {HEADER_SECRET}", "--max-tasks", "3",
        "--job-name", "bench-secret", "--detach", *cluster_args(cli, tmp_path),
    )  # fmt: skip
    assert outcome.code == 0, outcome.stderr
    token = HEADER_SECRET.split()[1]
    assert token not in outcome.stdout + outcome.stderr

    body = await wait_for_job(kube, "bench-secret")
    assert token not in json.dumps(body)
    (agent,) = body["spec"]["agents"]
    assert agent["endpoint"] == "https://agent.example.com/rollout/eval"
    config = store.get_bytes(job_config_key("", "bench-secret"))
    assert token.encode() not in config
    assert json.loads(config)["agents"][0]["headers"] == {
        "Authorization": "${ROLLOUT_BENCHMARK_HEADER_1}"
    }
    secrets = [s for s in await kube.list(SECRETS, kube.namespace)]
    values = [base64.b64decode(v).decode() for s in secrets for v in s["data"].values()]
    assert values == [HEADER_SECRET]
    assert not [k for k in store.list_keys("") if token.encode() in store.get_bytes(k)]


def test_a_run_that_is_refused_says_which_flags_and_leaves_no_job_file(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    assert user.rollout(capsys, "benchmarks", "pull", str(arith_copy(user.root))).code == 0
    (user.root / "jobs" / "taken").mkdir(parents=True)
    (user.root / "jobs" / "taken" / "result.json").write_text("{}")
    refused = user.rollout(
        capsys, "benchmarks", "run", "arith", "--agent-command", "echo 1", "--local",
        "--environment-type", "local", "--job-name", "taken", "--jobs-dir", str(user.root / "jobs"),
    )  # fmt: skip
    assert refused.code == 1
    assert "already holds results of a job named 'taken'" in refused.stderr
    assert "hint: the job was made from this command line: its name is --job-name" in refused.stderr
    assert list((user.cache / "benchmarks" / "jobs").iterdir()) == []


def test_header_mistakes_are_usage_errors_that_never_show_the_value(
    user: User, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (["--agent-endpoint", "http://a/", "--header", "X-A: 1",
          "--header", "Authorization=s3cr3t"],
         "--header #2 ('Authorization') is not written 'Name: value'"),
        (["--agent-endpoint", "http://a/", "--header", "s3cr3t"],
         "--header #1 is not written 'Name: value'"),
        (["--agent-endpoint", "http://a/", "--header", "X-A: s3cr3t", "--header", "x-a: s3cr3t"],
         "--header 'x-a' is given twice"),
        (["--agent-command", "echo", "--header", "X-A: s3cr3t"],
         "--header is for --agent-endpoint, not --agent-command"),
        (["--agent-command", "echo", "--job-name", "../elsewhere"],
         "--job-name '../elsewhere' contains a slash"),
    ]  # fmt: skip
    for flags, message in cases:
        with pytest.raises(SystemExit) as exited:
            main(["benchmarks", "run", "arith", *flags], user.env)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert message in err
        assert "s3cr3t" not in err
    assert not (user.cache / "benchmarks").exists()  # nothing made
