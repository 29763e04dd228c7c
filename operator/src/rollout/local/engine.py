"""Local mode's `environment.type: docker`: a trial's environment as a container of a
Docker-compatible engine on this machine.

The container plays a trial Pod's `environment` container (`rollout.controller.pod`): the task's
image with the shim as its command, in place of the image's ENTRYPOINT and CMD (the Pod's
`command` does the same), the task's resources as the engine's limits, and two host directories
bound in where the Pod mounts its emptyDirs: the shim's control directory at
`rollout.api.wire.shim.CONTROL_DIR` and /logs. The runner, a process beside it on the host, is
given those directories (`SandboxPaths`), so it drives the container as it drives a Pod's.

Binding host directories is why the engine must run on this machine: an engine elsewhere
(DOCKER_HOST `ssh://`, or `tcp://` to another host) would bind directories of its own machine.
Such engines are refused here; on a cluster, the bridge controller runs trials on one
(`environment.docker_host`). A `unix://` socket
and `tcp://` to a loopback address are this machine's. Podman's Docker-compatible API service is
an engine like Docker's.

Nothing secret goes into the container's env or labels: like the Pod's, the container has no
env of its own and labels that only name the job and trial. The runner hands the agent's env to
each command through the shim (`rollout_runner.shim_environment`), which drops it once read.

docker-py is synchronous: every call to the engine runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
import docker.types
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)
from tenacity.wait import wait_base

from rollout.api.errors import ErrorType
from rollout.api.names import LABEL_COMPONENT
from rollout.api.quantity import parse_quantity
from rollout.api.resources import RolloutTrialSpec
from rollout.api.trials import TrialKey, trial_labels, trial_resource_name
from rollout.api.wire.shim import CONTROL_DIR, shim_command
from rollout.local.engine_images import ImageCache, engine_error_text
from rollout.local.sandbox import Sandbox, SandboxPaths, SandboxStartFailed, SandboxUnavailable

log = logging.getLogger(__name__)

DEFAULT_ENGINE_ADDRESS = "unix:///var/run/docker.sock"
"""Where docker-py looks for an engine when DOCKER_HOST is not set."""
ENGINE_TIMEOUT_SEC = 60
"""How long one call to the engine may take (pulls and builds stream, and have no limit)."""
LOGS_DIR = "/logs"
LOCAL_ENVIRONMENT_COMPONENT = "local-environment"
"""The component label of every container local mode starts, so that
`docker ps --filter label=rollout.dev/component=local-environment` lists them."""
BIND_MODE = "rw,z"
"""Read-write, relabelled for the container where SELinux is enforcing (ignored elsewhere)."""
SHARED_DIR_MODE = 0o777
"""The control and logs directories are as open as a Pod's emptyDirs, so that a shim running as
a non-root image user can write them; the sandbox's own directory around them is 0700, so no
other user of this machine reaches them, and the runner closes the control directory to the
shim's user once the shim is ready."""


# --- The engine -------------------------------------------------------------------------------


def engine_address(environ: Mapping[str, str]) -> str:
    """The engine's address as docker-py reads it: DOCKER_HOST, else the default socket."""
    return environ.get("DOCKER_HOST") or DEFAULT_ENGINE_ADDRESS


def remote_engine_reason(address: str) -> str | None:
    """Why the engine at `address` cannot run local mode's containers (it is on another machine),
    or None when it is this machine's: a unix socket, a named pipe, or tcp to a loopback address.
    """
    scheme, _, rest = address.partition("://")
    if not rest:
        scheme, rest = "tcp", address  # docker-py reads a bare host:port as tcp
    scheme = scheme.lower()
    if scheme in ("unix", "npipe"):
        return None
    if scheme in ("tcp", "http", "https") and _is_loopback(urlsplit(f"tcp://{rest}").hostname):
        return None
    return (
        f"DOCKER_HOST is {address}, an engine on another machine: local mode binds this "
        "machine's directories into the trial's container, which a remote engine cannot do. "
        "A remote engine is for a cluster's bridge controller (environment.docker_host). Point "
        "DOCKER_HOST at "
        "this machine's engine (a unix:// socket, or tcp:// to 127.0.0.1), or use "
        "environment.type: local to run the trials on this host without an engine."
    )


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: another machine as far as anyone can tell without a lookup


def no_engine_message(address: str, reason: str) -> str:
    """What local mode says when no engine answers at `address`."""
    return (
        f"No container engine is reachable at {address} ({reason}). environment.type: docker "
        "with --local needs a Docker-compatible engine on this machine: start Docker, or "
        "Podman's API service (`podman system service --time=0 &`, then set DOCKER_HOST to the "
        "socket it serves, e.g. unix://$XDG_RUNTIME_DIR/podman/podman.sock). To run on this host "
        "without an engine, use environment.type: local."
    )


def connect_engine(
    environ: Mapping[str, str] | None = None, *, timeout_sec: int = ENGINE_TIMEOUT_SEC
) -> docker.DockerClient:
    """A client of this machine's engine (DOCKER_HOST and DOCKER_TLS_VERIFY/DOCKER_CERT_PATH
    of `environ`, os.environ by default), checked to answer.

    Raises SandboxUnavailable when DOCKER_HOST names another machine or no engine answers.
    Blocking: call it from a thread, or use `Engine.connect`.
    """
    environ = os.environ if environ is None else environ
    address = engine_address(environ)
    remote = remote_engine_reason(address)
    if remote is not None:
        raise SandboxUnavailable(remote)
    try:
        client = docker.from_env(environment=dict(environ), timeout=timeout_sec)
    except (docker.errors.DockerException, OSError) as err:
        raise SandboxUnavailable(no_engine_message(address, engine_error_text(err))) from None
    try:
        client.ping()
    except (docker.errors.DockerException, OSError) as err:
        client.close()
        raise SandboxUnavailable(no_engine_message(address, engine_error_text(err))) from None
    return client


def engine_unavailable(environ: Mapping[str, str] | None = None) -> str | None:
    """Why local mode cannot use an engine here (the SandboxUnavailable message), or None.

    Blocking (it pings the engine): call it from a thread.
    """
    try:
        connect_engine(environ).close()
    except SandboxUnavailable as err:
        return str(err)
    return None


class Engine:
    """One job's connection to the engine: its client and the images made ready on it."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.images = ImageCache(client)

    @classmethod
    async def connect(cls, environ: Mapping[str, str] | None = None) -> Engine:
        """`connect_engine` in a thread; raises SandboxUnavailable."""
        return cls(await asyncio.to_thread(connect_engine, environ))

    async def start(
        self, spec: RolloutTrialSpec, image: str, *, work_dir: Path | None = None
    ) -> EngineSandbox:
        """Start the trial's container from `image` (see `images.ensure`), with the shim as its
        first process; the runner then waits for the shim's ready file in `paths.control_dir`.

        The sandbox's directories go in a new 0700 directory under `work_dir` (the system's
        temporary directory by default). Raises SandboxStartFailed (environment_start_failed)
        when the engine cannot create or start the container; nothing is left behind then.
        """
        name = container_name(spec)
        base, paths = await asyncio.to_thread(_make_directories, name, work_dir)
        starting: asyncio.Future[str] | None = None
        try:
            request = container_request(spec, image, paths, name=name)
            starting = asyncio.ensure_future(asyncio.to_thread(self._create_and_start, request))
            container_id = await asyncio.shield(starting)
        except BaseException as err:
            if isinstance(err, asyncio.CancelledError) and starting is not None:
                # The engine goes on creating the container: wait for it and remove it, so
                # that no container outlives a start that was cancelled (Ctrl-C).
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(_remove_quietly, self.client, await starting)
            await asyncio.to_thread(shutil.rmtree, base, True)
            raise
        log.info("started container %s (%s) for the trial", name, container_id[:12])
        return EngineSandbox(self.client, container_id, name, paths, base)

    def _create_and_start(self, request: dict[str, Any]) -> str:
        try:
            return create_and_start(self.client, request)
        except (docker.errors.DockerException, OSError) as err:
            raise SandboxStartFailed(
                f"the container of image {request['image']} did not start: "
                f"{engine_error_text(err)}",
                ErrorType.ENVIRONMENT_START_FAILED,
            ) from None

    async def close(self) -> None:
        """Close the connection (containers are closed by their sandboxes)."""
        await asyncio.to_thread(self.client.close)


# --- The container ----------------------------------------------------------------------------

START_TRIES = 3
"""How many times a trial's container is made and started when the engine fails at it for a
reason of its own (`engine_fault`), as a kubelet starts a Pod's container again: Podman under
load, for one, answers a start with a 500 now and then (its OCI runtime's `write |1: broken
pipe`), and the next start succeeds."""
START_RETRY_WAIT = wait_exponential(multiplier=0.5, max=2)
"""Between tries: 0.5 s, then 1 s."""


def engine_fault(err: BaseException) -> bool:
    """Whether the engine failed for a reason of its own, which another try may not meet: a 5xx
    answer, or the connection to it failing. Its refusals (4xx: no such image, a bad request, a
    name in use) are final."""
    if isinstance(err, docker.errors.APIError):
        return bool(err.is_server_error())
    return isinstance(err, OSError)  # requests' connection errors and timeouts among them


def create_and_start(
    client: docker.DockerClient,
    request: dict[str, Any],
    prepare: Callable[[str], None] | None = None,
    *,
    wait: wait_base = START_RETRY_WAIT,
) -> str:
    """Make the container `request` describes (docker-py's `containers.create` arguments), let
    `prepare` do what must be done before it starts (given its id), start it, and return its id.
    A container that did not start is removed; an engine fault is tried again, `START_TRIES`
    times in all. Raises the engine's refusal, or its last fault (DockerException, OSError)."""

    def once() -> str:
        container = None
        try:
            container = client.containers.create(**request)
            if prepare is not None:
                prepare(str(container.id))
            container.start()
        except BaseException:
            if container is not None:
                _remove_quietly(client, container.id)
            raise
        return str(container.id)

    def tell(state: RetryCallState) -> None:
        failed = state.outcome.exception() if state.outcome else None
        log.warning(
            "the container of image %s did not start (%s); trying again",
            request.get("image"),
            engine_error_text(failed) if failed else "?",
        )

    retrying = Retrying(
        stop=stop_after_attempt(START_TRIES),
        wait=wait,
        retry=retry_if_exception(engine_fault),
        before_sleep=tell,
        reraise=True,
    )
    return retrying(once)


def container_name(spec: RolloutTrialSpec) -> str:
    """The trial's resource name and a random suffix: readable, and new for every start (a kept
    environment of an earlier run of the same trial keeps its name)."""
    trial = trial_resource_name(
        spec.job_name, spec.agent.name, spec.dataset_name, spec.task_name, spec.attempt
    )
    return f"{trial}-{secrets.token_hex(3)}"


def container_request(
    spec: RolloutTrialSpec, image: str, paths: SandboxPaths, *, name: str
) -> dict[str, Any]:
    """The keyword arguments of docker-py's `containers.create` for the trial's container.

    As the Pod's environment container: the shim as the entrypoint with no command (so neither
    the image's ENTRYPOINT nor its CMD wraps or follows it), the image's WORKDIR unless the task
    names one, the task's cpus and memory as limits (no swap beyond the memory, as a Pod has
    none) and its GPUs when it asks for any, no env, no privileges, no init process (the shim is
    PID 1 and reaps what it starts) and the engine's default network. Storage is not limited:
    engines can do so only on some storage drivers.
    """
    key = TrialKey(spec.agent.name, spec.dataset_name, spec.task_name, spec.attempt)
    trial = trial_resource_name(
        spec.job_name, spec.agent.name, spec.dataset_name, spec.task_name, spec.attempt
    )
    labels = trial_labels(spec.job_name, key, trial)
    labels[LABEL_COMPONENT] = LOCAL_ENVIRONMENT_COMPONENT
    return {
        **container_settings(spec, image, name=name),
        "entrypoint": shim_command(CONTROL_DIR),
        "labels": labels,
        "volumes": {
            str(paths.control_dir): {"bind": CONTROL_DIR, "mode": BIND_MODE},
            str(paths.logs_dir): {"bind": LOGS_DIR, "mode": BIND_MODE},
        },
    }


def container_settings(spec: RolloutTrialSpec, image: str, *, name: str) -> dict[str, Any]:
    """What every trial container of an engine has, whatever its first process (local mode's
    shim, the bridge's keep-alive): the image, the task's resources and working directory, and
    nothing more (no env, no privileges, no init process)."""
    memory = _whole(parse_quantity(spec.resources.memory))
    request: dict[str, Any] = {
        "image": image,
        "name": name,
        "nano_cpus": _whole(parse_quantity(spec.resources.cpus) * 1_000_000_000),
        "mem_limit": memory,
        "memswap_limit": memory,
        "init": False,
        "privileged": False,
        "stdin_open": False,
        "tty": False,
    }
    if spec.workdir:
        request["working_dir"] = spec.workdir
    if spec.resources.gpus > 0:
        request["device_requests"] = [
            docker.types.DeviceRequest(count=spec.resources.gpus, capabilities=[["gpu"]])
        ]
    return request


def _whole(amount: Decimal) -> int:
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


class EngineSandbox(Sandbox):
    """One trial's container, with the shim as its first process."""

    def __init__(
        self,
        client: docker.DockerClient,
        container_id: str,
        name: str,
        paths: SandboxPaths,
        base_dir: Path,
    ) -> None:
        self.client = client
        self.container_id = container_id
        self.name = name
        self.paths = paths
        self.base_dir = base_dir
        self._closed = False

    def describe(self) -> str:
        return (
            f"container {self.name} ({self.container_id[:12]}); "
            f"open a shell in it with `docker exec -it {self.name} sh`"
        )

    async def close(self, *, keep: bool = False) -> None:
        """Remove the container and the sandbox's directories; with `keep`, leave both.

        The container is killed, not stopped: its PID 1 is the shim, a shell that ignores TERM
        (PID 1 gets no default signal handling), so a stop would only wait before killing it,
        and by now the runner has ended every command the trial ran. Errors are logged, not
        raised; a container already gone is fine.
        """
        if self._closed:
            return
        self._closed = True
        if keep:
            log.info("keeping the environment: %s", self.describe())
            return
        await asyncio.to_thread(_remove_quietly, self.client, self.container_id)
        await asyncio.to_thread(_remove_tree_quietly, self.base_dir)


def _make_directories(name: str, work_dir: Path | None) -> tuple[Path, SandboxPaths]:
    """A new 0700 directory holding the sandbox's control and logs directories."""
    base = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work_dir))
    paths = SandboxPaths(control_dir=base / "control", logs_dir=base / "logs")
    for directory in (paths.control_dir, paths.logs_dir):
        directory.mkdir()
        directory.chmod(SHARED_DIR_MODE)
    return base, paths


def _remove_quietly(client: docker.DockerClient, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except (docker.errors.DockerException, OSError) as err:
        log.warning("could not remove container %s: %s", container_id[:12], engine_error_text(err))


def _remove_tree_quietly(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        # Files the container's users made may belong to other uids (a rootful engine), which
        # this process may not remove: they stay in the temporary directory.
        log.warning("could not remove all of %s", path)
