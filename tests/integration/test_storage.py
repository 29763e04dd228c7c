"""rollout.storage against real S3 endpoints on loopback: moto's server, and a faulty one."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from pydantic import SecretStr
from s3_kit import S3Settings

from loopback import free_port
from rollout.api.errors import InvalidInput
from rollout.storage import (
    ObjectNotFound,
    ObjectStore,
    RetryPolicy,
    StorageError,
    StorageLocation,
    join_key,
    location_env,
    storage_from_env,
)
from s3server import S3Server, new_bucket_name

pytestmark = pytest.mark.integration

MIB = 1024 * 1024
# Short backoffs so that tests of retrying take a fraction of a second per retry.
QUICK = RetryPolicy(
    max_attempts=4, max_seconds=10, initial_backoff_seconds=0.01, max_backoff_seconds=0.05
)


MakeSettings = Callable[..., S3Settings]


def raw_client(settings: S3Settings) -> Any:
    """A plain boto3 client, to check what is in the bucket independently of ObjectStore."""
    return boto3.client(
        "s3",
        endpoint_url=settings.location.endpoint,
        region_name=settings.location.signing_region,
        aws_access_key_id="any",
        aws_secret_access_key="any",
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)  # polling interval


# Single objects.


def test_put_get_exists_round_trip(s3_settings: S3Settings) -> None:
    store = s3_settings.store()
    key = store.key("jobs", "j1", "result.json")
    data = json.dumps({"reward": 1.0}).encode() + bytes(range(256))

    assert not store.exists(key)
    store.put_bytes(key, data, content_type="application/json")

    assert store.exists(key)
    assert store.get_bytes(key) == data
    head = raw_client(s3_settings).head_object(Bucket=s3_settings.location.bucket, Key=key)
    assert head["ContentType"] == "application/json"
    assert head["ContentLength"] == len(data)


def test_put_new_writes_only_where_no_object_is(s3_settings: S3Settings) -> None:
    store = s3_settings.store()
    key = store.key("jobs", "j1", "config.json")

    assert store.put_new(key, b'{"name": "first"}', "application/json")
    assert not store.put_new(key, b'{"name": "second"}', "application/json")
    assert store.get_bytes(key) == b'{"name": "first"}'
    head = raw_client(s3_settings).head_object(Bucket=s3_settings.location.bucket, Key=key)
    assert head["ContentType"] == "application/json"

    store.delete(key)
    assert not store.exists(key)
    store.delete(key)  # nothing there: nothing to do
    assert store.put_new(key, b"again")


class _RacedHandler(BaseHTTPRequestHandler):
    """An object that appears between put_new's look and its write: HEAD says 404, PUT 412."""

    protocol_version = "HTTP/1.1"
    server: _Raced

    def do_HEAD(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.conditions.append(self.headers.get("If-None-Match"))
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code>'
            b"<Message>At least one of the pre-conditions you specified did not hold</Message>"
            b"<Condition>If-None-Match</Condition></Error>"
        )
        self.send_response(412)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: Any) -> None:
        pass


class _Raced(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RacedHandler)
        self.conditions: list[str | None] = []


def test_put_new_loses_a_race_without_overwriting(make_s3_settings: MakeSettings) -> None:
    server = _Raced()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        store = make_s3_settings(endpoint, "bucket").store(retry=QUICK)
        assert not store.put_new("jobs/j1/config.json", b"{}")
    finally:
        server.shutdown()
        server.server_close()
    # The write was conditional: a store that knows If-None-Match never overwrites.
    assert server.conditions == ["*"]
    assert store.stats.attempts["put_new"] == 1


def test_keys_join_the_configured_prefix(make_s3_settings: MakeSettings) -> None:
    settings = make_s3_settings(prefix="/team-a/evals/")
    store = settings.store()
    store.ensure_bucket()

    key = store.key("jobs", "j1/claude", "result.json")
    assert key == "team-a/evals/jobs/j1/claude/result.json"
    assert (
        store.uri(key) == f"s3://{settings.location.bucket}/team-a/evals/jobs/j1/claude/result.json"
    )
    store.put_bytes(key, b"{}")
    assert store.list_keys("team-a/") == [key]
    for bad in ("..", "a/../b", "", "./x"):
        with pytest.raises(ValueError, match="key part"):
            join_key("jobs", bad)


def test_missing_object_fails_fast_without_retries(s3_settings: S3Settings) -> None:
    store = s3_settings.store(retry=QUICK)

    with pytest.raises(ObjectNotFound) as caught:
        store.get_bytes("no/such/key")
    assert caught.value.code == "NoSuchKey"
    assert caught.value.attempts == 1
    assert not caught.value.transient
    assert store.stats.attempts["get_bytes"] == 1
    assert store.stats.retries["get_bytes"] == 0

    with pytest.raises(ObjectNotFound):
        store.download_file("no/such/key", Path("/nonexistent-dir-never-created/x"))
    assert store.stats.attempts["download_file"] == 1
    assert store.stats.retries["download_file"] == 0


def test_missing_bucket_fails_fast_with_a_clear_error(
    s3_server: S3Server, make_s3_settings: MakeSettings
) -> None:
    settings = make_s3_settings()
    store = settings.store(retry=QUICK)

    with pytest.raises(StorageError) as caught:
        store.put_bytes("a/b.txt", b"x")
    err = caught.value
    assert not isinstance(err, ObjectNotFound)
    assert err.code == "NoSuchBucket"
    assert (err.attempts, err.transient, store.stats.attempts["put_bytes"]) == (1, False, 1)
    assert f"s3://{settings.location.bucket}/a/b.txt" in str(err)
    assert s3_server.endpoint_url in str(err)


def test_ensure_bucket_creates_once_and_is_idempotent(make_s3_settings: MakeSettings) -> None:
    made = make_s3_settings()
    settings = S3Settings(
        made.location.model_copy(update={"region": "eu-west-1"}), made.credentials
    )
    store = settings.store()
    store.ensure_bucket()
    store.ensure_bucket()

    client = raw_client(settings)
    names = [b["Name"] for b in client.list_buckets()["Buckets"]]
    assert names.count(settings.location.bucket) == 1
    location = client.get_bucket_location(Bucket=settings.location.bucket)["LocationConstraint"]
    assert location == "eu-west-1"


def test_multipart_upload_above_threshold_arrives_intact(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    source = tmp_path / "agent-trace.bin"
    data = os.urandom(6 * MIB + 123)
    source.write_bytes(data)

    store.upload_file(source, "big/agent-trace.bin")
    store.upload_file(tmp_path / "agent-trace.bin", "big/again.bin")

    etag = raw_client(s3_settings).head_object(
        Bucket=s3_settings.location.bucket, Key="big/again.bin"
    )
    # A multipart upload's ETag ends in -<number of parts>; a single PUT's does not.
    assert etag["ETag"].strip('"').endswith("-2")
    target = tmp_path / "out" / "trace.bin"
    store.download_file("big/agent-trace.bin", target)
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_small_upload_is_a_single_put(s3_settings: S3Settings, tmp_path: Path) -> None:
    store = s3_settings.store()
    (tmp_path / "reward.txt").write_text("1\n")
    store.upload_file(tmp_path / "reward.txt", "logs/verifier/reward.txt")

    head = raw_client(s3_settings).head_object(
        Bucket=s3_settings.location.bucket, Key="logs/verifier/reward.txt"
    )
    assert "-" not in head["ETag"].strip('"')
    assert head["ContentType"] == "text/plain"


# Trees.


def make_tree(root: Path) -> dict[str, bytes]:
    files = {
        "result.json": b'{"reward": 0.5}',
        "setup/stdout.txt": b"installed\n",
        "command/0/stdout.txt": os.urandom(70_000),
        "command/0/empty.txt": b"",
        "logs/verifier/reward.txt": b"0.5",
        "logs/agent/deep/er/still/trace.jsonl": b"\x00\xff" * 1000,
        "logs/agent/naïve name with spaces.txt": "ünïcode".encode(),
    }
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_upload_tree_and_download_prefix_byte_for_byte(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    files = make_tree(tmp_path / "trial")
    prefix = store.key("jobs", "j1", "oracle", "ds", "task__1")

    keys = store.upload_tree(tmp_path / "trial", prefix)
    # A sibling whose name starts the same must not be taken for part of the folder.
    store.put_bytes(prefix + "0/result.json", b"another trial")

    assert sorted(keys) == sorted(f"{prefix}/{relative}" for relative in files)
    written = store.download_prefix(prefix, tmp_path / "copy")
    assert read_tree(tmp_path / "copy") == files
    assert sorted(written) == sorted((tmp_path / "copy" / r).resolve() for r in files)
    # Several files at a time: the same tree.
    written = store.download_prefix(prefix, tmp_path / "parallel", workers=4)
    assert read_tree(tmp_path / "parallel") == files
    assert len(written) == len(files)


def test_download_prefix_of_nothing_makes_no_directory(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    assert store.download_prefix("jobs/none", tmp_path / "none", workers=4) == []
    assert not (tmp_path / "none").exists()


def test_upload_tree_skips_links_leaving_the_tree_and_special_files(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    secret = tmp_path / "runner-only" / "token"
    secret.parent.mkdir()
    secret.write_text("do not upload")
    logs = tmp_path / "logs"
    (logs / "agent").mkdir(parents=True)
    (logs / "agent" / "out.txt").write_text("hello")
    (logs / "agent" / "alias.txt").symlink_to(logs / "agent" / "out.txt")
    (logs / "agent" / "stolen").symlink_to(secret)
    (logs / "agent" / "stolen-dir").symlink_to(secret.parent, target_is_directory=True)
    os.mkfifo(logs / "agent" / "pipe")

    keys = store.upload_tree(logs, "trial/logs")

    assert sorted(keys) == ["trial/logs/agent/alias.txt", "trial/logs/agent/out.txt"]
    assert store.get_bytes("trial/logs/agent/alias.txt") == b"hello"
    assert store.list_keys("trial/") == sorted(keys)


def test_download_prefix_refuses_keys_that_escape_and_writes_nothing(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    store.put_bytes("task/a.txt", b"fine")
    store.put_bytes("task/../escape.txt", b"evil")
    store.put_bytes("task/x/../../../escape2.txt", b"evil")
    target = tmp_path / "deep" / "task"

    with pytest.raises(StorageError, match="outside"):
        store.download_prefix("task", target)
    assert list(tmp_path.rglob("*.txt")) == []


def test_download_prefix_refuses_to_follow_a_symlink_in_the_target(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    store = s3_settings.store()
    store.put_bytes("task/link/file.txt", b"evil")
    target = tmp_path / "task"
    target.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (target / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)

    with pytest.raises(StorageError, match="outside"):
        store.download_prefix("task", target)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_list_keys_pages_and_delete_prefix_keeps_siblings(s3_settings: S3Settings) -> None:
    store = s3_settings.store()
    doomed = [f"jobs/j1/t{i}/result.json" for i in range(5)]
    kept = ["jobs/j10/result.json", "jobs/j1.json", "other/x"]
    for key in doomed + kept:
        store.put_bytes(key, b"x")

    assert store.list_keys("jobs/j1/", page_size=2) == sorted(doomed)
    assert store.stats.attempts["list_keys"] == 3
    assert store.delete_prefix("jobs/j1") == 5
    assert store.list_keys("") == sorted(kept)
    with pytest.raises(ValueError, match="non-empty"):
        store.delete_prefix("/")


def test_list_modified_says_when_each_object_was_written(s3_settings: S3Settings) -> None:
    store = s3_settings.store()
    before = datetime.now(UTC).replace(microsecond=0)
    keys = [f"jobs/j1/t{i}/result.json" for i in range(3)]
    for key in keys:
        store.put_bytes(key, b"x")
    store.put_bytes("jobs/j10/result.json", b"x")
    after = datetime.now(UTC)

    written = store.list_modified("jobs/j1/", page_size=2)
    assert sorted(written) == keys
    assert store.stats.attempts["list_keys"] == 2
    for when in written.values():
        assert before - timedelta(seconds=1) <= when <= after + timedelta(seconds=1)


# Retries against a real endpoint that goes away.


@pytest.fixture
def own_s3_server(tmp_path: Path) -> Iterator[S3Server]:
    """A server of this test's own, free to be stopped and restarted."""
    server = S3Server(log_dir=tmp_path)
    try:
        yield server
    finally:
        server.stop()


def test_upload_rides_out_an_outage(
    own_s3_server: S3Server,
    make_s3_settings: MakeSettings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket = new_bucket_name()
    own_s3_server.start(buckets=[bucket])
    settings = make_s3_settings(own_s3_server.endpoint_url, bucket)
    patient = RetryPolicy(
        max_attempts=1000, max_seconds=60, initial_backoff_seconds=0.05, max_backoff_seconds=0.2
    )
    store = settings.store(retry=patient, multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    source = tmp_path / "trace.bin"
    data = os.urandom(6 * MIB)
    source.write_bytes(data)
    own_s3_server.stop()
    failures: list[BaseException] = []

    def upload() -> None:
        try:
            store.upload_file(source, "logs/trace.bin")
        except BaseException as exc:
            failures.append(exc)

    caplog.set_level(logging.WARNING, logger="rollout.storage")
    uploader = threading.Thread(target=upload)
    uploader.start()
    # The upload has started and is failing: the endpoint is down.
    wait_for(lambda: store.stats.retries["upload_file"] >= 3, 20, "retries while down")
    # moto forgot the bucket when it stopped; it comes back with the bucket already there.
    own_s3_server.start(buckets=[bucket])
    uploader.join(60)

    assert not uploader.is_alive()
    assert failures == []
    assert store.stats.retries["upload_file"] >= 3
    assert store.get_bytes("logs/trace.bin") == data
    warnings = [r for r in caplog.records if r.name == "rollout.storage"]
    assert len(warnings) == store.stats.retries["upload_file"]
    assert all(r.levelno == logging.WARNING for r in warnings)
    assert "upload_file" in warnings[0].getMessage()
    assert f"s3://{bucket}/logs/trace.bin" in warnings[0].getMessage()


def test_endpoint_down_for_good_gives_up_after_bounded_attempts(
    make_s3_settings: MakeSettings, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()  # nothing listens here
    settings = make_s3_settings(f"http://127.0.0.1:{port}")
    store = settings.store(retry=QUICK)
    caplog.set_level(logging.WARNING, logger="rollout.storage")

    with pytest.raises(StorageError) as caught:
        store.put_bytes("jobs/j1/result.json", b"{}")

    err = caught.value
    message = str(err)
    assert (err.attempts, err.transient, err.code) == (4, True, None)
    assert store.stats.attempts["put_bytes"] == 4
    assert store.stats.retries["put_bytes"] == 3
    assert store.stats.failures["put_bytes"] == 1
    assert "put_bytes" in message
    assert f"s3://{settings.location.bucket}/jobs/j1/result.json" in message
    assert f"http://127.0.0.1:{port}" in message
    assert "after 4 attempts" in message
    assert "EndpointConnectionError" in message
    assert len(settings.secrets()) == 2
    for secret in settings.secrets():
        assert secret not in message
        assert secret not in caplog.text
    assert len(caplog.records) == 3


def test_total_time_bounds_the_retries(make_s3_settings: MakeSettings) -> None:
    settings = make_s3_settings(f"http://127.0.0.1:{free_port()}")
    policy = RetryPolicy(
        max_attempts=100_000, max_seconds=0.5, initial_backoff_seconds=0.05, max_backoff_seconds=0.1
    )
    store = settings.store(retry=policy)

    with pytest.raises(StorageError) as caught:
        store.get_bytes("x")

    # Stopped by time, not by the attempt count: at most 0.5 s of backoffs of at least 0 s.
    assert 1 < caught.value.attempts < 100_000
    assert caught.value.transient


# Retries against an endpoint that answers with errors.


class FaultyS3(ThreadingHTTPServer):
    """An S3 lookalike that answers the first `failures` requests with one error."""

    def __init__(self, status: int, code: str, failures: int) -> None:
        super().__init__(("127.0.0.1", 0), _FaultyHandler)
        self.status, self.code, self.failures = status, code, failures
        self.requests = 0
        self.lock = threading.Lock()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _FaultyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultyS3

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with self.server.lock:
            self.server.requests += 1
            fail = self.server.requests <= self.server.failures
        if fail:
            body = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{self.server.code}</Code>'
                "<Message>injected by the test</Message></Error>"
            ).encode()
            self.send_response(self.server.status)
            self.send_header("Content-Type", "application/xml")
        else:
            body = b""
            self.send_response(200)
            self.send_header("ETag", '"0123456789abcdef0123456789abcdef"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PUT = do_GET = do_POST = do_DELETE = _answer

    def log_message(self, fmt: str, *args: Any) -> None:
        pass


@pytest.fixture
def faulty_s3(request: pytest.FixtureRequest) -> Iterator[FaultyS3]:
    status, code, failures = request.param
    server = FaultyS3(status, code, failures)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


RETRIED = [
    (503, "SlowDown"),
    (503, "ServiceUnavailable"),
    (500, "InternalError"),
    (502, "BadGateway"),
    (504, "GatewayTimeout"),
    (429, "TooManyRequests"),
    (400, "RequestTimeout"),
]
NOT_RETRIED = [
    (403, "AccessDenied"),
    (403, "SignatureDoesNotMatch"),
    (400, "InvalidArgument"),
    (404, "NoSuchBucket"),
    (409, "OperationAborted"),
]


@pytest.mark.parametrize(
    "faulty_s3", [(s, c, 10**6) for s, c in RETRIED], indirect=True, ids=lambda p: p[1]
)
def test_throttling_and_server_errors_are_retried(
    faulty_s3: FaultyS3, make_s3_settings: MakeSettings
) -> None:
    store = make_s3_settings(faulty_s3.endpoint_url, "bucket").store(retry=QUICK)

    with pytest.raises(StorageError) as caught:
        store.put_bytes("k", b"payload")

    assert caught.value.code == faulty_s3.code
    assert caught.value.transient
    assert faulty_s3.requests == 4
    assert store.stats.attempts["put_bytes"] == 4


@pytest.mark.parametrize(
    "faulty_s3", [(s, c, 10**6) for s, c in NOT_RETRIED], indirect=True, ids=lambda p: p[1]
)
def test_client_errors_are_not_retried(faulty_s3: FaultyS3, make_s3_settings: MakeSettings) -> None:
    store = make_s3_settings(faulty_s3.endpoint_url, "bucket").store(retry=QUICK)

    with pytest.raises(StorageError) as caught:
        store.put_bytes("k", b"payload")

    assert caught.value.code == faulty_s3.code
    assert not caught.value.transient
    assert faulty_s3.requests == 1
    assert store.stats.attempts["put_bytes"] == 1
    assert store.stats.retries["put_bytes"] == 0


@pytest.mark.parametrize("faulty_s3", [(503, "SlowDown", 2)], indirect=True)
def test_a_throttled_call_succeeds_once_the_endpoint_recovers(
    faulty_s3: FaultyS3, make_s3_settings: MakeSettings
) -> None:
    store = make_s3_settings(faulty_s3.endpoint_url, "bucket").store(retry=QUICK)

    store.put_bytes("k", b"payload")

    assert faulty_s3.requests == 3
    assert store.stats.retries["put_bytes"] == 2
    assert store.stats.failures["put_bytes"] == 0


# Settings and credentials.


def test_no_credentials_at_all_fails_fast(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Leave boto3's default chain nothing to find: no variables, no files, no metadata service.
    for name in list(os.environ):
        if name.startswith("AWS_") and name != "AWS_CA_BUNDLE":
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    location = StorageLocation(
        bucket=new_bucket_name(), endpoint=s3_server.endpoint_url, path_style=True
    )
    store = ObjectStore(location, retry=QUICK)

    with pytest.raises(StorageError, match="Unable to locate credentials") as caught:
        store.put_bytes("k", b"x")
    assert (caught.value.attempts, caught.value.transient) == (1, False)


def test_settings_from_env() -> None:
    location, credentials = storage_from_env(
        {
            "ROLLOUT_STORAGE_BUCKET": "results",
            "ROLLOUT_STORAGE_PREFIX": "/team-a/",
            "ROLLOUT_STORAGE_ENDPOINT": "http://minio.storage:9000/",
            "ROLLOUT_STORAGE_REGION": "",
            "AWS_REGION": "eu-central-1",
            "ROLLOUT_STORAGE_PATH_STYLE": "True",
            "AWS_ACCESS_KEY_ID": "AKIAFROMENV",
            "AWS_SECRET_ACCESS_KEY": "secret-from-env",
        }
    )

    assert location.bucket == "results"
    assert location.prefix == "team-a"
    assert location.endpoint == "http://minio.storage:9000"
    assert location.region == "eu-central-1"
    assert location.path_style is True
    assert credentials is not None
    assert credentials.secret_access_key == SecretStr("secret-from-env")
    assert credentials.session_token is None
    assert storage_from_env(location_env(location)) == (location, None)
    assert storage_from_env({"ROLLOUT_STORAGE_BUCKET": "b"})[0].region == "us-east-1"


def test_settings_from_env_name_each_wrong_variable(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        storage_from_env(
            {
                "ROLLOUT_STORAGE_BUCKET": "  ",
                "ROLLOUT_STORAGE_PATH_STYLE": "maybe",
                "ROLLOUT_STORAGE_CREDENTIALS_DIR": str(tmp_path),
            }
        )
    problems = {(p.file, p.field) for p in caught.value.problems}
    assert problems == {
        ("environment", "ROLLOUT_STORAGE_BUCKET"),
        ("environment", "ROLLOUT_STORAGE_PATH_STYLE"),
        (str(tmp_path / "AWS_ACCESS_KEY_ID"), None),
        (str(tmp_path / "AWS_SECRET_ACCESS_KEY"), None),
    }
    assert "ROLLOUT_STORAGE_BUCKET: is required" in str(caught.value)

    with pytest.raises(InvalidInput) as caught:
        storage_from_env({"ROLLOUT_STORAGE_BUCKET": "b", "ROLLOUT_STORAGE_ENDPOINT": "minio:9000"})
    assert [(p.field, p.message) for p in caught.value.problems] == [
        ("ROLLOUT_STORAGE_ENDPOINT", "'minio:9000' must start with http:// or https://")
    ]
    with pytest.raises(InvalidInput, match="ROLLOUT_STORAGE_BUCKET: 'a/b' is not a bucket name"):
        storage_from_env({"ROLLOUT_STORAGE_BUCKET": "a/b"})
    with pytest.raises(InvalidInput, match="does not exist"):
        storage_from_env(
            {"ROLLOUT_STORAGE_BUCKET": "b", "ROLLOUT_STORAGE_CREDENTIALS_DIR": "/no/such/dir"}
        )


def test_settings_never_show_the_secret(make_s3_settings: MakeSettings) -> None:
    settings = make_s3_settings().credentials.model_copy(
        update={"session_token": SecretStr("session-token-never-print-me")}
    )
    shown = [repr(settings), str(settings), settings.model_dump_json(), str(settings.model_dump())]
    secret = settings.secrets()[1]
    assert secret.startswith("rollout-test-secret")
    for text in shown:
        assert secret not in text
        assert "session-token-never-print-me" not in text
    assert "**********" in repr(settings)


@pytest.fixture
def auth_s3_server(own_s3_server: S3Server) -> tuple[S3Server, str, dict[str, str]]:
    """A server that checks signatures, a bucket on it, and an IAM user's key allowed on S3."""
    bucket = new_bucket_name()
    own_s3_server.start(buckets=[bucket])
    iam = boto3.client(
        "iam",
        endpoint_url=own_s3_server.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="bootstrap",
        aws_secret_access_key="bootstrap",
    )
    iam.create_user(UserName="runner")
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
    }
    iam.put_user_policy(UserName="runner", PolicyName="s3", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="runner")["AccessKey"]
    own_s3_server.enable_auth()
    return own_s3_server, bucket, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}


def write_secret_dir(directory: Path, access_key_id: str, secret: str) -> Path:
    directory.mkdir()
    # As `kubectl create secret --from-file` would mount them, with a stray newline from echo.
    (directory / "AWS_ACCESS_KEY_ID").write_text(access_key_id + "\n")
    (directory / "AWS_SECRET_ACCESS_KEY").write_text(secret + "\n")
    return directory


def test_credentials_from_a_mounted_secret_directory(
    auth_s3_server: tuple[S3Server, str, dict[str, str]], tmp_path: Path
) -> None:
    server, bucket, key = auth_s3_server
    env = {
        "ROLLOUT_STORAGE_BUCKET": bucket,
        "ROLLOUT_STORAGE_ENDPOINT": server.endpoint_url,
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        # Ignored: the mounted Secret wins over the environment.
        "AWS_ACCESS_KEY_ID": "AKIAWRONG",
        "AWS_SECRET_ACCESS_KEY": "wrong",
    }
    good_dir = write_secret_dir(tmp_path / "good", key["id"], key["secret"])
    store = ObjectStore(
        *storage_from_env(env | {"ROLLOUT_STORAGE_CREDENTIALS_DIR": str(good_dir)}), retry=QUICK
    )
    store.put_bytes("datasets/manifest.json", b"{}")
    assert store.get_bytes("datasets/manifest.json") == b"{}"

    wrong_secret = "wrong-secret-never-print-me"
    bad_dir = write_secret_dir(tmp_path / "bad", key["id"], wrong_secret)
    bad_store = ObjectStore(
        *storage_from_env(env | {"ROLLOUT_STORAGE_CREDENTIALS_DIR": str(bad_dir)}), retry=QUICK
    )
    with pytest.raises(StorageError) as caught:
        bad_store.get_bytes("datasets/manifest.json")
    assert caught.value.code == "SignatureDoesNotMatch"
    assert caught.value.attempts == 1
    assert wrong_secret not in str(caught.value)
    assert key["id"] not in str(caught.value)
