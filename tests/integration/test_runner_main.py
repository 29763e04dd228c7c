"""`rollout-runner` as the Pod runs it: a process reading its spec, env and storage settings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from runner_kit import (
    DATASET,
    JOB,
    fast_store,
    make_spec,
    new_container_dir,
    publish_task,
    trial_objects,
)
from s3_kit import S3Settings

from fakecontainer import fake_container, requires_fake_container
from rollout.api.errors import ErrorType
from rollout.api.results import TrialResult
from rollout.api.wire.spec import agent_env_var_name, pod_created_at_text
from rollout.api.wire.termination import MAX_BYTES
from rollout.storage import DirectoryStore

pytestmark = pytest.mark.integration

# Quotes and shell syntax included: the value must reach the agent intact and be scrubbed.
SECRET = "sk-test-4f1c9'\"$(id)`x`-0a7d2e8b5c3f"
LITERAL = "claude-test-model"

# The agent puts its key everywhere it can: its output, its logs, and (as its "reward") the
# verifier's reward file, from which the runner quotes it in an error message.
INSTALL = 'echo "install sees key=$MY_API_KEY"; echo "key=$MY_API_KEY" >&2'
EXECUTE = """\
echo "model=$MODEL key=$MY_API_KEY"
echo "key=$MY_API_KEY" >&2
printf '%s' "$MY_API_KEY" > /logs/agent/leak.txt
printf '%s' "${#MY_API_KEY}" > /logs/agent/key-length.txt
printf '%s' "$MY_API_KEY" > /app/answer.txt
"""


def runner_env(settings: S3Settings, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ["PATH"],
        "ROLLOUT_STORAGE_BUCKET": settings.location.bucket,
        "ROLLOUT_STORAGE_ENDPOINT": settings.location.endpoint or "",
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "AWS_ACCESS_KEY_ID": settings.credentials.access_key_id.get_secret_value(),
        "AWS_SECRET_ACCESS_KEY": settings.credentials.secret_access_key.get_secret_value(),
    }
    env.update(extra)
    return env


def rollout_runner(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rollout_runner.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@requires_fake_container()
def test_a_secret_agent_env_value_is_used_and_never_stored(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "reward-from-answer")
    spec = make_spec(
        store,
        "reward-from-answer",
        content_hash,
        agent="leaky",
        install=INSTALL,
        execute=EXECUTE,
        env=[
            {"name": "MY_API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "k"}}},
            {"name": "MODEL", "value": LITERAL},
        ],
        logLevel="debug",
    )
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    termination_log = tmp_path / "termination-log"
    with fake_container(new_container_dir(tmp_path)) as container:
        done = rollout_runner(
            "--spec",
            str(spec_file),
            "--control-dir",
            str(container.control_dir),
            "--logs-dir",
            str(container.logs_dir),
            "--work-dir",
            str(tmp_path / "work"),
            "--termination-log",
            str(termination_log),
            "--ready-timeout-sec",
            "20",
            env=runner_env(s3_settings, **{agent_env_var_name("MY_API_KEY"): SECRET}),
        )
        exit_code = container.wait_exit(20)  # the runner told the shim to exit

    assert done.returncode == 0, done.stderr
    assert exit_code == 0
    objects = trial_objects(store, spec)
    # The agent got the value intact, and the literal one too.
    assert objects["logs/agent/key-length.txt"] == str(len(SECRET)).encode()
    assert objects["command/stdout.txt"] == f"model={LITERAL} key=***\n".encode()
    assert objects["setup/stdout.txt"] == b"install sees key=***\n"
    assert objects["setup/stderr.txt"] == b"key=***\n"
    assert objects["logs/agent/leak.txt"] == b"***"
    # The verifier put the key in reward.txt; the runner's message about it is scrubbed too.
    result = json.loads(objects["result.json"])
    assert "tries" not in result["rollout"]  # no ROLLOUT_TRY: not known
    assert result["error"] == {
        "type": str(ErrorType.VERIFIER_REWARD_INVALID),
        "message": "/logs/verifier/reward.txt holds '***', not a number",
    }
    assert "***" in objects["error.txt"].decode()

    message = termination_log.read_bytes()
    assert len(message) <= MAX_BYTES
    assert json.loads(message)["error"]["type"] == "verifier_reward_invalid"
    for where, data in [
        *objects.items(),
        ("termination message", message),
        ("runner stderr", done.stderr.encode()),
        ("runner stdout", done.stdout.encode()),
    ]:
        assert SECRET.encode() not in data, f"the secret is in {where}"
    assert "verifier_reward_invalid" in done.stderr  # the runner did log, at debug level
    for credential in s3_settings.secrets():
        assert credential not in done.stderr


@requires_fake_container()
@pytest.mark.parametrize("agent", ["oracle", "scripted"])
def test_with_a_storage_directory_the_trial_reads_and_writes_only_there(
    tmp_path: Path, agent: str
) -> None:
    storage_dir = tmp_path / "storage"
    storage_dir.mkdir()
    store = DirectoryStore(storage_dir)
    content_hash = publish_task(store, "hello-offline")
    scripted = {
        "install": 'echo "installing"',
        # A name a directory refuses (a backslash) must not keep result.json from being stored.
        "execute": r"""echo "Hello, world!" > /app/hello.txt; printf x > '/logs/agent/a\b'""",
    }
    spec = make_spec(store, "hello-offline", content_hash, agent=agent, **scripted)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    termination_log = tmp_path / "termination-log"
    started = datetime.now(UTC)
    with fake_container(new_container_dir(tmp_path)) as container:
        # No bucket, endpoint or credentials: nothing but the directory.
        done = rollout_runner(
            "--spec",
            str(spec_file),
            "--control-dir",
            str(container.control_dir),
            "--logs-dir",
            str(container.logs_dir),
            "--work-dir",
            str(tmp_path / "work"),
            "--termination-log",
            str(termination_log),
            "--ready-timeout-sec",
            "20",
            env={"PATH": os.environ["PATH"], "ROLLOUT_STORAGE_DIR": str(storage_dir)},
        )
        assert container.wait_exit(20) == 0

    assert done.returncode == 0, done.stderr
    trial_dir = storage_dir / "jobs" / JOB / agent / DATASET / "hello-offline__1"
    files = {
        path.relative_to(trial_dir).as_posix() for path in trial_dir.rglob("*") if path.is_file()
    }
    outputs = {"command/stdout.txt", "command/stderr.txt"}
    if agent == "oracle":
        outputs |= {"logs/agent/oracle.log"}  # no install, so no setup/
    else:
        outputs |= {"setup/stdout.txt", "setup/stderr.txt"}
    logs = {"logs/verifier/reward.txt", "logs/verifier/stdout.txt", "logs/verifier/stderr.txt"}
    assert files == {"result.json", *outputs, *logs}
    result = TrialResult.model_validate_json((trial_dir / "result.json").read_bytes())
    assert result.reward == 1.0
    assert result.error is None
    assert (trial_dir / "logs/verifier/reward.txt").read_bytes() == b"1\n"
    # Nothing else was written in the directory, and no temporary file is left.
    every_file = {
        p.relative_to(storage_dir).as_posix() for p in storage_dir.rglob("*") if p.is_file()
    }
    archive = f"tasks/{content_hash}.tar.gz"
    trial = trial_dir.relative_to(storage_dir).as_posix()
    assert every_file == {archive, *(f"{trial}/{name}" for name in files)}
    message = json.loads(termination_log.read_bytes())
    assert message["reward"] == 1.0
    assert message["result_uri"] == (trial_dir / "result.json").as_uri()
    # When the runner did what, for its overhead (benchmarks/): in the order they happen.
    times = {key: datetime.fromisoformat(value) for key, value in message["runner"].items()}
    assert set(times) == {"started_at", "trial_started_at", "environment_ready_at", "ended_at"}
    assert started - timedelta(seconds=0.03) <= times["started_at"] <= times["trial_started_at"]
    assert times["trial_started_at"] <= times["ended_at"] <= datetime.now(UTC)
    assert started <= times["environment_ready_at"] <= times["ended_at"]


def test_a_storage_directory_that_is_not_one_is_refused_by_name(tmp_path: Path) -> None:
    termination_log = tmp_path / "termination-log"
    spec = make_spec(DirectoryStore(tmp_path), "hello-offline", "0" * 64)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(spec.model_dump_json(by_alias=True))
    done = rollout_runner(
        "--spec",
        str(spec_file),
        "--termination-log",
        str(termination_log),
        env={"PATH": os.environ["PATH"], "ROLLOUT_STORAGE_DIR": "relative/storage"},
    )
    assert done.returncode == 2
    message = json.loads(termination_log.read_text())["error"]["message"]
    assert "ROLLOUT_STORAGE_DIR" in message
    assert "'relative/storage' is not an absolute path" in message


def test_help_documents_the_spec_and_storage_settings() -> None:
    done = rollout_runner("--help", env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0
    for documented in (
        "--spec",
        "ROLLOUT_TRIAL_SPEC",
        "ROLLOUT_AGENT_ENV_<NAME>",
        "ROLLOUT_POD_CREATED_AT",
        "ROLLOUT_STORAGE_BUCKET",
        "ROLLOUT_STORAGE_ENDPOINT",
        "ROLLOUT_STORAGE_CREDENTIALS_DIR",
        "ROLLOUT_STORAGE_DIR",
        "/dev/termination-log",
        "preserveEnv",
    ):
        assert documented in done.stdout, documented


def test_a_missing_spec_exits_2_with_a_termination_message(tmp_path: Path) -> None:
    termination_log = tmp_path / "termination-log"
    done = rollout_runner(
        "--termination-log", str(termination_log), env={"PATH": os.environ["PATH"]}
    )
    assert done.returncode == 2
    document = json.loads(termination_log.read_text())
    assert document["error"]["type"] == "internal_error"
    assert "ROLLOUT_TRIAL_SPEC: is not set" in document["error"]["message"]
    assert document["reward"] is None


def test_a_missing_secret_value_is_named(tmp_path: Path, s3_settings: S3Settings) -> None:
    store = fast_store(s3_settings)
    spec = make_spec(
        store,
        "hello-offline",
        "0" * 64,
        agent="needs-key",
        execute="true",
        env=[{"name": "MY_API_KEY", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "k"}}}],
    )
    termination_log = tmp_path / "termination-log"
    done = rollout_runner(
        "--termination-log",
        str(termination_log),
        env=runner_env(s3_settings, ROLLOUT_TRIAL_SPEC=spec.model_dump_json(by_alias=True)),
    )
    assert done.returncode == 2
    message = json.loads(termination_log.read_text())["error"]["message"]
    assert "ROLLOUT_AGENT_ENV_MY_API_KEY: is not set" in message
    assert "key 'k' of Secret 'keys'" in message


@requires_fake_container()
def test_the_trials_timings_start_when_its_pod_was_created(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "hello-offline")
    spec = make_spec(store, "hello-offline", content_hash)
    # The Pod was created a few seconds before the runner started: scheduling, image pull and
    # container start happened then, and they are part of environment setup.
    created = datetime.now(UTC) - timedelta(seconds=5)
    termination_log = tmp_path / "termination-log"
    with fake_container(new_container_dir(tmp_path)) as container:
        done = rollout_runner(
            "--control-dir",
            str(container.control_dir),
            "--logs-dir",
            str(container.logs_dir),
            "--termination-log",
            str(termination_log),
            env=runner_env(
                s3_settings,
                ROLLOUT_TRIAL_SPEC=spec.model_dump_json(by_alias=True),
                ROLLOUT_POD_CREATED_AT=pod_created_at_text(created),
                ROLLOUT_TRY="2",  # its first Pod was lost
            ),
        )
        assert container.wait_exit(20) == 0

    assert done.returncode == 0, done.stderr
    result = TrialResult.from_json(trial_objects(store, spec)["result.json"])
    assert result.reward == 1.0, result.error
    assert result.rollout is not None
    assert result.rollout.tries == 2
    stamps, durations = result.timestamps, result.durations
    assert stamps.started_at == created
    assert stamps.environment_setup_started_at == created
    assert stamps.environment_setup_ended_at is not None
    assert stamps.ended_at is not None
    setup_sec = durations.environment_setup_sec
    assert setup_sec is not None
    assert setup_sec >= 5
    # Wall clock and monotonic clock agree to within a little on one machine.
    wall_setup = (stamps.environment_setup_ended_at - created).total_seconds()
    assert abs(setup_sec - wall_setup) < 1
    assert durations.total_sec is not None
    assert durations.total_sec >= setup_sec + (durations.agent_execution_sec or 0) + (
        durations.verifier_sec or 0
    )
    assert abs(durations.total_sec - (stamps.ended_at - created).total_seconds()) < 1
    # The termination message carries the same timings.
    message = json.loads(termination_log.read_text())
    document = result.model_dump(mode="json")
    assert message["timestamps"] == document["timestamps"]
    assert message["durations"] == document["durations"]
    assert message["timestamps"]["started_at"] == pod_created_at_text(created)


def test_a_pod_creation_time_that_is_not_a_time_exits_2_naming_it(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    store = fast_store(s3_settings)
    spec = make_spec(store, "hello-offline", "0" * 64)
    termination_log = tmp_path / "termination-log"
    done = rollout_runner(
        "--termination-log",
        str(termination_log),
        env=runner_env(
            s3_settings,
            ROLLOUT_TRIAL_SPEC=spec.model_dump_json(by_alias=True),
            ROLLOUT_POD_CREATED_AT="2025-01-15 10:30",
        ),
    )
    assert done.returncode == 2
    message = json.loads(termination_log.read_text())["error"]["message"]
    assert "ROLLOUT_POD_CREATED_AT: is '2025-01-15 10:30', not a time with its offset" in message


@requires_fake_container()
def test_sigterm_ends_the_running_phase_and_still_stores_the_trial(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "hello-offline")
    spec = make_spec(
        store,
        "hello-offline",
        content_hash,
        agent="sleeper",
        execute="touch /logs/agent/started; sleep 60",
        agent_sec=120,
    )
    termination_log = tmp_path / "termination-log"
    with fake_container(new_container_dir(tmp_path)) as container:
        runner = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rollout_runner.main",
                "--control-dir",
                str(container.control_dir),
                "--logs-dir",
                str(container.logs_dir),
                "--termination-log",
                str(termination_log),
            ],
            env=runner_env(s3_settings, ROLLOUT_TRIAL_SPEC=spec.model_dump_json(by_alias=True)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            started = container.logs_dir / "agent" / "started"
            deadline = time.monotonic() + 30
            while not started.exists():
                assert runner.poll() is None, runner.communicate()
                assert time.monotonic() < deadline, "the agent never started"
                time.sleep(0.05)  # polling for the agent's marker, with a deadline
            runner.send_signal(signal.SIGTERM)
            _, stderr = runner.communicate(timeout=60)
        finally:
            if runner.poll() is None:
                runner.kill()
        sleepers = [p for p in container.processes() if p.argv == ["sleep", "60"]]
        assert container.wait_exit(20) == 0

    assert runner.returncode == 0, stderr
    assert sleepers == []
    document = json.loads(termination_log.read_text())
    assert document["error"]["type"] == "internal_error"
    assert document["error"]["message"].startswith("The runner was stopped during agent_execution")
    objects = trial_objects(store, spec)
    result = json.loads(objects["result.json"])
    assert result["error"] == document["error"]
    assert result["timestamps"]["agent_execution_ended_at"] is not None
    assert result["timestamps"]["verifier_started_at"] is None
    assert "logs/agent/started" in objects
