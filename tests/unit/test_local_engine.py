"""Local mode's engine sandbox without an engine: the container it asks for, the image tag of a
task's environment/, which engines it accepts, and how images are pulled and built once each
(against a fake of docker-py's image calls)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from rollout.api.images import environment_image_tag
from rollout.api.names import LABEL_AGENT, LABEL_DATASET, LABEL_JOB, LABEL_TASK, LABEL_TRIAL
from rollout.api.resources import RolloutTrialSpec
from rollout.api.task import EnvironmentConfig
from rollout.api.trials import trial_resource_name
from rollout.api.wire.shim import CONTROL_DIR, shim_command
from rollout.local.engine import (
    LABEL_COMPONENT,
    LOCAL_ENVIRONMENT_COMPONENT,
    connect_engine,
    container_name,
    container_request,
    engine_address,
    remote_engine_reason,
)
from rollout.local.engine_images import ImageCache, build_log_tail
from rollout.local.sandbox import SandboxPaths, SandboxStartFailed, SandboxUnavailable

PATHS = SandboxPaths(control_dir=Path("/work/sb/control"), logs_dir=Path("/work/sb/logs"))


def make_spec(**resources: Any) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "job-1",
            "agent": {"name": "oracle"},
            "datasetName": "offline",
            "taskName": "hello",
            "attempt": 2,
            "image": "unused:1",
            "resources": {"cpus": "1", "memory": "512Mi", "storage": "1G", **resources},
            "timeouts": {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 1},
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
        }
    )


# --- The container ----------------------------------------------------------------------------


def test_container_request_limits_cpus_memory_and_gpus() -> None:
    request = container_request(
        make_spec(cpus="2", memory="4Gi", gpus=1), "img:1", PATHS, name="c-1"
    )

    assert request["nano_cpus"] == 2_000_000_000
    assert type(request["nano_cpus"]) is int
    assert request["mem_limit"] == 4 * 2**30
    assert type(request["mem_limit"]) is int
    assert request["memswap_limit"] == request["mem_limit"]  # no swap, as in a Pod
    [gpus] = request["device_requests"]
    assert gpus["Count"] == 1
    assert gpus["Capabilities"] == [["gpu"]]


def test_container_request_fractions_of_cpus_and_decimal_memory() -> None:
    request = container_request(make_spec(cpus="500m", memory="2G"), "img:1", PATHS, name="c")

    assert request["nano_cpus"] == 500_000_000
    assert request["mem_limit"] == 2_000_000_000


def test_container_request_without_gpus_has_no_device_requests() -> None:
    request = container_request(make_spec(gpus=0), "img:1", PATHS, name="c")

    assert "device_requests" not in request


def test_container_request_runs_the_shim_in_place_of_the_images_entrypoint_and_command() -> None:
    request = container_request(make_spec(), "img:1", PATHS, name="c")

    assert request["image"] == "img:1"
    assert request["entrypoint"] == shim_command(CONTROL_DIR)
    # No command: an entrypoint given clears the image's CMD, so nothing follows the shim's args.
    assert "command" not in request
    assert "working_dir" not in request  # the image's WORKDIR, which the shim records
    assert request["init"] is False
    assert request["privileged"] is False
    assert "environment" not in request  # the agent's env travels per command, never here
    assert "network_mode" not in request


def test_container_request_binds_the_control_and_logs_directories() -> None:
    request = container_request(make_spec(), "img:1", PATHS, name="c")

    binds = {host: spec["bind"] for host, spec in request["volumes"].items()}
    assert binds == {"/work/sb/control": CONTROL_DIR, "/work/sb/logs": "/logs"}
    assert all(spec["mode"].split(",")[0] == "rw" for spec in request["volumes"].values())


def test_container_request_names_the_job_and_trial_in_labels() -> None:
    spec = make_spec()
    request = container_request(spec, "img:1", PATHS, name="c-1")

    assert request["name"] == "c-1"
    assert request["labels"] == {
        LABEL_JOB: "job-1",
        LABEL_TRIAL: trial_resource_name("job-1", "oracle", "offline", "hello", 2),
        LABEL_AGENT: "oracle",
        LABEL_DATASET: "offline",
        LABEL_TASK: "hello",
        LABEL_COMPONENT: LOCAL_ENVIRONMENT_COMPONENT,
    }


def test_container_request_keeps_the_tasks_workdir() -> None:
    spec = make_spec().model_copy(update={"workdir": "/app"})

    assert container_request(spec, "img:1", PATHS, name="c")["working_dir"] == "/app"


def test_container_names_start_with_the_trial_and_are_new_each_time() -> None:
    spec = make_spec()
    trial = trial_resource_name("job-1", "oracle", "offline", "hello", 2)

    first, second = container_name(spec), container_name(spec)

    assert first.startswith(f"{trial}-")
    assert second.startswith(f"{trial}-")
    assert first != second


# --- The engine's address ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "unix:///var/run/docker.sock",
        "unix:///run/user/1000/podman/podman.sock",
        "tcp://127.0.0.1:2375",
        "tcp://localhost:2375",
        "tcp://[::1]:2375",
        "npipe:////./pipe/docker_engine",
    ],
)
def test_engines_of_this_machine_are_accepted(address: str) -> None:
    assert remote_engine_reason(address) is None


@pytest.mark.parametrize(
    "address", ["tcp://10.0.0.1:2376", "ssh://host", "ssh://user@127.0.0.1", "tcp://build:2375"]
)
def test_engines_of_other_machines_are_refused_for_the_bridge(address: str) -> None:
    reason = remote_engine_reason(address)

    assert reason is not None
    assert address in reason
    assert "bridge" in reason
    assert "environment.type: local" in reason


def test_a_remote_docker_host_is_refused_before_any_connection() -> None:
    with pytest.raises(SandboxUnavailable, match="another machine"):
        connect_engine({"DOCKER_HOST": "ssh://builder.example"})


def test_no_engine_names_the_address_and_the_host_sandbox(tmp_path: Path) -> None:
    address = f"unix://{tmp_path}/no-engine.sock"

    with pytest.raises(SandboxUnavailable) as caught:
        connect_engine({"DOCKER_HOST": address})

    assert address in str(caught.value)
    assert "environment.type: local" in str(caught.value)


def test_the_default_address_is_the_docker_socket() -> None:
    assert engine_address({}) == "unix:///var/run/docker.sock"
    assert engine_address({"DOCKER_HOST": "tcp://127.0.0.1:1"}) == "tcp://127.0.0.1:1"


# --- The image tag of environment/ -------------------------------------------------------------


def make_environment(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM debian\nCOPY scripts /scripts\n")
    (root / "scripts" / "setup.sh").write_text("echo hi\n")
    (root / "scripts" / "setup.sh").chmod(0o755)
    return root


def test_image_tag_is_a_stable_hash_of_the_content(tmp_path: Path) -> None:
    tag = environment_image_tag(make_environment(tmp_path / "env"))

    repository, _, digest = tag.partition(":")
    assert repository == "rollout-env"
    assert len(digest) == 64
    assert int(digest, 16) >= 0
    assert environment_image_tag(tmp_path / "env") == tag


def test_image_tag_ignores_where_the_directory_is_and_its_times(tmp_path: Path) -> None:
    one = make_environment(tmp_path / "one")
    two = tmp_path / "elsewhere" / "two"
    shutil.copytree(one, two)
    os.utime(two / "Dockerfile", (1_000_000, 1_000_000))
    os.utime(two / "scripts" / "setup.sh", (2_000_000, 2_000_000))

    assert environment_image_tag(two) == environment_image_tag(one)


def test_image_tag_changes_with_a_files_content(tmp_path: Path) -> None:
    env = make_environment(tmp_path / "env")
    before = environment_image_tag(env)

    (env / "scripts" / "setup.sh").write_text("echo bye\n")

    assert environment_image_tag(env) != before


def test_image_tag_changes_with_a_files_executable_bit(tmp_path: Path) -> None:
    env = make_environment(tmp_path / "env")
    before = environment_image_tag(env)

    (env / "scripts" / "setup.sh").chmod(0o644)

    assert environment_image_tag(env) != before
    (env / "scripts" / "setup.sh").chmod(0o744)  # only the executable bit counts, not the mode
    assert environment_image_tag(env) == before


# --- Build output -----------------------------------------------------------------------------


def test_build_log_tail_keeps_the_end_of_the_output_and_the_error() -> None:
    log = [{"stream": f"line {n}\n"} for n in range(50)]
    log += [{"error": "RUN false: exit code 1"}, {"aux": {"ID": "x"}}]

    tail = build_log_tail(log, lines=3).splitlines()

    assert tail == ["line 48", "line 49", "RUN false: exit code 1"]


# --- Images, once each (an engine faked) ------------------------------------------------------


class FakeImages:
    """docker-py's `client.images`, as far as ImageCache uses it."""

    def __init__(self, present: tuple[str, ...] = (), build_fails: bool = False) -> None:
        self.present = set(present)
        self.build_fails = build_fails
        self.pulls: list[str] = []
        self.builds: list[str] = []

    def get(self, reference: str) -> object:
        if reference not in self.present:
            raise docker.errors.ImageNotFound(reference)
        return object()

    def pull(self, reference: str) -> None:
        time.sleep(0.05)  # long enough for the other trials to be waiting
        if reference.startswith("unreachable/"):
            raise docker.errors.APIError("pull failed", explanation="registry unreachable")
        self.pulls.append(reference)
        self.present.add(reference)

    def build(self, *, path: str, tag: str, **_: Any) -> None:
        time.sleep(0.05)
        self.builds.append(tag)
        if self.build_fails:
            log = [{"stream": "Step 2/2 : RUN make\n"}, {"error": "make: no rule"}]
            raise docker.errors.BuildError("The command returned a non-zero code: 2", log)
        self.present.add(tag)


def fake_cache(images: FakeImages) -> ImageCache:
    client = type("FakeClient", (), {"images": images})()
    return ImageCache(client)  # type: ignore[arg-type]


def make_task(root: Path) -> Path:
    make_environment(root / "environment")
    return root


async def test_an_image_is_pulled_once_and_only_when_absent(tmp_path: Path) -> None:
    images = FakeImages(present=("present:1",))
    cache = fake_cache(images)
    wanted = EnvironmentConfig(docker_image="absent:1")

    got = await asyncio.gather(*(cache.ensure(tmp_path, wanted, force_build=False) for _ in "abc"))
    await cache.ensure(tmp_path, EnvironmentConfig(docker_image="present:1"), force_build=False)

    assert got == ["absent:1"] * 3
    assert images.pulls == ["absent:1"]
    assert images.builds == []


async def test_a_pull_failure_is_environment_image_pull_failed(tmp_path: Path) -> None:
    cache = fake_cache(FakeImages())

    with pytest.raises(SandboxStartFailed) as caught:
        await cache.ensure(
            tmp_path, EnvironmentConfig(docker_image="unreachable/x:1"), force_build=False
        )

    assert caught.value.error_type == "environment_image_pull_failed"
    assert "registry unreachable" in caught.value.message


async def test_a_dockerfile_is_built_once_under_its_content_tag(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task")
    images = FakeImages()
    cache = fake_cache(images)

    got = await asyncio.gather(
        *(cache.ensure(task, EnvironmentConfig(), force_build=False) for _ in "abc")
    )

    tag = environment_image_tag(task / "environment")
    assert got == [tag] * 3
    assert images.builds == [tag]


async def test_a_build_is_skipped_when_the_engine_has_the_tag_unless_forced(
    tmp_path: Path,
) -> None:
    task = make_task(tmp_path / "task")
    tag = environment_image_tag(task / "environment")
    images = FakeImages(present=(tag,))
    # force_build builds even a task with a docker_image, and once per job.
    with_image = EnvironmentConfig(docker_image="prebuilt:1")

    assert await fake_cache(images).ensure(task, EnvironmentConfig(), force_build=False) == tag
    assert images.builds == []
    forced = fake_cache(images)
    await asyncio.gather(*(forced.ensure(task, with_image, force_build=True) for _ in "ab"))
    assert images.builds == [tag]
    assert images.pulls == []


async def test_a_failed_build_fails_every_trial_with_its_output_and_runs_once(
    tmp_path: Path,
) -> None:
    task = make_task(tmp_path / "task")
    images = FakeImages(build_fails=True)
    cache = fake_cache(images)

    results = await asyncio.gather(
        *(cache.ensure(task, EnvironmentConfig(), force_build=False) for _ in "abc"),
        return_exceptions=True,
    )

    assert len(images.builds) == 1
    for result in results:
        assert isinstance(result, SandboxStartFailed)
        assert result.error_type == "environment_build_failed"
        assert "non-zero code: 2" in result.message
        assert "make: no rule" in result.message


async def test_a_task_without_a_dockerfile_or_image_cannot_build(tmp_path: Path) -> None:
    (tmp_path / "environment").mkdir()

    with pytest.raises(SandboxStartFailed) as caught:
        await fake_cache(FakeImages()).ensure(tmp_path, EnvironmentConfig(), force_build=False)

    assert caught.value.error_type == "environment_build_failed"
    assert "Dockerfile" in caught.value.message
    assert "docker_image" in caught.value.message
