"""Fixtures for integration tests: a real S3 endpoint (moto's server mode) on loopback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Protocol

import pytest
from pydantic import SecretStr

from rollout.storage import ObjectStore, StorageSettings
from s3server import S3Server

# moto accepts any credentials; these are distinctive so tests can look for leaks of them
# (tests read them back from the settings: importing conftest from a test module is fragile).
TEST_ACCESS_KEY_ID = "AKIAROLLOUTTESTKEY01"
TEST_SECRET_ACCESS_KEY = "rollout-test-secret-3f9c2b7e-never-print-me"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One moto S3 server for the whole session. Do not stop it: use your own for outages."""
    server = S3Server(log_dir=tmp_path_factory.mktemp("s3server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def new_bucket_name() -> str:
    return f"rollout-test-{uuid.uuid4().hex[:12]}"


class MakeS3Settings(Protocol):
    def __call__(
        self, endpoint_url: str | None = None, bucket: str | None = None, prefix: str = ""
    ) -> StorageSettings: ...


@pytest.fixture
def make_s3_settings(s3_server: S3Server) -> MakeS3Settings:
    """StorageSettings for a bucket (a fresh name unless given; not created) at an endpoint
    (the session's S3 server unless given), with static test credentials."""

    def make(
        endpoint_url: str | None = None, bucket: str | None = None, prefix: str = ""
    ) -> StorageSettings:
        return StorageSettings(
            bucket=bucket or new_bucket_name(),
            prefix=prefix,
            endpoint_url=endpoint_url or s3_server.endpoint_url,
            path_style=True,
            access_key_id=SecretStr(TEST_ACCESS_KEY_ID),
            secret_access_key=SecretStr(TEST_SECRET_ACCESS_KEY),
            # Loopback answers at once; short timeouts keep a test of a hung endpoint short too.
            connect_timeout_seconds=2,
            read_timeout_seconds=10,
        )

    return make


@pytest.fixture
def s3_settings(make_s3_settings: MakeS3Settings) -> StorageSettings:
    """StorageSettings for a fresh, existing, empty bucket on the session's S3 server."""
    settings = make_s3_settings()
    ObjectStore(settings).ensure_bucket()
    return settings
