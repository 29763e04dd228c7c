"""The API server: kmock's `KubernetesEmulator` (kmock 0.8, by kopf's author), made strict enough
that kopf and our operator behave against it as they would against a real API server:

- every object gets `uid`, `resourceVersion` (one counter for the whole server, as etcd does),
  `generation`, `creationTimestamp`, `apiVersion` and `kind`; `generateName` works;
- the status subresource is honoured: `PATCH .../status` changes only `status`, a write to the main
  endpoint leaves `status` alone, and `status` is dropped on create;
- merge patches, JSON patches with `test` ops (kopf adds its finalizer that way and expects 422 on
  a failed test), strategic merge (treated as a merge patch) and PUT;
- finalizers and `deletionTimestamp`, deletion once the last finalizer goes, and garbage
  collection of dependents through `ownerReferences` (background propagation);
- list and watch with `labelSelector` and `fieldSelector`, a numeric `resourceVersion` on lists,
  watches that resume from a `resourceVersion` without losing or repeating events (410 Gone
  from before a `compact()`, as after etcd's compaction), and `timeoutSeconds` (the server ends
  the watch, as a real one does);
- unknown fields pruned by the CRD's structural schema, as the API server prunes them.

kmock 0.8 itself cannot parse `/api/v1/namespaces[/<name>]` (it fails with a ValueError, so kopf's
namespace observer gets HTTP 500): the emulator below parses those paths itself.

The writes (writes.py), the reads of the stored objects (state.py) and RBAC (rbac.py) are mixins
of `ClusterEmulator`, each in a module of its own; this module has its fields, registration,
faults and the HTTP entry points (lists and watches included).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any, cast

import aiohttp
import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal import dsl, rendering

from kubeharness.emulator.chunked import CHUNK_PAUSE_SEC, CHUNKED_AFTER_BYTES, send_in_pieces
from kubeharness.emulator.errors import PageNotFound, api_error, check_query, not_found
from kubeharness.emulator.faults import Fault
from kubeharness.emulator.rbac import RbacAuthorizer
from kubeharness.emulator.selectors import Selector
from kubeharness.emulator.state import ObjectState, Schema, WatchEvent
from kubeharness.emulator.writes import ObjectWrites
from kubeharness.identity import UserInfo
from kubeharness.resources import NAMESPACES, WRITE_METHODS, Body, api_version, resource_of

MAX_REQUEST_BYTES = 3 * 1024 * 1024
"""kube-apiserver's limit on a request body (larger: 413)."""

ALL_VERBS = frozenset(
    {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)

# kmock 0.8 mis-parses these paths (it reads "namespaces" as the start of "namespaces/<ns>/...").
_NAMESPACE_PATH = re.compile(
    r"/api/v1/namespaces(?:/(?P<name>[^/]+)(?:/(?P<sub>status|finalize))?)?/?"
)


@attrs.define(kw_only=True)
class ClusterEmulator(RbacAuthorizer, ObjectWrites, ObjectState, kmock.KubernetesEmulator):
    """kmock's Kubernetes emulator with the API server semantics kopf and the operator rely on.

    All writes, from HTTP and from the test helpers alike, go through `write()`, which keeps the
    objects in kmock's `objects` array (so kmock's own assertions and `history` still work) and
    records every watch event in a per-resource log keyed by resourceVersion.
    """

    revision: int = attrs.field(default=0, init=False)
    gc_dependents: bool = True
    rbac_users: dict[str, UserInfo] = attrs.field(factory=dict)
    """Bearer token -> user whose requests RBAC decides (see `_authorize`)."""
    chunk_pause: float = CHUNK_PAUSE_SEC
    _schemas: dict[kmock.resource, Schema] = attrs.field(factory=dict, init=False)
    _event_log: dict[kmock.resource, list[tuple[int, WatchEvent]]] = attrs.field(
        factory=dict, init=False
    )
    _compacted: int = attrs.field(default=0, init=False)
    """The revision etcd's history was compacted at: a watch from before it gets 410 Gone."""
    _faults: list[Fault] = attrs.field(factory=list, init=False)
    _responses: dict[int, Body] = attrs.field(factory=dict, init=False)
    _crd_resources: dict[str, list[kmock.resource]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # kmock maps no action to PUT; serve it as a replacement (the write happens in _handle).
        self.fallback[kmock.method.PUT] << self._serve_write_result
        # The kubernetes client asks for `/version/`; a real API server answers both forms.
        self.fallback["get /version/"] << self._serve_server_version

    # ---- registration

    def register(
        self,
        resource: str | kmock.resource,
        *,
        kind: str,
        namespaced: bool,
        subresources: Iterable[str] = (),
        singular: str | None = None,
        shortnames: Iterable[str] = (),
        categories: Iterable[str] = (),
        openapi: Mapping[str, Any] | None = None,
    ) -> None:
        """Make a resource discoverable and writable (writes to unknown resources get 404)."""
        ref = resource_of(resource)
        self.resources[ref] = kmock.ResourceInfo(
            kind=kind,
            namespaced=namespaced,
            singular=singular or kind.lower(),
            verbs=set(ALL_VERBS),
            subresources=set(subresources),
            shortnames=set(shortnames),
            categories=set(categories),
        )
        self._schemas[ref] = Schema(openapi=openapi)

    def info(self, resource: kmock.resource) -> kmock.ResourceInfo:
        if resource not in self.resources:
            raise PageNotFound()
        return self.resources[resource]

    # ---- faults

    def add_fault(self, fault: Fault) -> None:
        self._faults.append(fault)

    def _take_fault(self, request: kmock.Request) -> kmock.KubernetesError | None:
        for fault in self._faults:
            if fault.matches(request):
                fault.remaining -= 1
                return fault.error
        return None

    # ---- HTTP entry points

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """kmock's own entry point, with the namespace paths it cannot parse parsed here, and
        large answers sent in pieces as a real API server sends them."""
        try:
            response = await self._serve(raw_request)
        except aiohttp.web.HTTPRequestEntityTooLarge:
            return _status_response(
                413,
                "RequestEntityTooLarge",
                f"Request entity too large: limit is {MAX_REQUEST_BYTES}",
            )
        if isinstance(response, aiohttp.web.Response) and not response.prepared:
            body = response.body
            if isinstance(body, bytes) and len(body) > CHUNKED_AFTER_BYTES:
                return await send_in_pieces(raw_request, response, body, self.chunk_pause)
        return response

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, PageNotFound):
            return aiohttp.web.Response(status=404, text="404 page not found\n")
        return await super()._render_error(exc)

    async def _serve(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if _NAMESPACE_PATH.fullmatch(raw_request.path) is None:
            return await super().__call__(raw_request)
        # The same steps as kmock.RawHandler.__call__, but with a request parsed correctly.
        await raw_request.read()
        try:
            request = await _parse_namespace_request(raw_request, len(self._requests))
            self._requests.append(request)
            return await self._handle(request)
        except Exception as exc:
            if not self._errors:
                raise
            self._errors[-1].append(exc)
            return await self._render_error(exc)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.resource.plural:
            fault = self._take_fault(request)
            if fault is not None:
                raise fault
            check_query(request.params)
            self._authorize(request)
            if request.method.value in WRITE_METHODS and (
                request.name is not None or request.method.value == "POST"
            ):
                self._responses[request.id] = await self.write(
                    method=request.method.value,
                    resource=request.resource,
                    namespace=request.namespace,
                    name=request.name,
                    subresource=request.subresource,
                    body=_request_body(request),
                    content_type=request.headers.get("Content-Type", ""),
                    params=request.params,
                )
        # Skip KubernetesEmulator._handle: its own bookkeeping is replaced by write() above.
        return await self._react(request)

    async def _react(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """kmock's `RawHandler._handle` (the first matching reaction by priority serves the
        request), with each reaction's filters applied to this request alone. kmock tells
        whether a reaction sees a request by looking for it among every logged request that
        passes its filters: a scan of the whole request log per reaction per request, so that a
        test of a few thousand requests spent most of its time there (a 200-trial job: 135 ms
        per request, 90% of the emulator's time)."""
        payloads = sorted(self._payloads, key=_priority_key(self._payloads))
        for payload in payloads:
            if _sees(payload._source, request) and not payload._disabled.is_set():
                try:
                    return await payload(request)
                except rendering.ReactionMismatchError:  # either mismatch or depletion
                    payload._disabled.set()
                except NotImplementedError:  # matched, but nothing to respond with
                    pass
        raise NotImplementedError(f"no reaction matches {request.method.value} {request.url}")

    async def _serve_write_result(self, request: kmock.Request) -> rendering.Payload:
        return self._responses.pop(request.id)

    async def _serve_create(self, request: kmock.Request) -> rendering.Payload:
        return rendering.Response(status=201, payload=self._responses.pop(request.id))

    async def _serve_update(self, request: kmock.Request) -> rendering.Payload:
        return self._responses.pop(request.id)

    async def _serve_delete(self, request: kmock.Request) -> rendering.Payload:
        return self._responses.pop(request.id)

    async def _serve_fetch(self, request: kmock.Request) -> rendering.Payload:
        assert request.resource is not None
        assert request.name is not None
        if request.subresource not in (None, "status"):
            raise api_error(404, "NotFound", f"subresource {request.subresource!r} is not emulated")
        async with self._lock:
            info = self.info(request.resource)
            namespace = request.namespace if info.namespaced else None
            body = self.current((request.resource, namespace, request.name))
        if body is None:
            raise not_found(request.resource, request.name)
        return body

    async def _serve_list(self, request: kmock.Request) -> rendering.Payload:
        assert request.resource is not None
        info = self.info(request.resource)
        selector = _selector_of(request)
        async with self._lock:
            items = self.select(request.resource, request.namespace, selector)
            revision = self.revision
        return {
            "apiVersion": api_version(request.resource),
            "kind": f"{info.kind}List",
            "metadata": {"resourceVersion": str(revision)},
            "items": items,
        }

    def compact(self) -> int:
        """Forget the watch history up to now, as etcd's compaction does (kube-apiserver asks
        for one every 5 minutes): a watch from an older resourceVersion then gets 410 Gone, and
        its client must list again. Returns the revision compacted at."""
        self._compacted = self.revision
        for resource, log in self._event_log.items():
            self._event_log[resource] = [(r, e) for r, e in log if r > self._compacted]
        return self._compacted

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[rendering.Payload]:
        """Stream events from `resourceVersion` on, or the current objects as ADDED without one.

        The bus is marked under the same lock that writes hold, so that no event falls between
        the replayed backlog and the live stream.
        """
        resource = request.resource
        assert resource is not None
        self.info(resource)  # before the first yield: an unknown resource is a plain 404
        selector = _selector_of(request)
        yield b""  # let kmock send the headers now
        since = request.params.get("resourceVersion", "")
        timeout = float(request.params.get("timeoutSeconds") or 0) or None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout else None
        bus = self._buses[resource]

        def wanted(event: WatchEvent) -> bool:
            body = event["object"]
            meta = body.get("metadata", {})
            return (
                (request.namespace is None or meta.get("namespace") == request.namespace)
                and (request.name is None or meta.get("name") == request.name)
                and selector.matches(body)
            )

        if since.isdigit() and 0 < int(since) < self._compacted:
            # What kube-apiserver streams then: HTTP 200, one ERROR event, the end.
            yield {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self._compacted})",
                    "reason": "Expired",
                    "code": 410,
                },
            }
            return
        async with self._lock:
            mark = await bus.mark()
            if since.isdigit() and int(since) > 0:
                log = self._event_log.get(resource, [])
                backlog = [event for revision, event in log if revision > int(since)]
            else:
                backlog = [
                    {"type": "ADDED", "object": body}
                    for body in self.select(resource, request.namespace, selector)
                ]
        stream = cast(AsyncGenerator[WatchEvent, None], bus.stream(since=mark))
        try:
            for event in backlog:
                if wanted(event):
                    yield event
            while True:
                try:
                    async with asyncio.timeout_at(deadline):
                        event = await anext(stream)
                except TimeoutError:
                    return  # timeoutSeconds: the server ends the watch, the client resumes it
                if wanted(event):
                    yield event
        finally:
            await stream.aclose()
            await bus.unmark(mark)


def _status_response(status: int, reason: str, message: str) -> aiohttp.web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": status,
    }
    return aiohttp.web.json_response(body, status=status)


def _priority_key(payloads: list[Any]) -> Any:
    """kmock's order of reactions: by priority, highest first, priorities padded with zeroes."""
    longest = max((len(p.priorities) for p in payloads), default=0)

    def key(payload: Any) -> tuple[float, ...]:
        padded = tuple(-p for p in payload.priorities)
        return padded + (0,) * (longest - len(padded))

    return key


def _sees(view: Any, request: kmock.Request) -> bool:
    """Whether `request` (just logged by the root) passes through `view`'s chain of filters,
    without scanning the request log; views whose answer depends on other requests (slices,
    exclusions, groups, streams) are asked as kmock asks them."""
    match view:
        case dsl.Root():
            return True
        case dsl.Filter():
            return bool(view.criteria(request)) and _sees(view._source, request)
        case dsl.Priority():
            return _sees(view._source, request)
        case _:
            return request in view


def _request_body(request: kmock.Request) -> Any:
    if request.data is None and request.text and "yaml" in request.headers.get("Content-Type", ""):
        return yaml.safe_load(request.text)
    return request.data


def _selector_of(request: kmock.Request) -> Selector:
    return Selector.parse(
        request.params.get("labelSelector", ""), request.params.get("fieldSelector", "")
    )


async def _parse_namespace_request(
    raw_request: aiohttp.web.BaseRequest, request_id: int
) -> kmock.Request:
    """Parse `/api/v1/namespaces[/<name>[/status]]` as kmock would if it could."""
    match = _NAMESPACE_PATH.fullmatch(raw_request.path)
    assert match is not None
    name, subresource = match["name"], match["sub"]
    # Let kmock parse the method, query and body from a look-alike path that it understands.
    look_alike = f"/api/v1/namespaces-{request_id}" + (f"/{name}" if name else "")
    rel_url = raw_request.rel_url.with_path(look_alike).with_query(raw_request.rel_url.query)
    clone = raw_request.clone(rel_url=rel_url)
    parsed = await rendering.Request._parse(clone, id=request_id)
    return attrs.evolve(
        parsed,
        url=raw_request.url,
        resource=resource_of(NAMESPACES),
        namespace=None,
        name=name,
        subresource=subresource,
        raw_request=raw_request,
    )
