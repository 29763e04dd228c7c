"""Fixtures for integration tests: a real S3 endpoint (moto's server mode) on loopback, the
Kubernetes API (a real control plane where one is installed, else the emulator), the CLI, and the
shim's fake container.

A module that needs something else than one of these names its own fixture for it (e.g.
`fast_retry_store` beside `store`, `storage_cli` beside `cli`) instead of redefining the name, so
that a fixture means the same in every test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

import aiohttp
import pytest
from cli_kit import Cli, Workspace
from engine_kit import EngineUnderTest, engine_under_test
from pydantic import SecretStr
from runner_kit import fast_store
from s3_kit import S3Settings

from fakecontainer import FakeContainer, fake_container, shell_params
from kubeharness.emulator.emulated import kube_api
from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.real.kube import RealKube
from kubeharness.real.plane import ControlPlane, find_binaries, unavailable_reason
from kubeharness.resources import CRDS_DIR
from rollout.api.resources import StorageSpec
from rollout.storage import ObjectStore, StorageCredentials
from s3server import S3Server, new_bucket_name

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


class MakeS3Settings(Protocol):
    def __call__(
        self, endpoint_url: str | None = None, bucket: str | None = None, prefix: str = ""
    ) -> S3Settings: ...


@pytest.fixture
def make_s3_settings(s3_server: S3Server) -> MakeS3Settings:
    """S3Settings for a bucket (a fresh name unless given; not created) at an endpoint
    (the session's S3 server unless given), with static test credentials."""

    def make(
        endpoint_url: str | None = None, bucket: str | None = None, prefix: str = ""
    ) -> S3Settings:
        return S3Settings(
            StorageSpec(
                bucket=bucket or new_bucket_name(),
                prefix=prefix,
                endpoint=endpoint_url or s3_server.endpoint_url,
                path_style=True,
            ),
            StorageCredentials(
                access_key_id=SecretStr(TEST_ACCESS_KEY_ID),
                secret_access_key=SecretStr(TEST_SECRET_ACCESS_KEY),
            ),
        )

    return make


@pytest.fixture
def s3_settings(make_s3_settings: MakeS3Settings) -> S3Settings:
    """S3Settings for a fresh, existing, empty bucket on the session's S3 server."""
    settings = make_s3_settings()
    settings.store().ensure_bucket()
    return settings


@pytest.fixture
def store(s3_settings: S3Settings) -> ObjectStore:
    """The test's bucket, with the production retry policy."""
    return s3_settings.store()


@pytest.fixture
def fast_retry_store(s3_settings: S3Settings) -> ObjectStore:
    """The test's bucket, with retries that give up on a dead endpoint within seconds (the
    runner's tests)."""
    return fast_store(s3_settings)


# --- the Kubernetes API: a real control plane where its binaries are, else the emulator -----

BACKEND_ENV = "ROLLOUT_TEST_KUBE"
"""`emulator` or `real` to choose the Kubernetes API of the operator's and the CLI's tests;
unset: a real control plane when `find_binaries()` finds its binaries, else the emulator."""


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane | None]:
    """The session's real control plane, or None where the emulator serves instead."""
    wanted = os.environ.get(BACKEND_ENV, "")
    if wanted not in ("", "emulator", "real"):
        raise pytest.UsageError(f"{BACKEND_ENV} must be 'emulator' or 'real', not {wanted!r}")
    reason = unavailable_reason()
    if wanted == "emulator" or (wanted == "" and reason is not None):
        yield None
        return
    if reason is not None:
        pytest.fail(f"{BACKEND_ENV}=real, but {reason}")
    binaries = find_binaries()
    assert binaries is not None
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("control-plane"))
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
async def kube(control_plane: ControlPlane | None) -> AsyncIterator[Kube]:
    """The test's Kubernetes API with the rollout CRDs and the chart's RBAC for the operator
    (`Identity.OPERATOR`, enforced): a namespace of the real control plane, or a fresh emulator.
    `kube.namespace` is the test's namespace."""
    if control_plane is None:
        async with kube_api(crds=CRDS_DIR) as emulated:
            await emulated.apply_chart_rbac()  # the operator is bound by the chart's RBAC
            yield emulated
    else:
        async with RealKube.for_test(control_plane) as real:
            yield real  # the chart's cluster-wide RBAC was applied when the plane started


@pytest.fixture
async def emulated_kube() -> AsyncIterator[Kube]:
    """The emulator, whatever the session's backend: for what only it does (injected errors)."""
    async with kube_api(crds=CRDS_DIR) as emulated:
        yield emulated


@pytest.fixture
async def http(kube: Kube) -> AsyncIterator[aiohttp.ClientSession]:
    """A user's (a cluster admin's, as `helm install` has) HTTP session to the test's API."""
    async with kube.http_session(Identity.USER) as session:
        yield session


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    (tmp_path / "work").mkdir()
    return Workspace(tmp_path / "work")


@pytest.fixture
def cli(kube: Kube, tmp_path: Path, s3_settings: S3Settings) -> Cli:
    """The CLI with a kubeconfig for the test's API (a user's) and the test's bucket."""
    (tmp_path / "home").mkdir()
    return Cli(kube.write_kubeconfig(tmp_path / "kubeconfig"), s3_settings, tmp_path / "home")


# --- the shim ---------------------------------------------------------------------------------


@pytest.fixture(params=shell_params())
def container(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FakeContainer]:
    """A fake container running the shim, once under each shell it supports."""
    with fake_container(tmp_path, request.param) as running:
        yield running


@pytest.fixture(scope="session")
def test_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineUnderTest]:
    """A Docker-compatible engine with a small test image (`engine_kit`), or a skip saying why."""
    with engine_under_test(tmp_path_factory) as engine:
        yield engine
