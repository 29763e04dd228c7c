"""`python -m rollout_runner.build context|report` as a build Pod runs them: real processes, given
their settings as the Pod's variables, against the test suite's S3.

The builder is played by the test: it writes what the Pod's `build` container leaves in the
output directory (`build.log`, the digest, and last `exit`).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from s3_kit import S3Settings

from loopback import HOST, free_port
from rollout.api.wire import build as wire
from rollout.datasets.bundle import task_archive
from rollout.storage import ObjectStore, location_env

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "ab" * 32
PROCESS_TIMEOUT_SEC = 60
LOG = (
    b"STEP 1/2: FROM registry.test/base:1\n"
    b"STEP 2/2: RUN echo hi > /hi\n"
    b"not UTF-8: \xff\xfe, a carriage return\r\n"
    b"COMMIT registry.test/envs:1\n"
)


@pytest.fixture
def pod_env(tmp_path: Path, s3_settings: S3Settings) -> dict[str, str]:
    """The variables the build Pod gives the runner's containers, with the storage credentials in
    a directory, as the Pod mounts its Secret."""
    return storage_env(tmp_path, s3_settings)


def storage_env(tmp_path: Path, settings: S3Settings) -> dict[str, str]:
    credentials = tmp_path / "credentials"
    credentials.mkdir(exist_ok=True)
    (credentials / "AWS_ACCESS_KEY_ID").write_text(
        settings.credentials.access_key_id.get_secret_value()
    )
    (credentials / "AWS_SECRET_ACCESS_KEY").write_text(
        settings.credentials.secret_access_key.get_secret_value()
    )
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        **location_env(settings.location),
        "ROLLOUT_STORAGE_CREDENTIALS_DIR": str(credentials),
    }


def build_command(command: str, termination_log: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rollout_runner.build",
        command,
        "--termination-log",
        str(termination_log),
    ]


def run_build(
    command: str, env: dict[str, str], termination_log: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    termination_log.touch()
    return subprocess.run(
        [*build_command(command, termination_log), *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_SEC,
        check=False,
    )


# --- context ----------------------------------------------------------------------------------


def environment_dir(root: Path) -> Path:
    """An environment/ directory with an executable, a plain file, a subdirectory and a link."""
    root.mkdir()
    (root / "Dockerfile").write_text("FROM base\nCOPY . /app\n")
    (root / "setup.sh").write_text("#!/bin/sh\necho setup\n")
    (root / "setup.sh").chmod(0o755)
    (root / "files").mkdir()
    (root / "files" / "config.txt").write_text("key = value\n")
    (root / "config-link").symlink_to("files/config.txt")
    return root


def test_context_unpacks_the_archive_with_its_modes_and_links(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str]
) -> None:
    source = environment_dir(tmp_path / "environment")
    key = store.key("environments", "env-1.tar.gz")
    store.put_bytes(key, task_archive(source))
    context = tmp_path / "workspace" / "context"
    env = {
        **pod_env,
        wire.CONTEXT_KEY_ENV: key,
        wire.CONTEXT_DIR_ENV: str(context),
    }

    done = run_build("context", env, tmp_path / "termination-log")

    assert done.returncode == 0, done.stderr
    assert sorted(str(p.relative_to(context)) for p in context.rglob("*")) == [
        "Dockerfile",
        "config-link",
        "files",
        "files/config.txt",
        "setup.sh",
    ]
    assert (context / "Dockerfile").read_text() == "FROM base\nCOPY . /app\n"
    assert (context / "setup.sh").stat().st_mode & 0o777 == 0o755
    assert (context / "Dockerfile").stat().st_mode & 0o777 == 0o644
    assert (context / "config-link").is_symlink()
    assert os.readlink(context / "config-link") == "files/config.txt"
    assert (context / "config-link").read_text() == "key = value\n"


def test_context_that_is_not_in_storage_fails_and_says_why_in_its_termination_log(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str]
) -> None:
    key = store.key("environments", "missing.tar.gz")
    context = tmp_path / "workspace" / "context"
    env = {**pod_env, wire.CONTEXT_KEY_ENV: key, wire.CONTEXT_DIR_ENV: str(context)}
    termination_log = tmp_path / "termination-log"

    done = run_build("context", env, termination_log)

    assert done.returncode == 1
    message = termination_log.read_text()
    assert message.startswith(f"the build context {store.uri(key)} cannot be fetched: ")
    assert "no such object" in message
    assert "\n" not in message
    assert message in done.stderr
    assert not context.exists() or not any(context.iterdir())


def test_context_that_is_no_archive_fails_and_says_why(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str]
) -> None:
    key = store.key("environments", "broken.tar.gz")
    store.put_bytes(key, b"not a tar.gz")
    env = {
        **pod_env,
        wire.CONTEXT_KEY_ENV: key,
        wire.CONTEXT_DIR_ENV: str(tmp_path / "context"),
    }
    termination_log = tmp_path / "termination-log"

    done = run_build("context", env, termination_log)

    assert done.returncode == 1
    message = termination_log.read_text()
    assert message.startswith(f"the build context {store.uri(key)} cannot be unpacked: ")
    assert "not a valid tar.gz" in message


# --- report -----------------------------------------------------------------------------------


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The builder's output directory, as the `build` container makes it."""
    path = tmp_path / "workspace" / "out"
    path.mkdir(parents=True)
    return path


def report_env(pod_env: dict[str, str], out: Path, log_key: str, timeout: float) -> dict[str, str]:
    return {
        **pod_env,
        wire.OUT_DIR_ENV: str(out),
        wire.LOG_KEY_ENV: log_key,
        wire.TIMEOUT_ENV: f"{timeout:g}",
    }


def finish_build(out: Path, log: bytes, exit_status: str, digest: str | None = None) -> None:
    """What the builder's script leaves: the log, the digest, and last the exit file."""
    (out / wire.LOG_FILE).write_bytes(log)
    if digest is not None:
        (out / wire.DIGEST_FILE).write_text(digest + "\n")
    (out / "status").write_text(exit_status + "\n")
    (out / "status").rename(out / wire.EXIT_FILE)


def read_report(termination_log: Path) -> wire.BuildReport:
    data = termination_log.read_bytes()
    assert len(data) <= wire.MAX_BYTES
    report = wire.parse_report(data.decode())
    assert report is not None, data
    return report


def test_report_of_a_pushed_image_has_its_digest_and_the_whole_log_in_storage(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    log_key = store.key("jobs", "j", "builds", "h.log")
    finish_build(out, LOG, "0", DIGEST)
    termination_log = tmp_path / "termination-log"

    done = run_build("report", report_env(pod_env, out, log_key, 30), termination_log)

    assert done.returncode == 0, done.stderr
    report = read_report(termination_log)
    assert report.succeeded
    assert report.exit_code == 0
    assert report.digest == DIGEST
    assert not report.timed_out
    assert report.log_uri == store.uri(log_key)
    assert report.upload_error is None
    assert report.log_tail == wire.log_tail(LOG.decode(errors="replace"))
    assert report.build_sec is not None
    assert report.build_sec < 5
    assert store.get_bytes(log_key) == LOG


def test_report_of_a_buildkit_build_reads_the_digest_from_its_metadata_file(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    metadata = {"containerimage.digest": DIGEST, "image.name": "registry.test/envs:1"}
    (out / wire.METADATA_FILE).write_text(json.dumps(metadata))
    finish_build(out, LOG, "0")
    termination_log = tmp_path / "termination-log"

    run_build("report", report_env(pod_env, out, store.key("b.log"), 30), termination_log)

    report = read_report(termination_log)
    assert report.succeeded
    assert report.digest == DIGEST


def test_report_of_a_failed_build_has_its_exit_status_and_the_end_of_its_log(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    log = b"STEP 2/2: RUN make\nmake: *** No rule to make target 'all'.  Stop.\nError: exit 2\n"
    finish_build(out, log, "3")
    termination_log = tmp_path / "termination-log"
    log_key = store.key("failed.log")

    done = run_build("report", report_env(pod_env, out, log_key, 30), termination_log)

    assert done.returncode == 0, done.stderr
    report = read_report(termination_log)
    assert not report.succeeded
    assert report.exit_code == 3
    assert report.digest is None
    assert report.log_tail.endswith("No rule to make target 'all'.  Stop.\nError: exit 2")
    assert store.get_bytes(log_key) == log


def test_report_of_an_exit_file_without_a_status_is_a_failed_build_that_says_so(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    finish_build(out, LOG, "garbage", DIGEST)
    termination_log = tmp_path / "termination-log"

    run_build("report", report_env(pod_env, out, store.key("x.log"), 30), termination_log)

    report = read_report(termination_log)
    assert not report.succeeded
    assert report.exit_code not in (0, None)
    assert not report.timed_out
    assert report.log_tail.endswith("the builder's exit file holds 'garbage', not an exit status")


def test_report_waits_for_the_builder_to_finish(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    termination_log = tmp_path / "termination-log"
    termination_log.touch()
    log_key = store.key("waited.log")
    env = report_env(pod_env, out, log_key, 60)
    with report_process(env, termination_log) as process:
        wait_for_line(process, "waiting up to 60 s for the build")
        assert process.poll() is None
        finish_build(out, LOG, "0", DIGEST)
        assert process.wait(PROCESS_TIMEOUT_SEC) == 0

    report = read_report(termination_log)
    assert report.succeeded
    assert store.get_bytes(log_key) == LOG


def test_report_of_a_build_past_its_timeout_says_so_and_uploads_the_log_so_far(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    (out / wire.LOG_FILE).write_bytes(b"STEP 1/2: FROM base\nSTEP 2/2: RUN sleep 1000\n")
    termination_log = tmp_path / "termination-log"
    log_key = store.key("slow.log")

    started = time.monotonic()
    done = run_build("report", report_env(pod_env, out, log_key, 1), termination_log)
    elapsed = time.monotonic() - started

    assert done.returncode == 0, done.stderr
    report = read_report(termination_log)
    assert report.timed_out
    assert not report.succeeded
    assert report.exit_code is None
    assert report.build_sec is not None
    assert 1 <= report.build_sec < 3
    assert elapsed < 30
    assert report.log_tail == "STEP 1/2: FROM base\nSTEP 2/2: RUN sleep 1000"
    assert report.log_uri == store.uri(log_key)
    assert store.get_bytes(log_key) == b"STEP 1/2: FROM base\nSTEP 2/2: RUN sleep 1000\n"


def test_report_when_storage_is_unreachable_says_so_and_still_reports_the_build(
    tmp_path: Path, make_s3_settings: Callable[..., S3Settings], out: Path
) -> None:
    endpoint = f"http://{HOST}:{free_port()}"  # nothing listens there
    env = storage_env(tmp_path, make_s3_settings(endpoint_url=endpoint))
    finish_build(out, LOG, "0", DIGEST)
    termination_log = tmp_path / "termination-log"

    started = time.monotonic()
    done = run_build(
        "report",
        report_env(env, out, "jobs/j/builds/h.log", 30),
        termination_log,
        "--upload-timeout-sec",
        "4",
    )
    elapsed = time.monotonic() - started

    assert done.returncode == 0, done.stderr
    assert elapsed < 20
    report = read_report(termination_log)
    assert report.exit_code == 0
    assert report.digest == DIGEST
    assert report.log_uri is None
    assert report.upload_error is not None
    assert endpoint in report.upload_error
    assert "jobs/j/builds/h.log" in report.upload_error


def test_report_of_a_huge_log_fits_in_a_termination_message_with_the_log_s_end(
    tmp_path: Path, store: ObjectStore, pod_env: dict[str, str], out: Path
) -> None:
    lines = [f"line {n}: " + "x" * 400 for n in range(2000)]
    log = ("\n".join(lines) + "\nthe last line\n").encode()
    finish_build(out, log, "1")
    termination_log = tmp_path / "termination-log"
    log_key = store.key("huge.log")

    run_build("report", report_env(pod_env, out, log_key, 30), termination_log)

    assert len(termination_log.read_bytes()) <= wire.MAX_BYTES
    report = read_report(termination_log)
    assert report.exit_code == 1
    assert report.log_tail.endswith("x\nthe last line")
    assert report.log_uri == store.uri(log_key)
    assert store.get_bytes(log_key) == log


# --- processes --------------------------------------------------------------------------------


@contextmanager
def report_process(env: dict[str, str], termination_log: Path) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        build_command("report", termination_log),
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def wait_for_line(process: subprocess.Popen[bytes], text: str, within: float = 30) -> None:
    """Read the process's stderr until it holds `text`; fail after `within` seconds or at EOF."""
    assert process.stderr is not None
    fd = process.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + within
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(left, 0))
        chunk = os.read(fd, 65536) if readable else b""
        if not chunk:
            pytest.fail(f"the process did not log {text!r} within {within} s: {seen.decode()}")
        seen += chunk
