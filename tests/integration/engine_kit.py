"""A real Docker-compatible engine for tests: the one DOCKER_HOST (or the default socket) names
when it answers; otherwise, when Podman is installed, its API service started here on a socket of
the test session's own, with its own image store. Without either, `test_engine` skips and says
why. Nothing is downloaded: the test image is a root filesystem made of this machine's busybox
and bash (and the libraries they need), imported into the engine; Dockerfiles start FROM it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import resource
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import pytest

from rollout.local.engine import connect_engine
from rollout.local.sandbox import SandboxUnavailable

READY_TIMEOUT_SEC = 60.0
SERVICE_START_SEC = 30.0


# --- The engine -------------------------------------------------------------------------------


@dataclass
class EngineUnderTest:
    environ: dict[str, str]
    image: str
    """A tiny image of busybox, in the engine's store."""
    built: list[str] = field(default_factory=list)
    """Tags the tests built, removed at the end from an engine the tests did not start."""


def _busybox_rootfs_tar() -> bytes:
    """A root filesystem with this machine's busybox and its applets, bash (the runner runs the
    agent's scripts and the verifier with it), and the libraries they need."""
    busybox = shutil.which("busybox")
    bash = shutil.which("bash")
    if busybox is None or bash is None:
        pytest.skip("busybox or bash is missing: the engine tests make their image from them")
    busybox, bash = os.path.realpath(busybox), os.path.realpath(bash)
    libraries = sorted(
        {
            library
            for binary in (busybox, bash)
            for library in re.findall(
                r"(/\S+)", subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
            )
        }
    )
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add_dir(name: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for directory in ("bin", "etc", "tmp", "root", "proc", "sys", "dev"):
            add_dir(directory)
        add_file("bin/busybox", Path(busybox).read_bytes(), 0o755)
        add_file("bin/bash", Path(bash).read_bytes(), 0o755)
        for applet in applets.stdout.split():
            if applet not in ("busybox", "bash"):
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        for library in libraries:
            if os.path.isfile(library):
                parts = Path(library).parts[1:]
                for depth in range(1, len(parts)):
                    name = "/".join(parts[:depth])
                    if name not in tar.getnames():
                        add_dir(name)
                add_file("/".join(parts), Path(library).read_bytes(), 0o755)
        add_file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        add_file("etc/group", b"root:x:0:\n")
    return buffer.getvalue()


def _podman_service(tmp: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Podman's API service on a socket in `tmp`, with an image store of its own there."""
    socket_path = tmp / "podman.sock"
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 1_048_576 if nofile == resource.RLIM_INFINITY else nofile
    # Limits no higher than this process's: raising them needs CAP_SYS_RESOURCE, which a test
    # container often lacks. runc where installed: crun refuses hybrid cgroup hierarchies.
    conf = [
        "[containers]",
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]',
    ]
    if shutil.which("runc"):
        conf += ["[engine]", 'runtime = "runc"']
    (tmp / "containers.conf").write_text("\n".join(conf) + "\n")
    (tmp / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{tmp}/storage"\nrunroot = "{tmp}/run"\n'
    )
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(tmp / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(tmp / "storage.conf"),
    }
    log = (tmp / "service.log").open("wb")
    process = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    environ = {"DOCKER_HOST": f"unix://{socket_path}"}
    deadline = time.monotonic() + SERVICE_START_SEC
    while time.monotonic() < deadline and process.poll() is None:
        if socket_path.exists() and _answers(socket_path):
            return process, environ
        time.sleep(0.1)
    process.terminate()
    process.wait(10)
    pytest.skip(
        "podman's API service did not start: "
        + (tmp / "service.log").read_text(errors="replace")[-2000:]
    )


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _run_once(client: docker.DockerClient, image: str) -> None:
    """Run `true` in the image and remove it. Not `containers.run`: it reads the container's
    logs, which Podman's API service now and then never answers for a container that exited
    at once (seen here: the read timed out after 60 s, and every engine test errored)."""
    container = client.containers.create(image, ["true"])
    try:
        container.start()
        status = container.wait(timeout=60)["StatusCode"]
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)
    if status != 0:
        raise docker.errors.DockerException(f"`true` exited with {status} in {image}")


@contextlib.contextmanager
def engine_under_test(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineUnderTest]:
    """A reachable engine with the test image in it, or a skip that says why there is none
    (conftest's session fixture `test_engine`)."""
    service: subprocess.Popen[bytes] | None = None
    try:
        environ = dict(os.environ)
        connect_engine(environ).close()
    except SandboxUnavailable as err:
        if shutil.which("podman") is None:
            pytest.skip(f"no container engine: {err}; and podman is not installed")
        service, environ = _podman_service(tmp_path_factory.mktemp("podman"))
    try:
        client = connect_engine(environ)
        image = f"localhost/rollout-engine-test:{secrets.token_hex(4)}"
        try:
            repository, tag = image.rsplit(":", 1)
            answer = client.api.import_image_from_data(
                _busybox_rootfs_tar(), repository=repository, tag=tag
            )
            # Podman 4 tags an import :latest whatever the tag asked: tag its id as well.
            client.api.tag(re.findall(r"sha256:[0-9a-f]{64}", answer)[-1], repository, tag)
            _run_once(client, image)
        except docker.errors.DockerException as err:
            pytest.skip(f"the engine at {environ.get('DOCKER_HOST')} cannot run a container: {err}")
        under_test = EngineUnderTest(environ, image)
        yield under_test
        if service is None:  # a shared engine: leave it as it was
            for made in [*under_test.built, image]:
                with contextlib.suppress(docker.errors.DockerException):
                    client.images.remove(made, force=True)
        client.close()
    finally:
        if service is not None:
            service.terminate()
            service.wait(30)
            # Podman's overlay driver mounts its layer directory over itself (as root).
            layers = Path(environ["DOCKER_HOST"].removeprefix("unix://")).parent / "storage/overlay"
            if layers.is_dir():  # (os.path.ismount cannot tell a bind mount onto itself)
                subprocess.run(["umount", str(layers)], check=False, capture_output=True)
