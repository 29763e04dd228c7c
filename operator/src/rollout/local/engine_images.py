"""The images of a local job's engine trials: a task's `docker_image` pulled, or its
environment/Dockerfile built, once per job however many trials use it.

A job runs each task several times (attempts, agents) and often many trials at once, so every
image has its own lock and is remembered once ready: the first trial pulls or builds it, the
others wait for that and then start at once. An image the engine already has is never pulled
again (a pull is never forced, as a trial Pod's `IfNotPresent`), and a build is skipped when the
engine has its tag, which is the content hash of environment/
(`rollout.api.images.environment_image_tag`): the same files always give the same tag, so the
tag present means the image built from these files is present. `force_build` builds anyway, once
per job.

A failed build is remembered too: a Dockerfile that fails fails the same way for the next trial,
which gets the same error instead of another build. A failed pull is not (a registry or network
outage may pass), so the next trial tries again.

docker-py is synchronous: every call to the engine runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
import docker.errors

from rollout.api.errors import ErrorType
from rollout.api.images import environment_image_tag
from rollout.api.task import EnvironmentConfig
from rollout.api.taskdir import DOCKERFILE
from rollout.local.sandbox import SandboxStartFailed

log = logging.getLogger(__name__)

BUILD_LOG_TAIL_LINES = 30
"""How much of a failed build's output its error message keeps (its end: where it failed)."""


class ImageCache:
    """The images one job's trials run in, made ready on the engine once each."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._locks: dict[str, asyncio.Lock] = {}
        self._ready: set[str] = set()
        self._failed: dict[str, SandboxStartFailed] = {}

    async def ensure(
        self,
        task_dir: Path,
        environment: EnvironmentConfig,
        *,
        force_build: bool,
        build_timeout_sec: float | None = None,
    ) -> str:
        """The image a trial of the task in `task_dir` runs in, present on the engine.

        `environment.docker_image` when set and the job does not force builds (pulled if the
        engine lacks it); otherwise the task's environment/Dockerfile, built under its content
        hash's tag. `build_timeout_sec` defaults to the task's own `build_timeout_sec` (pass the
        job's effective one). Raises SandboxStartFailed with the seed's error type:
        environment_image_pull_failed, environment_build_failed or environment_build_timeout.
        """
        if environment.docker_image and not force_build:
            return await self.ensure_pulled(environment.docker_image)
        timeout = environment.build_timeout_sec if build_timeout_sec is None else build_timeout_sec
        return await self.ensure_built(
            Path(task_dir) / "environment", force_build=force_build, timeout_sec=timeout
        )

    async def ensure_pulled(self, reference: str) -> str:
        """`reference`, pulled unless the engine already has it."""
        async with self._lock(reference):
            if reference not in self._ready:
                await asyncio.to_thread(self._pull_if_absent, reference)
                self._ready.add(reference)
        return reference

    async def ensure_built(
        self, environment_dir: Path, *, force_build: bool, timeout_sec: float
    ) -> str:
        """The tag of the image built from `environment_dir`; built unless the engine has it
        (or, with `force_build`, unless this job built it already)."""
        if not await asyncio.to_thread((environment_dir / DOCKERFILE).is_file):
            raise SandboxStartFailed(
                f"{environment_dir} has no {DOCKERFILE} to build the task's image from: add one, "
                "or set environment.docker_image in the task's task.toml to a pre-built image"
                + (" and unset force_build in the job" if force_build else ""),
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            )
        tag = await asyncio.to_thread(environment_image_tag, environment_dir)
        async with self._lock(tag):
            if tag in self._failed:
                raise self._failed[tag]
            if tag in self._ready:
                return tag
            if force_build or not await asyncio.to_thread(self._has_image, tag):
                log.info("building %s from %s", tag, environment_dir)
                try:
                    await asyncio.wait_for(
                        asyncio.to_thread(self._build, environment_dir, tag), timeout_sec
                    )
                except TimeoutError:
                    # The engine goes on with the build (the API cannot cancel it); the tag,
                    # once there, serves a later job.
                    self._failed[tag] = SandboxStartFailed(
                        f"building the image of {environment_dir} took longer than "
                        f"{timeout_sec:g}s (environment.build_timeout_sec)",
                        ErrorType.ENVIRONMENT_BUILD_TIMEOUT,
                    )
                    raise self._failed[tag] from None
                except SandboxStartFailed as err:
                    self._failed[tag] = err
                    raise
            self._ready.add(tag)
        return tag

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _has_image(self, reference: str) -> bool:
        try:
            self.client.images.get(reference)
        except docker.errors.ImageNotFound:
            return False
        return True

    def _pull_if_absent(self, reference: str) -> None:
        try:
            if self._has_image(reference):
                return
            log.info("pulling %s", reference)
            self.client.images.pull(reference)
        except (docker.errors.DockerException, OSError) as err:
            raise SandboxStartFailed(
                f"the image {reference} (environment.docker_image) could not be pulled: "
                f"{engine_error_text(err)}",
                ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
            ) from None

    def _build(self, environment_dir: Path, tag: str) -> None:
        try:
            self.client.images.build(
                path=str(environment_dir),
                dockerfile=DOCKERFILE,
                tag=tag,
                rm=True,
                forcerm=True,
            )
        except docker.errors.BuildError as err:
            tail = build_log_tail(err.build_log)
            raise SandboxStartFailed(
                f"the image build of {environment_dir} failed: {err.msg}"
                + (f"\n{tail}" if tail else ""),
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            ) from None
        except (docker.errors.DockerException, OSError) as err:
            raise SandboxStartFailed(
                f"the image build of {environment_dir} failed: {engine_error_text(err)}",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            ) from None


def build_log_tail(build_log: Iterable[dict[str, Any]], lines: int = BUILD_LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a build's output, as the engine streamed it."""
    text = "".join(
        str(chunk.get("stream") or chunk.get("error") or "")
        for chunk in build_log
        if isinstance(chunk, dict)
    )
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def engine_error_text(err: BaseException) -> str:
    """What the engine said, without docker-py's HTTP framing where it gives the reason alone."""
    if isinstance(err, docker.errors.APIError) and err.explanation:
        return str(err.explanation)
    return str(err) or type(err).__name__
