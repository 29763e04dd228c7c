"""The `docker` provider: each trial's sandbox is a container of a remote Docker engine.

The bridge reaches the engine at the trial's `docker_host` (`tcp://` with the TLS settings of
docker-py's DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, or `ssh://` through an `ssh` client) and
nothing of its own machine is bound into the container: unlike local mode's engine sandbox there
is no shim and no shared directory. The container's first process only keeps it alive
(`KEEP_ALIVE`); every `Environment` operation is a call to the Engine API
(`docker_sandbox.DockerSandbox`). The image is pulled, or built from the task's environment/,
once per job (local mode's `ImageCache`).

docker-py is synchronous: every call to the engine runs in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import shutil
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import docker
import docker.constants
import docker.errors
import docker.utils

from rollout.api.environment import DOCKER_HOST_PATTERN
from rollout.api.errors import ErrorType
from rollout.api.names import LABEL_COMPONENT
from rollout.api.resources import LABEL_TRIAL
from rollout.api.trials import child_name, label_value
from rollout.bridge.providers.base import (
    BRIDGE_COMPONENT,
    LABEL_BRIDGE,
    LABEL_NAMESPACE,
    LABEL_PRESERVED,
    OwnedSandbox,
    Provider,
    ProviderError,
    SandboxRequest,
)
from rollout.bridge.providers.docker_sandbox import (
    KILL_GRACE_SEC,
    DockerSandbox,
    remove_container,
    skeleton,
)
from rollout.local.engine import ENGINE_TIMEOUT_SEC, container_settings, create_and_start
from rollout.local.engine_images import ImageCache, engine_error_text
from rollout.local.sandbox import SandboxStartFailed

log = logging.getLogger(__name__)

KEEP_ALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
"""The container's first process: a shell that sleeps until the container is stopped. As PID 1
it gets no default signal handling, hence the trap: `docker stop` ends it at once. It needs only
sh and sleep (busybox has both)."""
MAX_JOBS_REMEMBERED = 32
"""Jobs whose images the provider remembers (each job's trials share one `ImageCache`)."""
CONNECTION_POOL_SIZE = 32
"""Connections kept to the engine: trials poll their commands at once."""

_RESOURCE_REFUSAL = re.compile(
    r"insufficient|not enough|cpus? available|only \d+ cpus|minimum memory|memory limit"
    r"|could not select device driver|no space left|cannot allocate memory|out of memory",
    re.IGNORECASE,
)
"""What an engine says when it cannot give a container the resources it asks for."""


# --- The engine -------------------------------------------------------------------------------


def check_address(address: str) -> bool:
    """Whether `address` is `tcp://HOST:PORT` or `ssh://USER@HOST[:PORT]` (with or without a
    user and port, as DockerHost accepts them); True for ssh."""
    if not re.match(DOCKER_HOST_PATTERN, address):
        raise ProviderError(
            f"{address!r} is no remote Docker engine address: tcp://HOST:PORT or "
            "ssh://USER@HOST[:PORT]"
        )
    return address.startswith("ssh://")


def engine_environment(address: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What docker-py reads to reach `address`: DOCKER_HOST, and TLS from `environ`'s
    DOCKER_TLS_VERIFY and DOCKER_CERT_PATH (nothing else of the bridge's environment)."""
    environment = {"DOCKER_HOST": address}
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        if name in environ:
            environment[name] = environ[name]
    return environment


def connect_remote(address: str, environ: Mapping[str, str]) -> docker.DockerClient:
    """A client of the engine at `address`, checked to answer. Blocking.

    Raises ProviderError (environment_start_failed) naming the address when the address is no
    remote engine's, when an `ssh://` engine needs an ssh client the bridge lacks, or when no
    engine answers.
    """
    over_ssh = check_address(address)
    if over_ssh and shutil.which("ssh") is None:
        raise ProviderError(
            f"the Docker engine {address} is reached over ssh, but the bridge has no ssh "
            "client: use tcp:// with TLS, or a bridge image with ssh"
        )
    client = None
    try:
        # docker-py's own reading of DOCKER_HOST, DOCKER_TLS_VERIFY and DOCKER_CERT_PATH.
        settings = docker.utils.kwargs_from_env(environment=engine_environment(address, environ))
        common = {"timeout": ENGINE_TIMEOUT_SEC, "use_ssh_client": over_ssh, **settings}
        version = _engine_version(common)
        client = docker.DockerClient(version=version, max_pool_size=CONNECTION_POOL_SIZE, **common)
        _ignore_environment(client.api)
        client.ping()
    except (docker.errors.DockerException, OSError) as err:
        if client is not None:
            client.close()
        raise ProviderError(
            f"no Docker engine answers at {address}: {engine_error_text(err)}"
        ) from None
    return client


def _engine_version(settings: Mapping[str, Any]) -> str:
    """The engine's API version, asked as docker-py's `version="auto"` asks it, but by a client
    that reads nothing of the process's environment (`_ignore_environment`). Blocking."""
    probe = docker.APIClient(version=docker.constants.MINIMUM_DOCKER_API_VERSION, **settings)
    try:
        _ignore_environment(probe)
        return str(probe.version(api_version=False)["ApiVersion"])
    finally:
        probe.close()


def _ignore_environment(api: docker.APIClient) -> None:
    """Let the engine's connection be only what its settings say. requests (under docker-py)
    otherwise lets REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE replace the engine's own CA
    (DOCKER_CERT_PATH/ca.pem), which then refuses the engine's certificate, and sends the
    engine's requests through HTTP(S)_PROXY."""
    api.trust_env = False


def start_error_type(err: BaseException) -> ErrorType:
    """The error type of a container the engine would not create or start: resource
    allocation when it cannot give the resources asked for, else a start failure."""
    text = engine_error_text(err)
    if _RESOURCE_REFUSAL.search(text):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    return ErrorType.ENVIRONMENT_START_FAILED


# --- The provider -----------------------------------------------------------------------------


class DockerProvider(Provider):
    """Trials' containers on one remote engine."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient,
        address: str,
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
    ) -> None:
        self.client = client
        self.address = address
        self.kill_grace_sec = kill_grace_sec
        self._images: OrderedDict[tuple[str, str], ImageCache] = OrderedDict()

    @classmethod
    async def connect(
        cls,
        address: str,
        environ: Mapping[str, str],
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
    ) -> DockerProvider:
        """`connect_remote` in a thread; raises ProviderError."""
        client = await asyncio.to_thread(connect_remote, address, environ)
        return cls(client, address, kill_grace_sec=kill_grace_sec)

    async def start(self, request: SandboxRequest) -> DockerSandbox:
        image = await self._image(request)
        name = container_name(request.namespace, request.trial_name)
        create = sandbox_request(request, image, name)
        starting = asyncio.ensure_future(asyncio.to_thread(self._create_and_start, create))
        try:
            container_id = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # The engine goes on creating the container: remove it once it is there, so that
            # no container outlives a start that was cancelled.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(remove_container, self.client, await starting)
            raise
        log.info("started container %s (%s) on %s", name, container_id[:12], self.address)
        return DockerSandbox(
            self.client, container_id, name, self.address, kill_grace_sec=self.kill_grace_sec
        )

    async def _image(self, request: SandboxRequest) -> str:
        """The trial's image on the engine: pulled unless present, or built from the task."""
        spec = request.spec
        images = self._images_of(request.namespace, spec.job_name)
        builds = spec.builds_image
        if builds and request.task_dir is None:
            raise ProviderError(
                "the trial's image must be built, but the bridge has no task files",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            )
        try:
            if request.task_dir is None or not builds:
                return await images.ensure_pulled(spec.image)
            return await images.ensure_built(
                request.task_dir / "environment",
                force_build=spec.force_build,
                timeout_sec=spec.timeouts.build_sec,
            )
        except SandboxStartFailed as err:  # local mode's image cache fails as its sandboxes do
            raise ProviderError(err.message, err.error_type) from None

    def _images_of(self, namespace: str, job_name: str) -> ImageCache:
        """The image cache of a job: its trials pull or build each image once, and a failed
        build fails the job's later trials alike (as in local mode) but not another job's."""
        key = (namespace, job_name)
        images = self._images.pop(key, None) or ImageCache(self.client)
        self._images[key] = images
        while len(self._images) > MAX_JOBS_REMEMBERED:
            self._images.popitem(last=False)
        return images

    def _create_and_start(self, create: dict[str, Any]) -> str:
        def prepare(container_id: str) -> None:
            self.client.api.put_archive(container_id, "/", skeleton())

        try:
            return create_and_start(self.client, create, prepare)
        except (docker.errors.DockerException, OSError) as err:
            raise ProviderError(
                f"the container of image {create['image']} did not start on {self.address}: "
                f"{engine_error_text(err)}",
                start_error_type(err),
            ) from None

    async def owned(self, bridge: str) -> list[OwnedSandbox]:
        filters = {
            "label": [
                f"{LABEL_BRIDGE}={label_value(bridge)}",
                f"{LABEL_COMPONENT}={BRIDGE_COMPONENT}",
            ]
        }
        try:
            rows = await asyncio.to_thread(self.client.api.containers, all=True, filters=filters)
        except (docker.errors.DockerException, OSError) as err:
            raise ProviderError(
                f"cannot list the containers on {self.address}: {engine_error_text(err)}"
            ) from None
        return [
            OwnedSandbox(
                sandbox_id=str(row["Id"]),
                namespace=labels.get(LABEL_NAMESPACE, ""),
                trial_name=labels.get(LABEL_TRIAL, ""),
                preserved=labels.get(LABEL_PRESERVED) == "true",
            )
            for row in rows
            for labels in [row.get("Labels") or {}]
        ]

    async def terminate(self, sandbox_id: str) -> None:
        try:
            await asyncio.to_thread(remove_container, self.client, sandbox_id)
        except (docker.errors.DockerException, OSError) as err:
            raise ProviderError(
                f"cannot remove container {sandbox_id[:12]} on {self.address}: "
                f"{engine_error_text(err)}"
            ) from None

    async def aclose(self) -> None:
        await asyncio.to_thread(self.client.close)


def container_name(namespace: str, trial_name: str) -> str:
    """`<namespace>-<trial>-<random>`: readable, new for every start (a kept container of an
    earlier start of the trial keeps its name), a DNS label (so a valid container name) of at
    most 63 characters, shortened with a hash of the full name when long."""
    return child_name(f"{namespace}-{trial_name}", secrets.token_hex(3))


def sandbox_request(request: SandboxRequest, image: str, name: str) -> dict[str, Any]:
    """docker-py's `containers.create` arguments for the trial's container.

    Local mode's container settings (`rollout.local.engine.container_settings`: the task's cpus
    and memory as limits, its GPUs, its workdir, no env, no privileges) with `KEEP_ALIVE` as its
    only process instead of the shim, nothing bound in, and the trial's labels. Storage is not
    limited: engines can do so only on some storage drivers.
    """
    return {
        **container_settings(request.spec, image, name=name),
        "entrypoint": KEEP_ALIVE,
        "labels": dict(request.labels),
    }
