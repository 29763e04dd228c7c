"""The reconciler of one RolloutImage: look the image up in the registry, build it when it is
missing, record what became of it.

It runs as a kopf daemon for each RolloutImage that has not finished (`handlers`), and returns
once the image is Ready or Failed; kopf then drops the finalizer it keeps on the object while a
daemon serves it, so a finished image (the cache's record) can be deleted without an operator.

Each pass looks at the image's status and acts:

- **Pending** (new): unless the image is forced (a job's force_build), ask the registry for the
  image's manifest (a HEAD, `registry`): found, it is Ready at once (`CacheHit`), with the digest
  the registry gave; a registry that cannot be asked fails it (`RegistryUnavailable`). Else a
  build Pod is made (`build_pod`) and the image is Building.
- **Building**: the build Pod is read (a GET every `build_poll_sec`: builds are few and long, so
  the operator watches no build Pods) and classified (`buildstatus`): built, it is Ready
  (`Built`, the pushed digest, how long, where the log is); failed, Failed with the end of the
  build log; a Pod taken away is replaced, `MAX_ATTEMPTS` times in all.

The build Pod goes once the image has finished (its log is in storage). Every step can be taken
again: the Pod's name is the image's and the attempt's, and a create that finds it made accepts
it, so an operator stopped at any moment and started again neither builds twice nor loses a
build.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from rollout.api.imageref import parse_image_reference
from rollout.api.resources import (
    Condition,
    ConditionStatus,
    ImagePhase,
    ImageReason,
    RolloutImageSpec,
    RolloutImageStatus,
)
from rollout.api.resources.image_resource import IMAGE_READY
from rollout.controller.build_pod import DEADLINE_MARGIN_SEC, build_pod_name, render_build_pod
from rollout.controller.buildstatus import (
    BuildFailed,
    BuildLost,
    BuildSucceeded,
    BuildVerdict,
    BuildWaiting,
    classify_build_pod,
)
from rollout.controller.index import newer
from rollout.controller.registry import RegistryClient, RegistryError
from rollout.controller.runtime import Runtime

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
"""Build Pods made for one image at most: a Pod taken away (evicted, its node lost) is
replaced, twice."""
ERROR_BACKOFF_SEC = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Pauses after a pass that failed (the API or storage did not answer), longer each time."""

PostWarning = Callable[[str, str], None]


class ImageReconciler:
    """Drives one RolloutImage (see the module docstring)."""

    def __init__(
        self, runtime: Runtime, body: Mapping[str, Any], *, post_warning: PostWarning
    ) -> None:
        metadata = body["metadata"]
        self.runtime = runtime
        self.body = body  # kopf's live view of the object
        self.namespace = str(metadata["namespace"])
        self.name = str(metadata["name"])
        self.where = f"RolloutImage {self.namespace}/{self.name}"
        self.post_warning = post_warning
        self._written: tuple[str, RolloutImageStatus] | None = None
        self._failures = 0

    async def run(self, stopped: kopf.DaemonStopped) -> None:
        """Reconcile until the image has finished or the operator stops."""
        while not stopped:
            try:
                delay = await self.step(datetime.now(UTC))
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the API or the registry did not answer: again, later
                delay = ERROR_BACKOFF_SEC[min(self._failures, len(ERROR_BACKOFF_SEC) - 1)]
                self._failures += 1
                log.warning("%s: reconcile failed, retrying in %.0f s: %r", self.where, delay, err)
            else:
                self._failures = 0
            if delay is None:
                return
            await stopped.wait(delay)

    # --- one pass

    async def step(self, now: datetime) -> float | None:
        """One look and what it calls for; when to look again (None: never, it has finished)."""
        status = self.status()
        if status.finished:
            return None
        try:
            spec = RolloutImageSpec.model_validate(self.body.get("spec"))
        except ValidationError as err:
            await self._finish(
                status, ImageReason.BUILD_NOT_RUN, f"Its spec is not valid: {err}", now
            )
            return None
        if status.phase in (None, ImagePhase.PENDING) or status.pod_name is None:
            return await self._start(spec, status, now)
        pod = await self.runtime.api.get_pod(self.namespace, status.pod_name)
        verdict: BuildVerdict = (
            BuildLost(f"The build Pod {status.pod_name} no longer exists.")
            if pod is None
            else classify_build_pod(pod, spec=spec, now=now, config=self.runtime.config)
        )
        if isinstance(verdict, BuildWaiting) and _overdue(spec, status, now):
            verdict = BuildFailed(
                ImageReason.BUILD_TIMEOUT,
                f"The build did not report within its timeout of {spec.timeout_seconds} s and "
                f"{DEADLINE_MARGIN_SEC} s more (its Pod: {verdict.reason or 'waiting'}).",
            )
        match verdict:
            case BuildWaiting():
                return self.runtime.config.build_poll_sec
            case BuildSucceeded(digest=digest, report=report):
                await self._ready(status, ImageReason.BUILT, digest, now, log_uri=report.log_uri)
            case BuildFailed(reason=reason, message=message, report=report):
                log_uri = report.log_uri if report is not None else None
                await self._finish(status, reason, message, now, log_uri=log_uri)
            case BuildLost(message=message):
                if status.attempts < MAX_ATTEMPTS:
                    log.info("%s: %s Building again.", self.where, message)
                    if pod is not None:
                        await self.runtime.api.delete_pod(self.namespace, status.pod_name)
                    return await self._build(spec, status, now)
                await self._finish(
                    status,
                    ImageReason.BUILD_NOT_RUN,
                    f"{message} The build Pod was lost {status.attempts} times.",
                    now,
                )
        await self.runtime.api.delete_pod(self.namespace, status.pod_name)
        return None

    async def _start(
        self, spec: RolloutImageSpec, status: RolloutImageStatus, now: datetime
    ) -> float | None:
        """A new image: found in the registry, or built."""
        if not spec.force_build:
            try:
                digest = await self._look_up(spec)
            except RegistryError as err:
                await self._finish(status, ImageReason.REGISTRY_UNAVAILABLE, str(err), now)
                return None
            except ValueError as err:  # spec.image is no image reference (written by hand?)
                await self._finish(status, ImageReason.BUILD_NOT_RUN, str(err), now)
                return None
            if digest is not None:
                await self._ready(status, ImageReason.CACHE_HIT, digest, now)
                return None
        return await self._build(spec, status, now)

    async def _look_up(self, spec: RolloutImageSpec) -> str | None:
        reference = parse_image_reference(spec.image)

        def look_up() -> str | None:
            with RegistryClient(self.runtime.registry_config, plain_http=spec.plain_http) as client:
                return client.manifest_digest(reference)

        return await asyncio.to_thread(look_up)

    async def _build(
        self, spec: RolloutImageSpec, status: RolloutImageStatus, now: datetime
    ) -> float:
        """Make the next attempt's build Pod (an existing one is accepted) and say Building."""
        attempt = status.attempts + 1
        pod = render_build_pod(self.body, config=self.runtime.config, attempt=attempt)
        created = await self.runtime.api.create_pod(self.namespace, pod)
        name = build_pod_name(self.name, attempt)
        if created:
            log.info("%s: building %s in Pod %s", self.where, spec.image, name)
        await self._write(
            RolloutImageStatus(
                phase=ImagePhase.BUILDING,
                reason=ImageReason.BUILDING,
                message=f"Building {spec.image} in Pod {name}.",
                pod_name=name,
                attempts=attempt,
                started_at=status.started_at or now.replace(microsecond=0),
                conditions=[
                    _ready_condition(
                        ConditionStatus.FALSE, ImageReason.BUILDING, f"Pod {name} builds it.", now
                    )
                ],
            )
        )
        return self.runtime.config.build_poll_sec

    # --- its status

    def status(self) -> RolloutImageStatus:
        """The image's status: the watch's, or this reconciler's own newer write."""
        metadata = self.body.get("metadata") or {}
        seen = str(metadata.get("resourceVersion") or "")
        if self._written is not None and (not seen or not newer(seen, self._written[0])):
            return self._written[1]
        try:
            return RolloutImageStatus.model_validate(self.body.get("status") or {})
        except ValidationError:
            return RolloutImageStatus()  # a garbled status: start over (every step repeats)

    async def _ready(
        self,
        status: RolloutImageStatus,
        reason: ImageReason,
        digest: str,
        now: datetime,
        *,
        log_uri: str | None = None,
    ) -> None:
        said = "found in the registry" if reason is ImageReason.CACHE_HIT else "built"
        log.info("%s: %s (%s)", self.where, said, digest)
        await self._write(
            _ended(
                status,
                ImagePhase.READY,
                reason,
                f"The image was {said}: {digest}.",
                now,
                digest=digest,
                log_uri=log_uri,
            )
        )

    async def _finish(
        self,
        status: RolloutImageStatus,
        reason: ImageReason,
        message: str,
        now: datetime,
        *,
        log_uri: str | None = None,
    ) -> None:
        log.warning("%s: %s: %s", self.where, reason.value, message)
        self.post_warning(reason.value, message)
        await self._write(_ended(status, ImagePhase.FAILED, reason, message, now, log_uri=log_uri))

    async def _write(self, status: RolloutImageStatus) -> None:
        patch = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        patched = await self.runtime.api.patch_image_status(self.namespace, self.name, patch)
        if patched is not None:
            version = str((patched.get("metadata") or {}).get("resourceVersion") or "")
            self._written = (version, status)
        if status.finished:
            metrics = self.runtime.metrics
            phase, reason = status.phase or "", status.reason or ""
            metrics.images_finished.labels(phase=phase, reason=reason).inc()
            if status.attempts and status.duration_seconds is not None:
                metrics.build_duration.observe(status.duration_seconds)


def _ready_condition(
    status: ConditionStatus, reason: ImageReason, message: str, now: datetime
) -> Condition:
    return Condition(
        type=IMAGE_READY,
        status=status,
        reason=reason.value,
        message=message,
        last_transition_time=now.replace(microsecond=0),
    )


def _ended(
    status: RolloutImageStatus,
    phase: ImagePhase,
    reason: ImageReason,
    message: str,
    now: datetime,
    *,
    digest: str | None = None,
    log_uri: str | None = None,
) -> RolloutImageStatus:
    """The status of an image that has finished (`phase`: Ready or Failed)."""
    moment = now.replace(microsecond=0)
    started = status.started_at
    return status.model_copy(
        update={
            "phase": phase,
            "reason": reason,
            "message": message,
            "digest": digest,
            "completed_at": moment,
            "duration_seconds": (
                round((now - started).total_seconds(), 3) if started is not None else None
            ),
            "log_uri": log_uri,
            "conditions": [
                _ready_condition(
                    ConditionStatus.TRUE if phase is ImagePhase.READY else ConditionStatus.FALSE,
                    reason,
                    message,
                    now,
                )
            ],
        }
    )


def _overdue(spec: RolloutImageSpec, status: RolloutImageStatus, now: datetime) -> bool:
    """Whether a build that is still waiting has run past its timeout and the margin its Pod's
    deadline gives (a Pod the kubelet never ended, on a node gone silent)."""
    if status.started_at is None:
        return False
    budget = spec.timeout_seconds + 2 * DEADLINE_MARGIN_SEC
    return (now - status.started_at).total_seconds() > budget
