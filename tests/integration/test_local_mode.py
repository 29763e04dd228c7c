"""`rollout run JOB.yaml --local` for real: the CLI as a process, the host sandbox, the runner.

Each test writes a dataset (copies of tests/data/tasks) and a job file into its own directory
and runs the CLI there as a user would, then reads `<jobs_dir>/<job>/` from disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml
from engine_kit import EngineUnderTest
from nobody_kit import (
    NOBODY,
    as_nobody,
    nobody_directory,
    nobody_env,
    nobody_python,
    unprivileged_unavailable_reason,
)

from paths import DATA
from rollout.api.images import environment_image_tag
from rollout.api.names import LABEL_JOB
from rollout.local.host import host_sandbox_unavailable

NO_HOST_SANDBOX = host_sandbox_unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(NO_HOST_SANDBOX is not None, reason=NO_HOST_SANDBOX or ""),
    pytest.mark.engine,  # its docker tests
]

SECRET = "sk-local-7f3a9c1e-never-on-disk"
SCRIPTED = {
    "name": "scripted",
    "install": "echo installing",
    "execute": "echo 'Hello, world!' > /app/hello.txt",
}


class Workspace:
    """A directory with a dataset and a job file, where the CLI runs."""

    def __init__(self, root: Path, tasks: Sequence[str], **job: Any) -> None:
        self.root = root
        (root / "tasks").mkdir()
        for task in tasks:
            shutil.copytree(DATA / "tasks" / task, root / "tasks" / task)
        self.name = job.pop("name", "local-test")
        self.extra_env: dict[str, str] = {}
        self.python = [sys.executable]
        """How the CLI's Python is started (as another user, say)."""
        self.job = {
            "name": self.name,
            "jobs_dir": "jobs",
            "n_concurrent_trials": 2,
            "environment": {"type": "local"},
            "metrics": [{"type": "mean"}],
            "agents": [{"name": "oracle"}],
            "datasets": [{"path": "./tasks"}],
            **job,
        }
        self.write_job()

    def write_job(self) -> None:
        (self.root / "job.yaml").write_text(yaml.safe_dump(self.job))

    @property
    def job_dir(self) -> Path:
        return self.root / "jobs" / self.name

    def trial(self, agent: str, task: str, attempt: int = 1) -> Path:
        return self.job_dir / agent / "tasks" / f"{task}__{attempt}"

    def record(self, agent: str, task: str, attempt: int = 1) -> dict[str, Any]:
        return json.loads((self.trial(agent, task, attempt) / "result.json").read_text())

    def job_result(self) -> dict[str, Any]:
        return json.loads((self.job_dir / "result.json").read_text())

    def environ(self) -> dict[str, str]:
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.root / "home"),
            "ROLLOUT_CACHE_DIR": str(self.root / "cache"),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            "MY_SECRET": SECRET,
            **self.extra_env,
        }

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.python, "-m", "rollout.cli.main", "run", "job.yaml", "--local", *args],
            cwd=self.root,
            env=self.environ(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        process = self.start(*args)
        out, err = process.communicate(timeout=timeout)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def processes_with(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_the_oracle_and_a_scripted_agent_score_and_the_seed_layout_is_on_disk(
    tmp_path: Path,
) -> None:
    space = Workspace(tmp_path, ["hello-offline"], agents=[{"name": "oracle"}, SCRIPTED])
    done = space.run()
    assert done.returncode == 0, done.stderr
    result = space.job_result()
    assert result["job_name"] == "local-test"
    assert result["total_trials"] == 2
    assert result["mean_reward"] == 1.0
    assert [m["value"] for m in result["rollout"]["metrics"]] == [1.0]
    assert json.loads((space.job_dir / "config.json").read_text())["name"] == "local-test"
    for agent in ("oracle", "scripted"):
        record = space.record(agent, "hello-offline")
        assert record["reward"] == 1.0, record
        assert record["error"] is None
        assert record["rollout"]["tries"] == 1
        assert record["timestamps"]["environment_setup_started_at"] is not None
    scripted = space.trial("scripted", "hello-offline")
    assert (scripted / "setup" / "stdout.txt").read_text().strip() == "installing"
    assert (scripted / "logs" / "verifier" / "reward.txt").read_text().strip() == "1"
    # Its store holds the task's archive, and no build context: local mode builds from the
    # task's own directory.
    store = space.root / "cache" / "local"
    assert list((store / "tasks").iterdir())
    assert not (store / "environments").exists()
    # The same summary as a cluster run, and where the results are.
    assert "scripted" in done.stdout
    assert f"results: {space.job_dir}" in done.stderr


def test_a_failing_verifier_and_a_task_without_a_solution_are_recorded_by_their_error(
    tmp_path: Path,
) -> None:
    space = Workspace(tmp_path, ["verifier-fails-after-reward", "hello-offline"])
    shutil.rmtree(space.root / "tasks" / "hello-offline" / "solution")
    done = space.run()
    assert done.returncode == 0, done.stderr
    failed = space.record("oracle", "verifier-fails-after-reward")
    assert failed["reward"] is None
    assert failed["error"]["type"] == "verifier_failed"
    unsolvable = space.record("oracle", "hello-offline")
    assert unsolvable["error"]["type"] == "task_invalid"
    error_txt = (space.trial("oracle", "hello-offline") / "error.txt").read_text()
    assert error_txt.startswith("task_invalid: ")
    assert "rollout run --local wrote this record" in error_txt
    assert "cannot run" in done.stderr  # said before the job started
    assert space.job_result()["failed_trials"] == 2


def test_secret_agent_env_reaches_the_agent_and_no_file(tmp_path: Path) -> None:
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    agent = {
        "name": "keyed",
        "env": {"API_KEY": "${MY_SECRET}"},
        # The script compares a digest: the secret itself must not be in the job file either.
        "execute": f'test "$(printf %s "$API_KEY" | sha256sum | cut -c1-64)" = "{digest}" && '
        'echo "key: $API_KEY" && echo "Hello, world!" > /app/hello.txt',
    }
    space = Workspace(tmp_path, ["hello-offline"], agents=[agent])
    done = space.run()
    assert done.returncode == 0, done.stderr
    assert space.record("keyed", "hello-offline")["reward"] == 1.0  # the agent had the key
    for name, content in files_under(space.job_dir).items():
        assert SECRET.encode() not in content, f"{name} holds the secret"
    assert "${MY_SECRET}" in (space.job_dir / "config.json").read_text()
    assert SECRET not in done.stdout + done.stderr


def test_an_existing_job_is_refused_and_resume_reruns_only_what_has_no_score(
    tmp_path: Path,
) -> None:
    space = Workspace(tmp_path, ["hello-offline", "verifier-fails-after-reward"], n_attempts=2)
    assert space.run().returncode == 0
    before = files_under(space.job_dir)

    again = space.run()
    assert again.returncode == 1
    assert "already holds results" in again.stderr
    assert "--resume" in again.stderr
    assert files_under(space.job_dir) == before  # nothing written

    # One trial failed for the infrastructure's reason, one has no record at all.
    lost = space.trial("oracle", "hello-offline", 1) / "result.json"
    record = json.loads(lost.read_text())
    record.update(reward=None, error={"type": "environment_start_failed", "message": "gone"})
    record["rollout"]["failure_class"] = "infrastructure"
    lost.write_text(json.dumps(record))
    shutil.rmtree(space.trial("oracle", "hello-offline", 2))
    kept = {
        name: content
        for name, content in files_under(space.job_dir).items()
        if "verifier-fails-after-reward" in name
    }

    resumed = space.run("--resume")
    assert resumed.returncode == 0, resumed.stderr
    rerun = space.record("oracle", "hello-offline", 1)
    assert rerun["reward"] == 1.0
    assert rerun["rollout"]["tries"] == 2
    old = space.trial("oracle", "hello-offline", 1) / "retries" / "1" / "result.json"
    assert json.loads(old.read_text())["error"]["type"] == "environment_start_failed"
    assert space.record("oracle", "hello-offline", 2)["rollout"]["tries"] == 1
    # The verifier_failed trials are the task's failures: kept as they were, byte for byte.
    now = files_under(space.job_dir)
    assert {name: now[name] for name in kept} == kept
    result = space.job_result()
    assert (result["total_trials"], result["completed_trials"], result["failed_trials"]) == (
        4,
        2,
        2,
    )

    # --retry-error names an error type to run again as well.
    again = space.run("--resume", "--retry-error", "verifier_failed")
    assert again.returncode == 0, again.stderr
    assert space.record("oracle", "verifier-fails-after-reward", 1)["rollout"]["tries"] == 2


def test_ctrl_c_stops_the_job_keeps_what_finished_and_leaves_no_process(tmp_path: Path) -> None:
    # The agent runs its script from a file: its sleep's argument is what marks its processes.
    marker = f"600.{os.getpid()}"
    sleeper = {"name": "sleeper", "execute": f"sleep {marker}"}
    space = Workspace(
        tmp_path, ["hello-offline"], agents=[{"name": "oracle"}, sleeper], n_concurrent_trials=2
    )
    process = space.start()
    try:
        deadline = time.monotonic() + 60
        oracle = space.trial("oracle", "hello-offline") / "result.json"
        while not (oracle.exists() and processes_with(marker)):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the trials did not get going"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "--resume" in err
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []
    # Nor any sandbox or runner: their command lines name the trial's directory.
    assert processes_with(f"rollout-{space.name}-") == []
    assert space.record("oracle", "hello-offline")["reward"] == 1.0
    stopped = space.record("sleeper", "hello-offline")
    assert stopped["error"]["type"] == "internal_error"  # the runner recorded its stop
    result = space.job_result()
    assert result["total_trials"] == 2
    assert result["completed_trials"] == 1


@pytest.mark.parametrize(
    ("env_type", "said"),
    [("kubernetes", "Pods need a cluster"), ("modal", "bridge")],
)
def test_a_type_local_mode_cannot_run_is_refused_before_anything_is_written(
    tmp_path: Path, env_type: str, said: str
) -> None:
    space = Workspace(tmp_path, ["hello-offline"], environment={"type": env_type})
    done = space.run()
    assert done.returncode == 1
    assert said in done.stderr
    assert "environment.type" in done.stderr
    assert not (space.root / "jobs").exists()


def test_type_docker_builds_the_tasks_image_once_and_leaves_no_container(
    tmp_path: Path, test_engine: EngineUnderTest
) -> None:
    space = Workspace(
        tmp_path,
        ["hello-offline"],
        agents=[{"name": "oracle"}, SCRIPTED],
        environment={"type": "docker"},
    )
    space.extra_env = {"DOCKER_HOST": test_engine.environ["DOCKER_HOST"]}
    environment = space.root / "tasks" / "hello-offline" / "environment"
    # New content (a tag no other run built), FROM the engine's small test image; RUN makes it
    # need a build (a Dockerfile of only FROM and WORKDIR would run its FROM image as it is).
    (environment / "Dockerfile").write_text(
        f"FROM {test_engine.image}\nWORKDIR /app\nRUN echo {os.getpid()}-{time.time_ns()}\n"
    )
    tag = environment_image_tag(environment)
    test_engine.built.append(tag)
    done = space.run()
    assert done.returncode == 0, done.stderr
    for agent in ("oracle", "scripted"):
        assert space.record(agent, "hello-offline")["reward"] == 1.0
    client = docker.DockerClient(base_url=test_engine.environ["DOCKER_HOST"])
    try:
        assert client.images.get(tag) is not None
        left = client.containers.list(all=True, filters={"label": f"{LABEL_JOB}={space.name}"})
        assert left == []
    finally:
        client.close()


@pytest.mark.skipif(
    unprivileged_unavailable_reason() is not None, reason=unprivileged_unavailable_reason() or ""
)
def test_without_root_a_job_runs_in_a_user_namespace_and_agent_users_are_refused() -> None:
    with nobody_directory() as root:
        space = Workspace(root, ["hello-offline"])
        for path in [root, *root.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
        python = nobody_python()
        assert python is not None
        space.python = [*as_nobody(), python]
        space.extra_env = {"PYTHONPATH": nobody_env()["PYTHONPATH"]}
        done = space.run()
        assert done.returncode == 0, done.stderr
        assert space.record("oracle", "hello-offline")["reward"] == 1.0
        assert space.trial("oracle", "hello-offline").stat().st_uid == NOBODY

        space.name = space.job["name"] = "isolated"
        space.job["isolate_agents"] = True
        space.write_job()
        refused = space.run()
        assert refused.returncode == 1
        assert "isolate_agents: needs an agent user" in refused.stderr
        assert "environment.type: docker" in refused.stderr
        assert not space.job_dir.exists()


def test_a_dockerfiles_workdir_and_env_apply_to_a_task_without_a_docker_image(
    tmp_path: Path,
) -> None:
    agent = {
        "name": "looker",
        "execute": 'echo "$GREETING $(pwd)" > /logs/agent/seen.txt; '
        "echo 'Hello, world!' > /app/hello.txt",
    }
    space = Workspace(tmp_path, ["hello-offline"], agents=[agent])
    dockerfile = space.root / "tasks" / "hello-offline" / "environment" / "Dockerfile"
    dockerfile.write_text("FROM debian:bookworm-slim\nWORKDIR /work\nENV GREETING=hello\n")
    done = space.run()
    assert done.returncode == 0, done.stderr
    seen = space.trial("looker", "hello-offline") / "logs" / "agent" / "seen.txt"
    assert seen.read_text().strip() == "hello /work"
