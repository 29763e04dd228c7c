"""The operator's writes to the Kubernetes API, each idempotent and with a timeout.

kopf watches and indexes; the writes go through the official `kubernetes` client, which is
synchronous, so every call runs in a thread pool of its own (never on the event loop), bounded so
that a burst of trial creations cannot starve kopf's own executor.

Pods are created and deleted without decoding the API server's answer into the client's models
(`_preload_content=False`: a Pod's JSON, managed fields included, runs to kilobytes), so each of
those answers is read to its end before its connection goes back to the pool (`_call_undecoded`): an
unread rest would be read by the next request on that connection as its status line.

Idempotence is the point of each method: creating what exists (HTTP 409) hands back the existing
object or says so, deleting what is gone (404) is done, patching the status of an object that is
gone says so. A restarted operator can therefore repeat any step it may or may not have finished.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from rollout.api.resources import GROUP, VERSION, RolloutImage, RolloutJob, RolloutTrial
from rollout.controller.metrics import OperatorMetrics

T = TypeVar("T")

TRIALS = RolloutTrial.resource.plural
JOBS = RolloutJob.resource.plural
IMAGES = RolloutImage.resource.plural
REQUEST_TIMEOUT_SEC = 30.0
WORKERS = 16


def default_api_client(workers: int = WORKERS) -> kubernetes.client.ApiClient:
    """A client for the cluster the operator runs in, or for KUBECONFIG's outside one."""
    configuration = kubernetes.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        kubernetes.config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = workers
    return kubernetes.client.ApiClient(configuration)


class KubeApi:
    """Idempotent writes (and the few reads the reconcilers need) to the Kubernetes API."""

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        metrics: OperatorMetrics,
        timeout: float = REQUEST_TIMEOUT_SEC,
        workers: int = WORKERS,
    ) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.networking = kubernetes.client.NetworkingV1Api(api_client)
        self.timeout = timeout
        self.metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout-api")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, *args, _request_timeout=self.timeout, **kwargs)
        return await loop.run_in_executor(self._executor, call)

    async def _call_undecoded(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
        """Call without decoding the answer into the client's models, and read the answer to
        its end before its connection goes back to the pool.

        `release_conn()` alone would return the connection with the rest of the answer unread;
        the next request on it then fails with `BadStatusLine` or `ResponseNotReady`, as it did
        against a real API server under load (the rest of a chunked Pod arrives after the head).
        """

        def call() -> None:
            response = fn(*args, _request_timeout=self.timeout, _preload_content=False, **kwargs)
            try:
                response.drain_conn()
            finally:
                response.release_conn()

        await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def _count(self, resource: str, verb: str) -> None:
        self.metrics.api_writes.labels(resource=resource, verb=verb).inc()

    # --- RolloutTrials

    async def create_trial(
        self, namespace: str, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Create a RolloutTrial; (the object, True) or, when it exists, (the existing, False)."""
        self._count(TRIALS, "create")
        try:
            created = await self._call(
                self.custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                TRIALS,
                dict(body),
            )
            return cast(dict[str, Any], created), True
        except ApiException as err:
            if err.status != 409:
                raise
        existing = await self.get_trial(namespace, str(body["metadata"]["name"]))
        if existing is None:  # deleted in between: the next pass creates it again
            raise RuntimeError(f"RolloutTrial {namespace}/{body['metadata']['name']} vanished")
        return existing, False

    async def get_trial(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = await self._call(
                self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, TRIALS, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    async def patch_trial_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch a RolloutTrial's status; None when the trial is gone."""
        return await self._patch_status(TRIALS, namespace, name, {"status": dict(status)})

    async def _patch_status(
        self, plural: str, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch the status of one of our resources; None when it is gone."""
        self._count(plural, "patch_status")
        try:
            patched = await self._call(
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                dict(patch),
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(dict[str, Any], patched)

    # --- Pods

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Create a Pod; True when created, False when it existed already."""
        self._count("pods", "create")
        try:
            await self._call_undecoded(self.core.create_namespaced_pod, namespace, dict(body))
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Pod as the API server has it (plain JSON, not the client's models); None when
        there is none."""

        def call() -> dict[str, Any] | None:
            try:
                response = self.core.read_namespaced_pod(
                    name, namespace, _request_timeout=self.timeout, _preload_content=False
                )
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
            raw = cast(Any, response)  # urllib3's response: _preload_content=False
            try:
                return cast(dict[str, Any], json.loads(raw.data))
            finally:
                raw.release_conn()

        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete a Pod; True when deleted now, False when it was gone already."""
        self._count("pods", "delete")
        try:
            await self._call_undecoded(self.core.delete_namespaced_pod, name, namespace)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    # --- RolloutImages

    async def create_image(
        self, namespace: str, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, bool]:
        """Create a RolloutImage; (the object, True), or (None, False) when one of that name
        exists (possibly on its way out: the caller looks again later)."""
        self._count(IMAGES, "create")
        try:
            created = await self._call(
                self.custom.create_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                IMAGES,
                dict(body),
            )
        except ApiException as err:
            if err.status == 409:
                return None, False
            raise
        return cast(dict[str, Any], created), True

    async def delete_image(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the RolloutImage of that name if it is still the object `uid` (a newer one of
        the same name is kept); True when deleted now."""
        self._count(IMAGES, "delete")
        try:
            await self._call(
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                IMAGES,
                name,
                body={"preconditions": {"uid": uid}},
            )
        except ApiException as err:
            if err.status in (404, 409):  # gone, or another of that name by now
                return False
            raise
        return True

    async def patch_image_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch a RolloutImage's status; None when it is gone."""
        return await self._patch_status(IMAGES, namespace, name, {"status": dict(status)})

    # --- NetworkPolicies

    async def create_network_policy(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Create a NetworkPolicy; True when created, False when it existed already (kept as
        it is)."""
        self._count("networkpolicies", "create")
        try:
            await self._call_undecoded(
                self.networking.create_namespaced_network_policy, namespace, dict(body)
            )
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    # --- RolloutJobs

    async def patch_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """Merge-patch a RolloutJob's status (`patch` is `{"status": {...}}`); None when gone."""
        return await self._patch_status(JOBS, namespace, name, patch)

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a RolloutJob (its trials and their Pods go with it, by owner references)."""
        self._count(JOBS, "delete")
        try:
            await self._call(
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                JOBS,
                name,
                propagation_policy="Background",
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True
