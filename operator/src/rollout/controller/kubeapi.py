"""The operator's writes to the Kubernetes API, each idempotent and with a timeout.

kopf and the operator's own watches (`watches`) read; the writes go through the official
`kubernetes` client's connection pool and credentials, which are synchronous, so every call runs
in a thread pool of its own (never on the event loop), bounded so that a burst of trial creations
cannot starve kopf's own executor. The watches use the same client (`open`, `read`) from threads
of their own.

Every request is sent by `_request`, below the client's generated methods: the body goes out as
the JSON it is and the answer comes back as plain JSON (or is not decoded at all). The generated
methods validate a body against the client's models first (a Pod dict into `V1Pod` and back: most
of the client's own CPU per Pod created, and a field that the client's version of the model does
not know is refused before anything is sent) and decode answers into models. Each answer is read
to its end before its connection goes back to the pool: an unread rest would be read by the next
request on that connection as its status line (`BadStatusLine`, `ResponseNotReady`, as seen
against a real API server under load: the rest of a chunked Pod arrives after the head).

RolloutTrials are created by threads of their own (`TRIAL_LANES`), each sending one request after
the other: the requests for one job's trials all go to one of them, so that the API server makes
its trials in the order asked for (DESIGN: the seed's order) without a round trip through the
event loop between two of them, while its Pods and everything else go `WORKERS` at a time.

Idempotence is the point of each method: creating what exists (HTTP 409) hands back the existing
object or says so, deleting what is gone (404) is done, patching the status of an object that is
gone says so. A restarted operator can therefore repeat any step it may or may not have finished.
"""

from __future__ import annotations

import asyncio
import json
import os
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast
from urllib.parse import quote

import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from rollout.api.resources import (
    GROUP,
    LABEL_JOB,
    VERSION,
    RolloutImage,
    RolloutJob,
    RolloutTrial,
)
from rollout.controller.metrics import OperatorMetrics

TRIALS = RolloutTrial.resource.plural
JOBS = RolloutJob.resource.plural
IMAGES = RolloutImage.resource.plural
REQUEST_TIMEOUT_SEC = 30.0
WORKERS = 16
TRIAL_LANES = 4
"""Threads that create RolloutTrials, each one request after the other (`trial_lane`)."""
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


def default_api_client(workers: int = WORKERS) -> kubernetes.client.ApiClient:
    """A client for the cluster the operator runs in, or for KUBECONFIG's outside one."""
    configuration = kubernetes.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        kubernetes.config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = workers
    return kubernetes.client.ApiClient(configuration)


def namespaced_path(
    api: str, namespace: str, plural: str, name: str | None = None, subresource: str | None = None
) -> str:
    """The URL path of a namespaced collection or object: `api` is `/api/v1` or
    `/apis/<group>/<version>`."""
    path = f"{api}/namespaces/{quote(namespace, safe='')}/{plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def trial_lane(namespace: str, trial: Mapping[str, Any]) -> int:
    """Which of the `TRIAL_LANES` sends a trial's creation: always the same for one job's
    trials (by its `rollout.dev/job` label), so that they are made in the order asked for,
    while other jobs' trials mostly go beside them."""
    job = ((trial.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB, "")
    return zlib.crc32(f"{namespace}/{job}".encode()) % TRIAL_LANES


CORE = "/api/v1"
OURS = f"/apis/{GROUP}/{VERSION}"
NETWORKING = "/apis/networking.k8s.io/v1"


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
        self.api_client = api_client
        self.timeout = timeout
        self.metrics = metrics
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rollout-api")
        self._lanes = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rollout-api-trials-{lane}")
            for lane in range(TRIAL_LANES)
        ]

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        for lane in self._lanes:
            lane.shutdown(wait=False, cancel_futures=True)

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        decode: bool,
        query: Sequence[tuple[str, Any]] = (),
    ) -> dict[str, Any] | None:
        """One request, in the calling thread (see the module docstring); the answer as JSON
        (None unless `decode`); an `ApiException` for an error answer."""
        response = self.open(method, path, body, content_type, query, self.timeout)
        try:
            data = response.read()  # to its end, whatever the status
        finally:
            response.response.release_conn()
        if not 200 <= response.status <= 299:
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
            raise ApiException.from_response(http_resp=response, body=text, data=None)
        return cast(dict[str, Any], json.loads(data)) if decode else None

    def open(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        query: Sequence[tuple[str, Any]],
        timeout: float | tuple[float, float],
    ) -> Any:
        """A request sent in the calling thread, its answer not read yet (a watch's stream is
        read as it comes: `watches`); the caller reads it and releases its connection."""
        client = self.api_client
        method, url, headers, body, post = client.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params={"Accept": JSON, "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
        )
        return client.call_api(method, url, headers, body, post, _request_timeout=timeout)

    def read(self, path: str, query: Sequence[tuple[str, Any]]) -> dict[str, Any]:
        """GET `path` with `query`, in the calling thread (a watch's own): the answer's JSON."""
        return cast(dict[str, Any], self._send("GET", path, None, JSON, True, query))

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        decode: bool = True,
        lane: ThreadPoolExecutor | None = None,
    ) -> dict[str, Any] | None:
        """`_send` in the API client's thread pool, or in `lane` (one thread: one request after
        the other, in the order they were asked for)."""
        executor = lane or self._executor
        return await asyncio.get_running_loop().run_in_executor(
            executor, self._send, method, path, body, content_type, decode
        )

    def _count(self, resource: str, verb: str) -> None:
        self.metrics.api_writes.labels(resource=resource, verb=verb).inc()

    # --- RolloutTrials

    async def create_trial(
        self, namespace: str, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Create a RolloutTrial; (the object, True) or, when it exists, (the existing, False).

        A job's trials are created one after the other, in the order this is called in (the
        first step of the call sends it to the job's lane: `trial_lane`), however many calls
        are under way: the API server then makes them in that order."""
        self._count(TRIALS, "create")
        lane = self._lanes[trial_lane(namespace, body)]
        try:
            created = await self._request(
                "POST", namespaced_path(OURS, namespace, TRIALS), dict(body), lane=lane
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
        return await self._get(namespaced_path(OURS, namespace, TRIALS, name))

    async def _get(self, path: str) -> dict[str, Any] | None:
        """An object as plain JSON; None when there is none."""
        try:
            return await self._request("GET", path)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

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
            return await self._request(
                "PATCH",
                namespaced_path(OURS, namespace, plural, name, "status"),
                dict(patch),
                content_type=MERGE_PATCH,
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    # --- Pods

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """Create a Pod; True when created, False when it existed already."""
        self._count("pods", "create")
        try:
            await self._request(
                "POST", namespaced_path(CORE, namespace, "pods"), dict(body), decode=False
            )
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Pod as the API server has it (plain JSON, not the client's models); None when
        there is none."""
        return await self._get(namespaced_path(CORE, namespace, "pods", name))

    async def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete a Pod; True when deleted now, False when it was gone already."""
        self._count("pods", "delete")
        try:
            await self._request(
                "DELETE", namespaced_path(CORE, namespace, "pods", name), decode=False
            )
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
            created = await self._request(
                "POST", namespaced_path(OURS, namespace, IMAGES), dict(body)
            )
        except ApiException as err:
            if err.status == 409:
                return None, False
            raise
        return created, True

    async def delete_image(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the RolloutImage of that name if it is still the object `uid` (a newer one of
        the same name is kept); True when deleted now."""
        self._count(IMAGES, "delete")
        try:
            await self._request(
                "DELETE",
                namespaced_path(OURS, namespace, IMAGES, name),
                {"preconditions": {"uid": uid}},
                decode=False,
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
            await self._request(
                "POST",
                namespaced_path(NETWORKING, namespace, "networkpolicies"),
                dict(body),
                decode=False,
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
            await self._request(
                "DELETE",
                namespaced_path(OURS, namespace, JOBS, name),
                {"propagationPolicy": "Background"},
                decode=False,
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True
