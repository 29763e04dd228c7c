"""Local mode's engine sandbox against a real Docker-compatible engine.

The engine is the one DOCKER_HOST (or the default socket) names when it answers; otherwise, when
Podman is installed, its API service started here on a socket of the test's own, with its own
image store. Without either, the tests skip and say why. Nothing is downloaded: the test image is
a root filesystem made of this machine's busybox (and the libraries it needs), imported into the
engine, and the Dockerfiles built here start FROM it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
from engine_kit import READY_TIMEOUT_SEC, EngineUnderTest

from rollout.api.errors import ErrorType
from rollout.api.resources import RolloutTrialSpec
from rollout.api.task import EnvironmentConfig
from rollout.api.wire.shim import READY_FILE
from rollout.local.engine import Engine
from rollout.local.sandbox import SandboxStartFailed
from rollout_runner.shim_environment import ShimEnvironment

pytestmark = [pytest.mark.integration, pytest.mark.engine]


@pytest.fixture
async def engine(test_engine: EngineUnderTest) -> AsyncIterator[Engine]:
    connected = await Engine.connect(test_engine.environ)
    try:
        yield connected
    finally:
        await connected.close()


def make_spec(task: str = "hello", attempt: int = 1, **fields: Any) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "engine-test",
            "agent": {"name": "oracle"},
            "datasetName": "offline",
            "taskName": task,
            "attempt": attempt,
            "image": "unused:1",
            "resources": {"cpus": "1", "memory": "256Mi", "storage": "1G"},
            "timeouts": {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 60},
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
            **fields,
        }
    )


def make_task(root: Path, dockerfile: str) -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "environment" / "Dockerfile").write_text(dockerfile)
    return root


def container_exists(engine: Engine, container_id: str) -> bool:
    try:
        engine.client.containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


# --- Tests ------------------------------------------------------------------------------------


async def test_a_sandbox_runs_the_shim_whose_commands_write_the_host_logs_dir(
    engine: Engine, test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    image = await engine.images.ensure(
        tmp_path, EnvironmentConfig(docker_image=test_engine.image), force_build=False
    )
    sandbox = await engine.start(make_spec(), image, work_dir=tmp_path)
    try:
        shim = ShimEnvironment(sandbox.paths.control_dir)
        await shim.wait_ready(READY_TIMEOUT_SEC)
        assert (sandbox.paths.control_dir / READY_FILE).is_file()

        result = await shim.run(
            "mkdir -p /logs/agent && echo hello > /logs/agent/x.txt && pwd && id -u",
            timeout_sec=30,
        )

        assert result.exit_code == 0, result.stderr
        assert result.stdout.decode().split() == ["/", "0"]
        assert (sandbox.paths.logs_dir / "agent" / "x.txt").read_text() == "hello\n"
        assert sandbox.name in sandbox.describe()
        container = engine.client.containers.get(sandbox.container_id)
        assert container.attrs["HostConfig"]["NanoCpus"] == 1_000_000_000
        assert container.attrs["HostConfig"]["Memory"] == 256 * 2**20
        assert container.labels["rollout.dev/job"] == "engine-test"
    finally:
        await sandbox.close()

    assert not container_exists(engine, sandbox.container_id)
    assert not sandbox.paths.control_dir.exists()
    await sandbox.close()  # again: nothing left to do, no error


async def test_a_dockerfile_is_built_once_for_the_sandboxes_that_share_it(
    engine: Engine,
    test_engine: EngineUnderTest,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = secrets.token_hex(8)  # new content: a tag no earlier run built
    task = make_task(
        tmp_path / "task",
        f"FROM {test_engine.image}\n"
        f"RUN echo built-{token} > /built.txt\n"
        "WORKDIR /app\n"
        # The shim replaces both: neither wraps nor follows it.
        'ENTRYPOINT ["/bin/false"]\n'
        'CMD ["ignored"]\n',
    )
    caplog.set_level(logging.INFO, logger="rollout.local.engine_images")

    def builds() -> list[str]:
        """The tags built so far, as the image cache logs each build it starts."""
        return [r.args[0] for r in caplog.records if r.msg.startswith("building %s")]

    environment = EnvironmentConfig()

    first, second = await asyncio.gather(
        engine.images.ensure(task, environment, force_build=False),
        engine.images.ensure(task, environment, force_build=False),
    )

    test_engine.built.append(first)
    assert first == second
    assert builds() == [first]
    sandboxes = await asyncio.gather(
        engine.start(make_spec(attempt=1), first, work_dir=tmp_path),
        engine.start(make_spec(attempt=2), second, work_dir=tmp_path),
    )
    try:
        for sandbox in sandboxes:
            shim = ShimEnvironment(sandbox.paths.control_dir)
            await shim.wait_ready(READY_TIMEOUT_SEC)
            result = await shim.run("cat /built.txt; pwd", timeout_sec=30)
            assert result.stdout.decode().split() == [f"built-{token}", "/app"]
    finally:
        await asyncio.gather(*(sandbox.close() for sandbox in sandboxes))

    # Another job finds the tag on the engine and builds nothing; force_build builds once.
    again = Engine(engine.client)
    assert await again.images.ensure(task, environment, force_build=False) == first
    assert builds() == [first]
    forced = Engine(engine.client)
    await asyncio.gather(
        forced.images.ensure(task, environment, force_build=True),
        forced.images.ensure(task, environment, force_build=True),
    )
    assert builds() == [first, first]


async def test_close_keep_leaves_the_container_running(
    engine: Engine, test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    sandbox = await engine.start(make_spec(), test_engine.image, work_dir=tmp_path)
    await ShimEnvironment(sandbox.paths.control_dir).wait_ready(READY_TIMEOUT_SEC)

    await sandbox.close(keep=True)

    try:
        container = engine.client.containers.get(sandbox.container_id)
        assert container.status == "running"
        assert f"docker exec -it {sandbox.name} sh" in sandbox.describe()
        assert sandbox.paths.logs_dir.is_dir()
    finally:
        engine.client.api.remove_container(sandbox.container_id, force=True)


async def test_a_failing_dockerfile_is_a_build_failure_with_the_builds_output(
    engine: Engine, test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    task = make_task(
        tmp_path / "task",
        f"FROM {test_engine.image}\nRUN echo about-to-fail-{secrets.token_hex(4)} && exit 3\n",
    )

    with pytest.raises(SandboxStartFailed) as caught:
        await engine.images.ensure(task, EnvironmentConfig(), force_build=False)

    assert caught.value.error_type == ErrorType.ENVIRONMENT_BUILD_FAILED
    assert "about-to-fail" in caught.value.message
    # The next trial of the task gets the same error without another build.
    with pytest.raises(SandboxStartFailed) as again:
        await engine.images.ensure(task, EnvironmentConfig(), force_build=False)
    assert again.value is caught.value


async def test_an_image_that_cannot_be_pulled_is_a_pull_failure(
    engine: Engine, tmp_path: Path
) -> None:
    image = "127.0.0.1:9/rollout/no-such-image:1"  # the discard port: nothing answers

    with pytest.raises(SandboxStartFailed) as caught:
        await engine.images.ensure(
            tmp_path, EnvironmentConfig(docker_image=image), force_build=False
        )

    assert caught.value.error_type == ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
    assert image in caught.value.message


async def test_an_image_that_does_not_start_fails_the_start_and_leaves_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    with pytest.raises(SandboxStartFailed) as caught:
        await engine.start(make_spec(), "localhost/rollout-no-such-image:1", work_dir=tmp_path)

    assert caught.value.error_type == ErrorType.ENVIRONMENT_START_FAILED
    assert await asyncio.to_thread(os.listdir, tmp_path) == []


async def test_a_shim_running_as_the_images_non_root_user_gets_ready(
    engine: Engine, test_engine: EngineUnderTest, tmp_path: Path
) -> None:
    # The control directory is as open as a Pod's emptyDir until the runner closes it to the
    # shim's user: a shim that is not root can still write its ready file there.
    task = make_task(
        tmp_path / "task", f"FROM {test_engine.image}\n# {secrets.token_hex(8)}\nUSER 1000:1000\n"
    )
    image = await engine.images.ensure(task, EnvironmentConfig(), force_build=False)
    test_engine.built.append(image)
    sandbox = await engine.start(make_spec(), image, work_dir=tmp_path)
    try:
        shim = ShimEnvironment(sandbox.paths.control_dir)
        await shim.wait_ready(READY_TIMEOUT_SEC)

        assert shim.info is not None
        assert shim.info.uid == 1000
    finally:
        await sandbox.close()
