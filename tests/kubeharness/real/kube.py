"""`RealKube`: a namespace of the session's real control plane, seen from a test."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest

from kubeharness.calls import ApiCall
from kubeharness.crds import crd_manifests
from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.operator_thread import RunningOperator
from kubeharness.real.audit import AuditLog
from kubeharness.real.client import CLUSTER_SCOPED, ApiError, install_crd, resource_path
from kubeharness.real.plane import CLI_USER, HARNESS_USER, NODE, ControlPlane
from kubeharness.resources import NAMESPACES, PODS, Body, Namespace


class RealKube(Kube):
    """A namespace of the session's real control plane, seen from a test."""

    def __init__(self, plane: ControlPlane, session: aiohttp.ClientSession, namespace: str) -> None:
        self.plane = plane
        self.session = session
        self.namespace = namespace
        self.operators: builtins.list[RunningOperator] = []
        self.extra_namespaces: builtins.list[str] = []
        self.audit = AuditLog(plane.audit_log, [*plane.controller_users, CLI_USER])
        self._sync_client = plane.client()
        self._base = 0
        self._sync()
        self._base = len(self.audit.calls)

    @classmethod
    @contextlib.asynccontextmanager
    async def for_test(cls, plane: ControlPlane) -> AsyncIterator[RealKube]:
        """A fresh namespace (with its `default` ServiceAccount) and a kubelet for its Pods."""
        connector = aiohttp.TCPConnector(ssl=plane.ssl_context())
        headers = {"Authorization": f"Bearer {plane.tokens[HARNESS_USER]}"}
        async with aiohttp.ClientSession(
            base_url=plane.url, connector=connector, headers=headers
        ) as session:
            kube = cls(plane, session, plane.next_namespace())
            await kube.create_namespace(kube.namespace)
            kubelet = asyncio.create_task(kube._confirm_pod_deletions(kube.namespace))
            try:
                yield kube
            finally:
                for operator in list(kube.operators):
                    if operator.alive:
                        await operator.stop()
                kubelet.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await kubelet
                await kube._clean_up()

    @property
    def url(self) -> str:
        return self.plane.url

    def connection(self, identity: Identity = Identity.OPERATOR) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=self.plane.url,
            ca_path=str(self.plane.ca_path),
            token=self.plane.token(identity),
            default_namespace=self.namespace,
        )

    def _enforce_rbac(self, identity: Identity) -> None:
        pass  # a real API server enforces RBAC on every user but the admins

    # ---- requests

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {"params": dict(params or {})}
        if body is not None:
            kwargs["data"] = json.dumps(body)
            kwargs["headers"] = {"Content-Type": content_type}
        async with self.session.request(method, path, **kwargs) as response:
            data = await response.json(content_type=None)
            if response.status >= 400:
                raise ApiError(response.status, data)
            return data

    def _where(self, resource: str, namespace: str | None) -> str | None:
        return None if resource in CLUSTER_SCOPED else namespace

    async def install_crds(self, source: Path | Iterable[Mapping[str, Any]]) -> None:
        manifests = crd_manifests(source) if isinstance(source, Path) else builtins.list(source)
        for manifest in manifests:
            await asyncio.to_thread(install_crd, self._sync_client, manifest)

    async def _kind(self, resource: str) -> str:
        """The kind of a resource, from discovery (as the emulator fills it in, so may we)."""
        group_version, plural = resource.rsplit("/", 1)
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        found = await self._request("GET", path)
        return str(next(r["kind"] for r in found["resources"] if r["name"] == plural))

    async def create(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Body:
        meta = body.get("metadata") or {}
        where = self._where(resource, namespace or meta.get("namespace") or self.namespace)
        body = {
            "apiVersion": resource.rsplit("/", 1)[0],
            "kind": body.get("kind") or await self._kind(resource),
            **body,
        }
        created = await self._request("POST", resource_path(resource, where), body)
        if resource == NAMESPACES:
            await self._namespace_ready(created["metadata"]["name"])
        return dict(created)

    async def _namespace_ready(self, name: str) -> None:
        """A namespace has its `default` ServiceAccount (which Pods need) once the controller
        made it; the harness makes it itself where no controller manager runs."""
        account = {"metadata": {"name": "default", "namespace": name}}
        with contextlib.suppress(ApiError):
            await self._request("POST", resource_path("v1/serviceaccounts", name), account)

    async def find(self, resource: str, name: str, namespace: Namespace = ...) -> Body | None:
        path = resource_path(resource, self._where(resource, self._ns(namespace)), name)
        try:
            return dict(await self._request("GET", path))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def list(
        self,
        resource: str,
        namespace: Namespace = None,
        *,
        labels: str | Mapping[str, str] = "",
        fields: str = "",
    ) -> builtins.list[Body]:
        if isinstance(labels, Mapping):
            labels = ",".join(f"{k}={v}" for k, v in labels.items())
        params = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        found = await self._request(
            "GET",
            resource_path(resource, self._where(resource, self._ns(namespace))),
            params=params,
        )
        api_version = found.get("apiVersion", "v1")
        kind = found.get("kind", "List").removesuffix("List")
        return [{"apiVersion": api_version, "kind": kind, **item} for item in found["items"]]

    async def patch(
        self,
        resource: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: Namespace = ...,
        *,
        subresource: str | None = None,
    ) -> Body:
        is_merge = isinstance(patch, Mapping)
        body: Any = dict(patch) if is_merge else [dict(op) for op in patch]
        path = resource_path(
            resource, self._where(resource, self._ns(namespace)), name, subresource
        )
        content_type = "application/merge-patch+json" if is_merge else "application/json-patch+json"
        return dict(await self._request("PATCH", path, body, content_type=content_type))

    async def delete(self, resource: str, name: str, namespace: Namespace = ...) -> Body:
        path = resource_path(resource, self._where(resource, self._ns(namespace)), name)
        return dict(await self._request("DELETE", path))

    # ---- the kubelet

    async def _schedule(self, pod: Body) -> None:
        if pod.get("spec", {}).get("nodeName"):
            return
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        path = resource_path(PODS, meta["namespace"], meta["name"], "binding")
        await self._request("POST", path, binding)

    async def _confirm_pod_deletions(self, namespace: str) -> None:
        """What the kubelet does when a bound Pod is deleted: stop it, then remove it at once."""
        path = resource_path(PODS, namespace)
        version = ""
        while True:
            try:
                if not version:
                    listed = await self._request("GET", path)
                    version = listed["metadata"]["resourceVersion"]
                    for pod in listed["items"]:
                        await self._confirm_deletion(pod)
                params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "60"}
                async with self.session.get(path, params=params, timeout=None) as response:
                    if response.status >= 400:
                        version = ""
                        continue
                    async for line in response.content:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            version = ""
                            break
                        pod = event["object"]
                        version = pod["metadata"]["resourceVersion"]
                        await self._confirm_deletion(pod)
            except (aiohttp.ClientError, ApiError, json.JSONDecodeError):
                await asyncio.sleep(0.2)
                version = ""

    async def _confirm_deletion(self, pod: Body) -> None:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp") or not pod.get("spec", {}).get("nodeName"):
            return
        path = resource_path(PODS, meta["namespace"], meta["name"])
        with contextlib.suppress(ApiError):
            await self._request("DELETE", path, {"gracePeriodSeconds": 0})

    async def _clean_up(self) -> None:
        """Leave nothing behind for later tests (a cluster-wide operator would see it): the
        test's jobs, trials and Pods deleted at once (finalizers off, no grace), then its
        namespaces (which the namespace controller, where it runs, finishes in the background)."""
        rollout = ("rollout.dev/v1alpha1/rolloutjobs", "rollout.dev/v1alpha1/rollouttrials")
        for namespace in self._own_namespaces():
            for resource in rollout:
                with contextlib.suppress(ApiError):
                    for obj in await self.list(resource, namespace):
                        if obj["metadata"].get("finalizers"):
                            release = {"metadata": {"finalizers": None}}
                            await self.patch(resource, obj["metadata"]["name"], release, namespace)
            for resource in (*rollout, PODS):
                with contextlib.suppress(ApiError):
                    await self._request(
                        "DELETE",
                        resource_path(resource, namespace),
                        params={"gracePeriodSeconds": "0"},
                    )
            with contextlib.suppress(ApiError):
                await self.delete(NAMESPACES, namespace, None)

    def _own_namespaces(self) -> builtins.list[str]:
        return [self.namespace, *self.extra_namespaces]

    async def new_namespace(self, suffix: str) -> str:
        name = f"{self.namespace}-{suffix}"  # the session's control plane is shared
        await self.create_namespace(name)
        self.extra_namespaces.append(name)
        return name

    # ---- the request log

    def _sync(self) -> None:
        """Read the audit log up to a barrier request made now: every request answered before
        this call is then in it (the API server logs a request once it has answered it)."""
        token = uuid.uuid4().hex
        self._sync_client.request("GET", f"/version?barrier={token}")
        deadline = time.monotonic() + 10
        while not any(token in uri for uri in self.audit.read()):
            if time.monotonic() > deadline:
                raise TimeoutError("the audit log did not show the barrier request within 10s")
            time.sleep(0.005)

    def mark(self) -> int:
        self._sync()
        return len(self.audit.calls) - self._base

    def calls(self, since: int = 0) -> builtins.list[ApiCall]:
        self._sync()
        return self.audit.calls[self._base + since :]

    def _inject_fault(self, fault: Any) -> None:
        pytest.skip("injected API errors need the emulator: a real API server fails on no demand")

    def needs_garbage_collector(self) -> None:
        if not self.plane.garbage_collector:
            pytest.skip(
                "needs garbage collection: no kube-controller-manager beside kube-apiserver"
            )
