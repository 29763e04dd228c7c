"""The emulator seen from a test: `kube_api()` starts one and yields its `EmulatedKube`."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import dataclasses
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp.test_utils
import aiohttp.web
import kmock
import kopf

from kubeharness.calls import ApiCall
from kubeharness.crds import crd_manifests
from kubeharness.emulator.faults import Fault
from kubeharness.emulator.selectors import Selector
from kubeharness.emulator.server import MAX_REQUEST_BYTES, ClusterEmulator
from kubeharness.emulator.writes import JSON_PATCH, MERGE_PATCH
from kubeharness.identity import Identity, operator_user
from kubeharness.kube import Kube
from kubeharness.operator_thread import RunningOperator
from kubeharness.resources import CRDS, DEFAULT_NAMESPACE, Body, Namespace, body_meta, resource_of


@dataclasses.dataclass
class EmulatedKube(Kube):
    """The loopback API server (the emulator of server.py), seen from a test."""

    emulator: ClusterEmulator
    server: kmock.Server
    operators: builtins.list[RunningOperator] = dataclasses.field(default_factory=list)
    namespace: str = DEFAULT_NAMESPACE

    @property
    def url(self) -> str:
        return str(self.server.url).rstrip("/")

    def connection(self, identity: Identity = Identity.OPERATOR) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=self.url, token=identity.value)

    def _enforce_rbac(self, identity: Identity) -> None:
        self.emulator.rbac_users[identity.value] = operator_user(identity)

    # ---- resources and CRDs

    async def install_crds(self, source: Path | Iterable[Mapping[str, Any]]) -> None:
        """Register the resources of CRD manifests (or of a directory of YAML files).

        The CRD objects are created as a client would create them (the emulator serves a CRD's
        resources from the moment it is created, as a real API server does once it is
        established); an existing one is replaced.
        """
        manifests = crd_manifests(source) if isinstance(source, Path) else builtins.list(source)
        if isinstance(source, Path) and not manifests:
            raise ValueError(f"no CustomResourceDefinition in {source}/*.yaml")
        for manifest in manifests:
            name = manifest["metadata"]["name"]
            if await self.find(CRDS, name, namespace=None) is not None:
                await self.delete(CRDS, name, namespace=None)
            await self.create(CRDS, dict(manifest))

    # ---- objects (these do not appear in the request log: they are the test's, not HTTP)

    async def create(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Body:
        ref = resource_of(resource)
        if namespace is None and not body_meta(body).get("namespace"):
            namespaced = ref in self.emulator.resources and self.emulator.info(ref).namespaced
            namespace = self.namespace if namespaced else None
        created = await self.emulator.write(
            method="POST", resource=ref, namespace=namespace, name=None, body=dict(body)
        )
        return copy.deepcopy(created)

    async def find(self, resource: str, name: str, namespace: Namespace = ...) -> Body | None:
        ref = resource_of(resource)
        async with self.emulator._lock:
            found_in = self._ns(namespace) if self.emulator.info(ref).namespaced else None
            body = self.emulator.current((ref, found_in, name))
        return copy.deepcopy(body)

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
        selector = Selector.parse(labels, fields)
        ref = resource_of(resource)
        async with self.emulator._lock:
            items = self.emulator.select(ref, self._ns(namespace), selector)
        return copy.deepcopy(items)

    async def patch(
        self,
        resource: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: Namespace = ...,
        *,
        subresource: str | None = None,
    ) -> Body:
        body: Any = dict(patch) if isinstance(patch, Mapping) else [dict(op) for op in patch]
        result = await self.emulator.write(
            method="PATCH",
            resource=resource_of(resource),
            namespace=self._ns(namespace),
            name=name,
            subresource=subresource,
            body=body,
            content_type=MERGE_PATCH if isinstance(patch, Mapping) else JSON_PATCH,
        )
        return copy.deepcopy(result)

    async def delete(self, resource: str, name: str, namespace: Namespace = ...) -> Body:
        result = await self.emulator.write(
            method="DELETE",
            resource=resource_of(resource),
            namespace=self._ns(namespace),
            name=name,
        )
        return copy.deepcopy(result)

    async def _schedule(self, pod: Body) -> None:
        pass  # the emulator takes status for any Pod, bound or not

    # ---- the request log

    def mark(self) -> int:
        return len(self.emulator._requests)

    def calls(self, since: int = 0) -> builtins.list[ApiCall]:
        return [ApiCall.of(request) for request in self.emulator._requests[since:]]

    # ---- errors on demand

    def _inject_fault(self, fault: Fault) -> None:
        self.emulator.add_fault(fault)

    def needs_garbage_collector(self) -> None:
        pass  # the emulator collects dependents at once


class _TestServer(aiohttp.test_utils.RawTestServer):
    """aiohttp's test server that cancels a handler when its client goes away.

    aiohttp leaves it running by default, so a watch whose client is gone would linger until
    the next event for its resource. Request bodies may be as large as kube-apiserver takes.
    """

    async def _make_runner(self, debug: bool = True, **kwargs: Any) -> aiohttp.web.ServerRunner:
        # As RawTestServer's, with a factory of larger requests.
        server = aiohttp.web.Server(
            self._handler, loop=self._loop, debug=debug, request_factory=_large_request, **kwargs
        )
        return aiohttp.web.ServerRunner(server, debug=debug, **kwargs)


def _large_request(
    message: Any,
    payload: Any,
    protocol: Any,
    writer: Any,
    task: Any,
) -> aiohttp.web.BaseRequest:
    """A request whose body may be as large as kube-apiserver takes (3 MiB), not aiohttp's
    1 MiB."""
    return aiohttp.web.BaseRequest(
        message,
        payload,
        protocol,
        writer,
        task,
        asyncio.get_running_loop(),
        client_max_size=MAX_REQUEST_BYTES,
    )


@contextlib.asynccontextmanager
async def kube_api(
    *,
    crds: Path | Iterable[Mapping[str, Any]] = (),
    namespaces: Iterable[str] = (DEFAULT_NAMESPACE,),
) -> AsyncIterator[EmulatedKube]:
    """Start the API server on 127.0.0.1 (a free port) with the built-in resources of a recent
    Kubernetes (kmock's bundled discovery data), the given CRDs and namespaces.

    Use it as a fixture::

        @pytest.fixture
        async def kube() -> AsyncIterator[Kube]:
            async with kube_api(crds=minimal_rollout_crds()) as kube:
                yield kube
    """
    emulator = ClusterEmulator()
    with warnings.catch_warnings():  # kmock 0.8 uses importlib.resources.read_binary()
        warnings.simplefilter("ignore", DeprecationWarning)
        emulator.resources.load_bundled()
    async with emulator, kmock.Server(emulator, server_cls=_TestServer) as server:
        kube = EmulatedKube(emulator=emulator, server=server)
        for namespace in namespaces:
            await kube.create_namespace(namespace)
        await kube.install_crds(crds if isinstance(crds, Path) else list(crds))
        try:
            yield kube
        finally:
            for operator in list(kube.operators):
                if operator.alive:
                    await operator.stop()
