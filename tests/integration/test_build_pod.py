"""A build Pod as the operator renders it (`rollout.controller.build_pod`), created through the
API and run for real by the test kubelet (`kubeharness.build_kubelet`): the runner's `context`
and `report` as processes, Buildah building and pushing to a real OCI registry on loopback, the
storage the test suite's S3.

The RolloutImage is written by hand here (as the operator would make it) and created first, so
that the Pod's owner exists: a real control plane's garbage collector removes a Pod whose owner
does not.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_kit import create_storage_secret
from s3_kit import S3Settings

from buildah_kit import base_image_unavailable_reason, push_base_image
from kubeharness.build_kubelet import (
    BuildPodRunner,
    ContainerOutcome,
    failing_builders,
    run_build_pod,
)
from kubeharness.kube import Kube
from kubeharness.resources import PODS, Body
from registry_server import RegistryServer, registry_unavailable_reason
from rollout.api.images import image_hash, image_reference
from rollout.api.layout import build_log_key, environment_archive_key
from rollout.api.resources import Builder, BuilderType
from rollout.api.taskdir import tree_hash
from rollout.api.wire.build import BuildReport, parse_report
from rollout.controller.build_pod import (
    BUILD_CONTAINER,
    CONTEXT_CONTAINER,
    REPORT_CONTAINER,
    STORAGE_CREDENTIALS_VOLUME,
    WORKSPACE_VOLUME,
    render_build_pod,
)
from rollout.controller.config import OperatorConfig
from rollout.datasets.bundle import task_archive
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

ROLLOUT_IMAGES = "rollout.dev/v1alpha1/rolloutimages"
CREDENTIALS_SECRET = "storage-credentials"
REPOSITORY = "rollout-environments"
BUILDER = Builder(type=BuilderType.BUILDAH, image="quay.io/buildah/stable:v1.38")
PLATFORM = "linux/amd64"
JOB = "job-1"
GRACE_SEC = 2
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A registry on loopback for the module, or a skip saying why there can be none."""
    reason = registry_unavailable_reason() or base_image_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with RegistryServer(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="module")
def base_image(registry: RegistryServer) -> str:
    """A tiny base image (busybox) in the registry: what the Dockerfiles build FROM."""
    push_base_image(registry.host, "base:1")
    return f"{registry.host}/base:1"


@pytest.fixture
async def storage_secret(kube: Kube, s3_settings: S3Settings) -> str:
    """The Secret with the storage credentials that the Pod's `context` and `report` mount."""
    return await create_storage_secret(kube, s3_settings, CREDENTIALS_SECRET)


def operator_config(secret: str) -> OperatorConfig:
    return OperatorConfig(
        runner_image="rollout-runner:test",
        builder=BuilderType.BUILDAH,
        storage_credentials_secret=secret,
        pod_termination_grace_sec=GRACE_SEC,
    )


def environment(root: Path, dockerfile: str) -> Path:
    """A task's environment/ directory: a Dockerfile and a file beside it."""
    root.mkdir(parents=True)
    (root / "Dockerfile").write_text(dockerfile)
    (root / "README.md").write_text("the build context\n")
    return root


def publish_environment(store: ObjectStore, directory: Path) -> tuple[str, str]:
    """Put the environment's archive where the CLI publishes it: (its hash, its key)."""
    environment_hash = tree_hash(directory)
    key = environment_archive_key(store.prefix, environment_hash)
    store.put_bytes(key, task_archive(directory, what="environment/"))
    return environment_hash, key


def image_spec(
    s3_settings: S3Settings, registry_host: str, environment_hash: str, key: str, timeout: int
) -> dict[str, Any]:
    """A RolloutImage's spec, as the operator would write it (camelCase, as in the API)."""
    tag = image_hash(environment_hash, BUILDER, PLATFORM)
    image = image_reference(registry_host, REPOSITORY, tag)
    storage = s3_settings.location.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {
        "environmentHash": environment_hash,
        "imageHash": tag,
        "image": image,
        "pullImage": image,
        "context": {"storage": storage, "key": key},
        "builder": BUILDER.model_dump(mode="json", by_alias=True),
        "platform": PLATFORM,
        "plainHttp": True,
        "timeoutSeconds": timeout,
        "logKey": build_log_key(s3_settings.location.prefix, JOB, tag),
        "requestedBy": JOB,
    }


async def create_build_pod(kube: Kube, spec: dict[str, Any], secret: str) -> Body:
    """Create the RolloutImage, then its build Pod (attempt 1) through the API."""
    image = await kube.create(
        ROLLOUT_IMAGES, {"metadata": {"name": f"img-{spec['imageHash'][:12]}"}, "spec": spec}
    )
    pod = render_build_pod(image, config=operator_config(secret), attempt=1)
    return await kube.create(PODS, pod)


async def build(
    kube: Kube,
    s3_settings: S3Settings,
    tmp_path: Path,
    secret: str,
    *,
    dockerfile: str,
    registry_host: str,
    build_timeout_sec: int = 300,
) -> tuple[dict[str, Any], Body]:
    """Publish an environment with `dockerfile`, and create its RolloutImage and build Pod."""
    directory = environment(tmp_path / "environment", dockerfile)
    environment_hash, key = publish_environment(s3_settings.store(), directory)
    spec = image_spec(s3_settings, registry_host, environment_hash, key, build_timeout_sec)
    return spec, await create_build_pod(kube, spec, secret)


def report_of(outcomes: dict[str, ContainerOutcome]) -> BuildReport:
    report = parse_report(outcomes[REPORT_CONTAINER].message)
    assert report is not None, outcomes[REPORT_CONTAINER]
    return report


def served_digest(registry: RegistryServer, image: str) -> str:
    """The manifest digest the registry serves for `image` (`<host>/<repository>:<tag>`)."""
    repository, tag = image.removeprefix(f"{registry.host}/").rsplit(":", 1)
    request = urllib.request.Request(
        f"{registry.url}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": ", ".join(MANIFEST_TYPES)},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.headers["Docker-Content-Digest"])


def terminated(statuses: list[Body]) -> dict[str, Body]:
    return {s["name"]: s["state"].get("terminated") for s in statuses}


async def test_a_build_pod_builds_pushes_and_reports_the_image(
    kube: Kube,
    s3_settings: S3Settings,
    storage_secret: str,
    registry: RegistryServer,
    base_image: str,
    tmp_path: Path,
) -> None:
    spec, pod = await build(
        kube,
        s3_settings,
        tmp_path,
        storage_secret,
        dockerfile=f"FROM {base_image}\nRUN echo hi > /hi\n",
        registry_host=registry.host,
    )
    name = pod["metadata"]["name"]

    outcomes = await run_build_pod(kube, name, kube.namespace, tmp_path / "kubelet")

    report = report_of(outcomes)
    assert report.succeeded, (report, outcomes[BUILD_CONTAINER].output)
    assert report.digest == await asyncio.to_thread(served_digest, registry, spec["image"])
    store = s3_settings.store()
    assert report.log_uri == store.uri(spec["logKey"])
    log = store.get_bytes(spec["logKey"]).decode()
    assert "RUN echo hi > /hi" in log
    assert log == outcomes[BUILD_CONTAINER].output  # the script tees it to the container's log
    status = (await kube.get(PODS, name))["status"]
    assert status["phase"] == "Succeeded"
    assert {n: s["exitCode"] for n, s in terminated(status["initContainerStatuses"]).items()} == {
        CONTEXT_CONTAINER: 0
    }
    assert {n: s["exitCode"] for n, s in terminated(status["containerStatuses"]).items()} == {
        BUILD_CONTAINER: 0,
        REPORT_CONTAINER: 0,
    }
    message = terminated(status["containerStatuses"])[REPORT_CONTAINER]["message"]
    assert parse_report(message) == report


async def test_a_failing_run_step_is_reported_with_its_status_and_command(
    kube: Kube,
    s3_settings: S3Settings,
    storage_secret: str,
    registry: RegistryServer,
    base_image: str,
    tmp_path: Path,
) -> None:
    _, pod = await build(
        kube,
        s3_settings,
        tmp_path,
        storage_secret,
        dockerfile=f"FROM {base_image}\nRUN cat /no-such-file-here\n",
        registry_host=registry.host,
    )
    name = pod["metadata"]["name"]

    outcomes = await run_build_pod(kube, name, kube.namespace, tmp_path / "kubelet")

    report = report_of(outcomes)
    assert not report.succeeded
    assert report.exit_code not in (0, None)
    assert not report.timed_out
    assert report.digest is None
    assert "cat /no-such-file-here" in report.log_tail
    status = (await kube.get(PODS, name))["status"]
    # The builder's script exits 0 (it reports through its files); the report is the outcome.
    assert terminated(status["containerStatuses"])[REPORT_CONTAINER]["exitCode"] == 0


async def test_a_build_past_its_timeout_is_reported_as_timed_out(
    kube: Kube,
    s3_settings: S3Settings,
    storage_secret: str,
    registry: RegistryServer,
    base_image: str,
    tmp_path: Path,
) -> None:
    spec, pod = await build(
        kube,
        s3_settings,
        tmp_path,
        storage_secret,
        # The base image is busybox with sh, echo and cat linked: sleep is busybox's.
        dockerfile=f"FROM {base_image}\nRUN busybox sleep 30\n",
        registry_host=registry.host,
        build_timeout_sec=2,
    )
    name = pod["metadata"]["name"]
    kubelet = asyncio.create_task(run_build_pod(kube, name, kube.namespace, tmp_path / "kubelet"))
    try:
        await kube.wait_for(lambda: report_ended(kube, name), what="the report", timeout=60)
        # What the operator does once it has the report: the kubelet then stops the build.
        await kube.delete(PODS, name)
        outcomes = await asyncio.wait_for(kubelet, GRACE_SEC + 30)
    finally:
        kubelet.cancel()

    report = report_of(outcomes)
    assert report.timed_out
    assert report.exit_code is None
    assert not report.succeeded
    assert report.build_sec is not None
    assert 2 <= report.build_sec < 10
    assert "RUN busybox sleep 30" in s3_settings.store().get_bytes(spec["logKey"]).decode()
    assert outcomes[BUILD_CONTAINER].exit_code in (137, 143)  # stopped, not finished


async def report_ended(kube: Kube, name: str) -> bool:
    pod = await kube.get(PODS, name)
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s["name"] == REPORT_CONTAINER and "terminated" in s["state"] for s in statuses)


# --- the kubelet's other paths, which need no builder -------------------------------------------


async def test_a_context_that_cannot_be_fetched_fails_the_pod_before_the_build(
    kube: Kube, s3_settings: S3Settings, storage_secret: str, tmp_path: Path
) -> None:
    key = "environments/none.tar.gz"
    spec = image_spec(s3_settings, "registry.invalid:5000", "0" * 64, key, 60)
    pod = await create_build_pod(kube, spec, storage_secret)
    name = pod["metadata"]["name"]

    outcomes = await run_build_pod(kube, name, kube.namespace, tmp_path / "kubelet")

    assert set(outcomes) == {CONTEXT_CONTAINER}
    status = (await kube.get(PODS, name))["status"]
    assert status["phase"] == "Failed"
    context = terminated(status["initContainerStatuses"])[CONTEXT_CONTAINER]
    assert context["exitCode"] == 1
    uri = s3_settings.store().uri(key)
    assert context["message"].startswith(f"the build context {uri} cannot be fetched: ")
    for container in status["containerStatuses"]:
        assert container["state"] == {"waiting": {"reason": "PodInitializing"}}


async def test_a_failing_builder_runs_the_pod_s_own_script_and_is_reported(
    kube: Kube, s3_settings: S3Settings, storage_secret: str, tmp_path: Path
) -> None:
    directory = environment(tmp_path / "environment", "FROM scratch\n")
    environment_hash, key = publish_environment(s3_settings.store(), directory)
    spec = image_spec(s3_settings, "registry.invalid:5000", environment_hash, key, 60)
    pod = await create_build_pod(kube, spec, storage_secret)
    name = pod["metadata"]["name"]

    outcomes = await run_build_pod(
        kube, name, kube.namespace, tmp_path / "kubelet", fail_build="no builder on this node"
    )

    report = report_of(outcomes)
    assert report.exit_code == 1
    assert report.log_tail == "no builder on this node"
    assert s3_settings.store().get_bytes(spec["logKey"]) == b"no builder on this node\n"
    status = (await kube.get(PODS, name))["status"]
    assert status["phase"] == "Succeeded"  # every container exited 0: the report says the rest


def test_the_runner_alone_runs_a_rendered_pod_and_returns_each_container_s_end(
    s3_settings: S3Settings, tmp_path: Path
) -> None:
    directory = environment(tmp_path / "environment", "FROM scratch\n")
    environment_hash, key = publish_environment(s3_settings.store(), directory)
    spec = image_spec(s3_settings, "registry.invalid:5000", environment_hash, key, 60)
    image = {"metadata": {"name": "img", "namespace": "ns", "uid": "u-1"}, "spec": spec}
    pod = render_build_pod(image, config=operator_config(CREDENTIALS_SECRET), attempt=1)
    credentials = s3_settings.credentials
    secrets = {
        (CREDENTIALS_SECRET, "AWS_ACCESS_KEY_ID"): credentials.access_key_id.get_secret_value(),
        (CREDENTIALS_SECRET, "AWS_SECRET_ACCESS_KEY"): (
            credentials.secret_access_key.get_secret_value()
        ),
    }
    builders = failing_builders(tmp_path / "builders", "the builder failed")
    runner = BuildPodRunner(
        pod, secrets, tmp_path / "pod", path=f"{builders}{os.pathsep}{os.environ['PATH']}"
    )

    outcomes = runner.run(timeout=60)

    assert {name: o.exit_code for name, o in outcomes.items()} == {
        CONTEXT_CONTAINER: 0,
        BUILD_CONTAINER: 0,
        REPORT_CONTAINER: 0,
    }
    assert outcomes[CONTEXT_CONTAINER].message == ""
    context = runner.volumes[WORKSPACE_VOLUME] / "context"
    assert (context / "Dockerfile").read_text() == "FROM scratch\n"
    credential_files = runner.volumes[STORAGE_CREDENTIALS_VOLUME]
    assert (credential_files / "AWS_ACCESS_KEY_ID").stat().st_mode & 0o777 == 0o440
    report = report_of(outcomes)
    assert report.exit_code == 1
    assert report.log_tail == "the builder failed"
