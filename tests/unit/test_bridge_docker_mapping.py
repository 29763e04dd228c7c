"""The docker provider's pure parts: addresses, names, container and exec requests, the
wrapper's files, archives, and how the engine's refusals map to the seed's error types."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

import docker.errors
import docker.types
import pytest
import requests

from rollout.api.errors import ErrorType
from rollout.api.resources import RolloutTrialSpec
from rollout.bridge.providers.archives import extract, pack
from rollout.bridge.providers.base import ProviderError, SandboxRequest, sandbox_labels
from rollout.bridge.providers.docker import (
    KEEP_ALIVE,
    check_address,
    connect_remote,
    container_name,
    engine_environment,
    sandbox_request,
    start_error_type,
)
from rollout.bridge.providers.docker_sandbox import _container_gone, run_request, skeleton
from rollout.bridge.providers.scripts import RUN_WRAPPER


def spec(**fields: object) -> RolloutTrialSpec:
    return RolloutTrialSpec.model_validate(
        {
            "jobName": "job",
            "agent": {"name": "oracle", "env": [{"name": "API_KEY", "value": "sk-never"}]},
            "datasetName": "offline",
            "taskName": "hello",
            "attempt": 1,
            "image": "busybox:1",
            "resources": {"cpus": "1500m", "memory": "1Gi", "storage": "10G"},
            "timeouts": {"agentInstallSec": 1, "agentSec": 1, "verifierSec": 1, "buildSec": 60},
            "storage": {"bucket": "b"},
            "runnerImage": "runner:1",
            **fields,
        }
    )


def api_error(explanation: str, status: int = 500) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("engine said no", response=response, explanation=explanation)


# --- Addresses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "over_ssh"),
    [
        ("tcp://docker.example.com:2376", False),
        ("tcp://10.0.0.7:2375", False),
        ("ssh://ci@build-host", True),
        ("ssh://ci@build-host:2222", True),
    ],
)
def test_remote_addresses_are_accepted(address: str, over_ssh: bool) -> None:
    assert check_address(address) is over_ssh


@pytest.mark.parametrize(
    "address",
    ["unix:///var/run/docker.sock", "http://host:2375", "tcp://host:2375/path", "host:2375", ""],
)
def test_other_addresses_are_refused_by_name(address: str) -> None:
    with pytest.raises(ProviderError, match="no remote Docker engine address") as refused:
        check_address(address)

    assert refused.value.error_type is ErrorType.ENVIRONMENT_START_FAILED


def test_the_engine_gets_the_address_and_the_tls_settings_and_nothing_else() -> None:
    environ = {
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": "/etc/docker-tls",
        "DOCKER_HOST": "unix:///var/run/docker.sock",  # the bridge's own: never used
        "AWS_SECRET_ACCESS_KEY": "never",
    }

    assert engine_environment("tcp://h:2376", environ) == {
        "DOCKER_HOST": "tcp://h:2376",
        "DOCKER_TLS_VERIFY": "1",
        "DOCKER_CERT_PATH": "/etc/docker-tls",
    }


def test_an_ssh_address_without_an_ssh_client_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a bridge image with no ssh

    with pytest.raises(ProviderError, match="no ssh client: use tcp:// with TLS") as refused:
        connect_remote("ssh://ci@build-host", {})

    assert refused.value.error_type is ErrorType.ENVIRONMENT_START_FAILED


# --- The container ----------------------------------------------------------------------------


def test_a_container_name_is_readable_new_every_time_and_a_dns_label() -> None:
    first = container_name("team-a", "job-oracle-offline-hello-1-abc123")
    second = container_name("team-a", "job-oracle-offline-hello-1-abc123")

    assert re.fullmatch(r"team-a-job-oracle-offline-hello-1-abc123-[0-9a-f]{6}", first)
    assert first != second


def test_a_long_container_name_is_shortened_with_a_hash_of_the_whole() -> None:
    trial = "a" * 63
    one = container_name("namespace-one", trial)
    two = container_name("namespace-two", trial)

    for name in (one, two):
        assert len(name) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert one[:-7] != two[:-7]  # same head, different hashes


def test_the_container_request_has_the_trials_limits_labels_and_no_secret() -> None:
    trial = spec(workdir="/app", resources={"cpus": "1500m", "memory": "1Gi", "storage": "10G"})
    labels = sandbox_labels("team-a", "trial-1", "job", "bridge-1")
    request = SandboxRequest("team-a", "trial-1", trial, labels, None)

    create = sandbox_request(request, "busybox:1", "team-a-trial-1-abcdef")

    assert create["image"] == "busybox:1"
    assert create["name"] == "team-a-trial-1-abcdef"
    assert create["entrypoint"] == KEEP_ALIVE
    assert "command" not in create
    assert "volumes" not in create
    assert create["labels"] == labels
    assert create["nano_cpus"] == 1_500_000_000
    assert create["mem_limit"] == create["memswap_limit"] == 2**30
    assert create["working_dir"] == "/app"
    assert "device_requests" not in create
    assert "environment" not in create
    assert "sk-never" not in repr(create)


def test_gpus_are_requested_as_devices() -> None:
    trial = spec(resources={"cpus": "1", "memory": "1Gi", "storage": "1G", "gpus": 2})
    request = SandboxRequest("ns", "t", trial, {}, None)

    create = sandbox_request(request, "img", "name")

    assert create["device_requests"] == [
        docker.types.DeviceRequest(count=2, capabilities=[["gpu"]])
    ]


def test_the_skeleton_makes_logs_open_as_an_empty_dir_and_the_run_directory_sticky() -> None:
    with tarfile.open(fileobj=io.BytesIO(skeleton())) as tar:
        modes = {m.name: (m.isdir(), m.mode) for m in tar.getmembers()}

    assert modes == {
        "logs": (True, 0o777),
        "logs/agent": (True, 0o777),
        "logs/verifier": (True, 0o777),
        ".rollout-bridge": (True, 0o1777),
    }


# --- Commands ---------------------------------------------------------------------------------


def test_env_values_go_in_the_exec_environment_never_on_its_command_line() -> None:
    request = run_request(
        "echo hi",
        "/.rollout-bridge/abc",
        env={"API_KEY": "sk-secret value"},
        user="agent",
        cwd="sub",
    )

    assert request["cmd"] == [
        "/bin/sh",
        "-c",
        RUN_WRAPPER,
        "sh",
        "/.rollout-bridge/abc",
        "./sub",
        "echo hi",
    ]
    assert "sk-secret" not in " ".join(request["cmd"])
    assert request["environment"] == ["API_KEY=sk-secret value"]
    assert request["user"] == "agent"


def test_a_run_without_env_user_or_cwd_leaves_them_to_the_container() -> None:
    request = run_request("true", "/.rollout-bridge/abc", cwd="/abs")

    assert request["cmd"][5] == "/abs"
    assert run_request("true", "/r")["cmd"][5] == ""
    assert request["user"] == ""
    assert request["environment"] is None


@pytest.mark.parametrize(
    ("command", "cwd", "rc", "out", "err"),
    [
        ("echo out; echo err >&2; exit 3", "", 3, "out\n", "err\n"),
        ("kill -TERM $$", "", 143, "", ""),
        ("pwd", "/no/such/dir", 126, "", "/no/such/dir"),
    ],
)
def test_the_wrapper_keeps_the_pid_output_and_exit_status_in_the_run_directory(
    tmp_path: Path, command: str, cwd: str, rc: int, out: str, err: str
) -> None:
    run_dir = tmp_path / "run"

    finished = subprocess.run(
        ["/bin/sh", "-c", RUN_WRAPPER, "sh", str(run_dir), cwd, command],
        capture_output=True,
        timeout=30,
        check=False,
    )

    assert finished.returncode == rc
    assert (run_dir / "rc").read_text() == f"{rc}\n"
    assert ((run_dir / "out").read_text() if (run_dir / "out").exists() else "") == out
    assert err in (run_dir / "err").read_text()
    assert (run_dir.stat().st_mode & 0o777) == 0o700
    if cwd == "":
        assert (run_dir / "pid").read_text().strip().isdigit()


# --- Engine errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (
            api_error("Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available"),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (
            api_error('could not select device driver "" with capabilities: [[gpu]]'),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (
            api_error("Minimum memory limit allowed is 6MB", 400),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (
            api_error("no suitable node (insufficient resources on 1 node)"),
            ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
        ),
        (
            api_error('OCI runtime create failed: exec: "/bin/sh": stat /bin/sh: not found'),
            ErrorType.ENVIRONMENT_START_FAILED,
        ),
        (
            docker.errors.ImageNotFound("No such image: busybox:1"),
            ErrorType.ENVIRONMENT_START_FAILED,
        ),
        (
            requests.exceptions.ConnectionError("Connection refused"),
            ErrorType.ENVIRONMENT_START_FAILED,
        ),
    ],
)
def test_a_container_the_engine_will_not_start_has_an_error_type(
    error: Exception, error_type: ErrorType
) -> None:
    assert start_error_type(error) is error_type


@pytest.mark.parametrize(
    ("explanation", "gone"),
    [
        ("No such container: 4f1e", True),  # Docker
        ('no container with name or ID "4f1e" found: no such container', True),  # Podman
        ("Could not find the file /x/rc in container 4f1e", False),  # Docker
        ("no such file or directory", False),  # Podman
    ],
)
def test_a_404_tells_a_gone_container_from_a_missing_path(explanation: str, gone: bool) -> None:
    assert _container_gone(docker.errors.NotFound("404", explanation=explanation)) is gone


# --- Archives ---------------------------------------------------------------------------------


def test_a_packed_tree_belongs_to_the_containers_user_and_keeps_modes_and_links(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "run.sh").write_text("echo\n")
    (tree / "sub" / "run.sh").chmod(0o750)
    (tree / "link").symlink_to("sub/run.sh")
    archive = io.BytesIO()

    pack(tree, None, (1000, 1001), archive)

    with tarfile.open(fileobj=archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["link", "sub", "sub/run.sh"]  # the contents, not the directory
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members.values()} == {(1000, 1001, "", "")}
    assert members["sub/run.sh"].mode == 0o750
    assert members["link"].linkname == "sub/run.sh"


def test_a_packed_file_takes_the_name_it_gets_in_the_container(tmp_path: Path) -> None:
    (tmp_path / "local.txt").write_text("x")
    archive = io.BytesIO()

    pack(tmp_path / "local.txt", "remote.txt", (0, 0), archive)

    with tarfile.open(fileobj=archive) as tar:
        assert tar.getnames() == ["remote.txt"]


def test_unpacking_skips_what_would_land_outside_and_keeps_the_rest(tmp_path: Path) -> None:
    archive = tmp_path / "in.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("logs/ok.txt", b"ok"), ("../evil.txt", b"x"), ("/abs.txt", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (("logs/passwd", "/etc/passwd"), ("logs/up", "../../outside")):
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
    destination = tmp_path / "out"
    destination.mkdir()

    extract(archive, destination)

    # An absolute name lands inside, its leading slash dropped; the rest is not extracted.
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "in.tar",
        "out",
        "out/abs.txt",
        "out/logs",
        "out/logs/ok.txt",
    ]
