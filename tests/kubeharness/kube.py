"""`Kube`: the Kubernetes API of one test, the emulator's or a real control plane's, behind the
same helpers.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import EllipsisType
from typing import Any, TypeVar, overload

import aiohttp
import kopf
import kubernetes.client
import yaml

from kubeharness.calls import ApiCall
from kubeharness.emulator.errors import api_error
from kubeharness.emulator.faults import Fault
from kubeharness.identity import CONTROLLERS, RELEASE_NAMESPACES, Identity, chart_rbac
from kubeharness.operator_thread import RunningOperator, fast_settings
from kubeharness.pod_status import KubeletHelpers
from kubeharness.polling import wait_for
from kubeharness.resources import NAMESPACES, Body, Namespace, resource_of, resource_path_of

T = TypeVar("T")


class Kube(KubeletHelpers, abc.ABC):
    """A Kubernetes API for one test: the emulator (`EmulatedKube`) or a real kube-apiserver
    (`real.kube.RealKube`), behind the same helpers.

    The kubelet's helpers (`set_pod_status`, `run_pod`, `finish_pod`) come from pod_status.py.

    Objects helpers (create/find/get/list/patch/delete) are the test's own: on the emulator they
    bypass HTTP, on a real control plane they are an admin's requests; neither appears in the
    request log (`calls()`), which holds what the operator and the CLI asked.
    """

    namespace: str
    """The test's namespace: "default" on the emulator (a fresh API server per test), a fresh
    namespace per test on a shared real control plane."""
    operators: builtins.list[RunningOperator]

    def _ns(self, namespace: Namespace) -> str | None:
        return self.namespace if namespace is ... else namespace

    @property
    @abc.abstractmethod
    def url(self) -> str: ...

    @abc.abstractmethod
    def connection(self, identity: Identity = Identity.OPERATOR) -> kopf.ConnectionInfo:
        """How a client reaches the API as `identity`: server, CA and token."""

    # ---- resources and CRDs

    @abc.abstractmethod
    async def install_crds(self, source: Path | Iterable[Mapping[str, Any]]) -> None:
        """Install CRD manifests (or those of a directory of YAML files); served when done."""

    @abc.abstractmethod
    async def create(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Body:
        """Create an object; the namespace comes from the argument, the body's metadata or the
        test's namespace, in that order."""

    @abc.abstractmethod
    async def find(self, resource: str, name: str, namespace: Namespace = ...) -> Body | None:
        """The object, or None if it does not exist."""

    async def gone(self, resource: str, name: str, namespace: Namespace = ...) -> bool:
        """True when the object does not exist (for `wait_for`)."""
        return await self.find(resource, name, namespace) is None

    async def get(self, resource: str, name: str, namespace: Namespace = ...) -> Body:
        """The object; raises KeyError if it does not exist."""
        body = await self.find(resource, name, namespace)
        if body is None:
            raise KeyError(f"{resource} {self._ns(namespace)}/{name} does not exist")
        return body

    @abc.abstractmethod
    async def list(
        self,
        resource: str,
        namespace: Namespace = None,
        *,
        labels: str | Mapping[str, str] = "",
        fields: str = "",
    ) -> builtins.list[Body]:
        """Objects of a resource (all namespaces by default), filtered like a list request."""

    @abc.abstractmethod
    async def patch(
        self,
        resource: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: Namespace = ...,
        *,
        subresource: str | None = None,
    ) -> Body:
        """Merge-patch an object (a list is sent as a JSON patch); the result is returned."""

    async def patch_status(
        self, resource: str, name: str, status: Mapping[str, Any], namespace: Namespace = ...
    ) -> Body:
        """Merge-patch `status` through the status subresource, as a controller or kubelet does."""
        return await self.patch(
            resource, name, {"status": dict(status)}, namespace, subresource="status"
        )

    @abc.abstractmethod
    async def delete(self, resource: str, name: str, namespace: Namespace = ...) -> Body:
        """Delete (or mark for deletion while finalizers remain) an object."""

    async def delete_if_present(self, resource: str, name: str, namespace: Namespace = ...) -> bool:
        """Delete an object another party may be deleting too (the operator, a garbage
        collector): False when it was already gone. Either backend answers 404 with `status`."""
        try:
            await self.delete(resource, name, namespace)
        except Exception as err:
            if getattr(err, "status", None) == 404:
                return False
            raise
        return True

    async def create_namespace(self, name: str) -> Body:
        return await self.create(NAMESPACES, {"metadata": {"name": name}})

    async def apply_chart_rbac(self, watch_namespaces: Sequence[str] = ()) -> Identity:
        """Apply the chart's RBAC for the operator and the bridge, cluster-wide or (with
        `watch_namespaces`) for those namespaces only, and return the identity the operator then
        runs as. From then on the API enforces it on the requests of the identities of that
        release, as a real API server does: cluster-wide, the operator's and `Identity.BRIDGE`'s
        (the namespaced release's bridge has no identity: nothing runs as it)."""
        identity = Identity.NAMESPACED_OPERATOR if watch_namespaces else Identity.OPERATOR
        release_namespace = RELEASE_NAMESPACES[identity]
        for body in [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release_namespace}},
            *chart_rbac(release_namespace, tuple(watch_namespaces)),
        ]:
            resource = resource_path_of(body)
            try:
                await self.create(resource, body, body["metadata"].get("namespace"))
            except Exception as err:  # both backends answer 409 for what exists already
                if getattr(err, "status", None) != 409:
                    raise
        for installed in CONTROLLERS:
            if RELEASE_NAMESPACES[installed] == release_namespace:
                self._enforce_rbac(installed)
        return identity

    @abc.abstractmethod
    def _enforce_rbac(self, identity: Identity) -> None:
        """Make the API decide `identity`'s requests by RBAC (a real one always does)."""

    async def new_namespace(self, suffix: str) -> str:
        """A further namespace for this test: `suffix` on the emulator (a server of its own)."""
        await self.create_namespace(suffix)
        return suffix

    # ---- the request log

    @abc.abstractmethod
    def mark(self) -> int:
        """A position in the request log, for `calls(since=...)`."""

    @abc.abstractmethod
    def calls(self, since: int = 0) -> builtins.list[ApiCall]:
        """Every request the operator and the CLI made, oldest first (test helpers make none)."""

    def writes(
        self,
        resource: str | None = None,
        name: str | None = None,
        *,
        namespace: str | None = None,
        subresource: str | EllipsisType | None = ...,
        since: int = 0,
    ) -> builtins.list[ApiCall]:
        """The POST/PUT/PATCH/DELETE requests, optionally only those about one object."""
        return [
            call
            for call in self.calls(since)
            if call.is_write
            and (resource is None or call.resource == resource)
            and (name is None or call.name == name)
            and (namespace is None or call.namespace == namespace)
            and (subresource is ... or call.subresource == subresource)
        ]

    # ---- errors on demand

    def fail(
        self,
        method: str,
        resource: str | None = None,
        *,
        name: str | None = None,
        subresource: str | EllipsisType | None = ...,
        status: int = 500,
        reason: str = "InternalError",
        message: str = "injected by the test",
        times: int = 1,
    ) -> None:
        """Answer the next `times` matching requests with an error instead of serving them
        (the emulator only: a real API server fails on no one's demand; tests that need it are
        skipped there)."""
        self._inject_fault(
            Fault(
                method=method.upper(),
                resource=resource_of(resource) if resource else None,
                name=name,
                subresource=None if subresource is ... else subresource,
                any_subresource=subresource is ...,
                error=api_error(status, reason, message),
                remaining=times,
            )
        )

    @abc.abstractmethod
    def _inject_fault(self, fault: Fault) -> None: ...

    @abc.abstractmethod
    def needs_garbage_collector(self) -> None:
        """Skip the test where nothing collects garbage (a real control plane without
        kube-controller-manager, as envtest runs it): owner references would never cascade."""

    # ---- waiting and the operator

    @overload
    async def wait_for(
        self,
        predicate: Callable[[], Awaitable[T | None]],
        *,
        timeout: float = ...,  # noqa: ASYNC109
        what: str | None = ...,
    ) -> T: ...

    @overload
    async def wait_for(
        self,
        predicate: Callable[[], T | None],
        *,
        timeout: float = ...,  # noqa: ASYNC109
        what: str | None = ...,
    ) -> T: ...

    async def wait_for(
        self,
        predicate: Callable[[], Any],
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - polling with a deadline is the point
        what: str | None = None,
    ) -> Any:
        """`wait_for()` that also fails at once if an operator started here has crashed."""
        checks = [operator.check for operator in self.operators]
        return await wait_for(predicate, timeout=timeout, what=what, checks=checks)

    async def settle(self, quiet: float = 0.5, timeout: float = 10.0) -> None:  # noqa: ASYNC109
        """Wait until no request has arrived for `quiet` seconds (open watches do not count).

        For asserting that something does NOT happen: let the operator do all it would do,
        then check the request log. Fails if requests keep coming for `timeout` seconds.
        """
        loop = asyncio.get_running_loop()
        last = (self.mark(), loop.time())

        def quiet_enough() -> bool:
            nonlocal last
            if self.mark() != last[0]:
                last = (self.mark(), loop.time())
            return loop.time() - last[1] >= quiet

        await self.wait_for(quiet_enough, timeout=timeout, what=f"no requests for {quiet}s")

    @contextlib.asynccontextmanager
    async def operator(
        self,
        *,
        registry: kopf.OperatorRegistry | None = None,
        settings: kopf.OperatorSettings | None = None,
        namespaces: Sequence[str] | None = None,
        clusterwide: bool = False,
        standalone: bool | None = None,
        peering_name: str | None = None,
        memo: object | None = None,
        ready_timeout: float = 10.0,
        identity: Identity = Identity.OPERATOR,
    ) -> AsyncIterator[RunningOperator]:
        """Run a kopf operator against this API for the duration of the block, as `identity`
        (bound by the chart's RBAC once `apply_chart_rbac()` applied it).

        `namespaces=None` means the test's namespace; `registry=None` means kopf's default
        registry (where module-level `@kopf.on...` handlers go); `settings=None` means
        `fast_settings()`. It is stopped gracefully at the end of the block unless it was
        stopped or killed inside it. A memo's `config` (the operator's) watches the same
        namespaces as kopf, as `rollout-operator` gives kopf its configured ones.
        """
        watched = list(namespaces) if namespaces is not None else [self.namespace]
        config = getattr(memo, "config", None)
        if memo is not None and config is not None and hasattr(config, "namespaces"):
            memo.config = config.model_copy(  # type: ignore[attr-defined]
                update={"namespaces": [] if clusterwide else watched}
            )
        running = RunningOperator(
            self.connection(identity),
            registry=registry,
            settings=settings if settings is not None else fast_settings(),
            namespaces=watched,
            clusterwide=clusterwide,
            standalone=False if standalone is None and peering_name is not None else standalone,
            peering_name=peering_name,
            memo=memo,
        )
        self.operators.append(running)
        try:
            await running.start(within=ready_timeout)
            yield running
        finally:
            if running.alive:
                await running.stop()
            self.operators.remove(running)

    @contextlib.asynccontextmanager
    async def http_session(
        self, identity: Identity = Identity.USER
    ) -> AsyncIterator[aiohttp.ClientSession]:
        """An HTTP session to this API as `identity` (paths relative to the server)."""
        info = self.connection(identity)
        tls = ssl.create_default_context(cafile=info.ca_path) if info.ca_path else False
        headers = {"Authorization": f"Bearer {info.token}"} if info.token else {}
        async with aiohttp.ClientSession(
            base_url=info.server, connector=aiohttp.TCPConnector(ssl=tls), headers=headers
        ) as session:
            yield session

    def client_configuration(
        self, identity: Identity = Identity.OPERATOR
    ) -> kubernetes.client.Configuration:
        """A `kubernetes` client configuration for this API as `identity`."""
        info = self.connection(identity)
        configuration = kubernetes.client.Configuration()
        configuration.host = info.server
        if info.ca_path:
            configuration.ssl_ca_cert = info.ca_path
        if info.token:
            configuration.api_key = {"authorization": f"Bearer {info.token}"}
        return configuration

    def write_kubeconfig(
        self,
        path: Path,
        namespace: str | None = None,
        identity: Identity = Identity.USER,
    ) -> Path:
        """A kubeconfig that points at this API (the test's namespace unless another is named),
        for subprocesses and the kubernetes client; a user's unless `identity` says otherwise."""
        info = self.connection(identity)
        cluster: Body = {"server": info.server}
        if info.ca_path:
            cluster["certificate-authority"] = info.ca_path
        context = {
            "cluster": "test",
            "user": identity.value,
            "namespace": namespace or self.namespace,
        }
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": cluster}],
            "users": [{"name": identity.value, "user": {"token": info.token or "kmock"}}],
            "contexts": [{"name": "test", "context": context}],
            "current-context": "test",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path
