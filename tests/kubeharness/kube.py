"""A Kubernetes API on loopback for the operator's integration tests, and the real kopf operator
running against it.

The API server is kmock's `KubernetesEmulator` (kmock 0.8, by kopf's author), made strict enough
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
  watches that resume from a `resourceVersion` without losing or repeating events, and
  `timeoutSeconds` (the server ends the watch, as a real one does);
- unknown fields pruned by the CRD's structural schema, as the API server prunes them.

kmock 0.8 itself cannot parse `/api/v1/namespaces[/<name>]` (it fails with a ValueError, so kopf's
namespace observer gets HTTP 500): the emulator below parses those paths itself.

`kube_api()` starts it all and yields a `Kube`: object helpers (create/get/list/patch/delete, the
"kubelet" helpers that set a Pod's status), the request log (`calls()`, `writes()`), injected
errors (`fail()`), `wait_for()`, and `operator()`, which runs a kopf operator in a thread of its
own against the server. tests/kube.md says how to use it and what it does not emulate.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import contextlib
import copy
import dataclasses
import datetime
import enum
import functools
import inspect
import re
import secrets
import ssl
import threading
import uuid
import warnings
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from pathlib import Path
from types import EllipsisType
from typing import Any, TypeVar, cast, overload

import aiohttp
import aiohttp.test_utils
import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
import kopf
import kubernetes.client
import yaml
from kmock._internal import rendering
from kopf._cogs.structs.credentials import Vault

T = TypeVar("T")
Body = dict[str, Any]

GROUP = "rollout.dev"
VERSION = "v1alpha1"
ROLLOUT_JOBS = f"{GROUP}/{VERSION}/rolloutjobs"
ROLLOUT_TRIALS = f"{GROUP}/{VERSION}/rollouttrials"
PODS = "v1/pods"
EVENTS = "v1/events"
SECRETS = "v1/secrets"
NAMESPACES = "v1/namespaces"
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
DEFAULT_NAMESPACE = "default"
CRDS_DIR = Path(__file__).resolve().parents[2] / "crds"

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ALL_VERBS = frozenset(
    {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)
# What the API server puts in `status` when it creates these objects (their strategies do it).
INITIAL_STATUS: dict[str, Body] = {PODS: {"phase": "Pending"}, NAMESPACES: {"phase": "Active"}}
# Empty ones of these are removed by the API server (kopf knows and expects it).
DROPPED_WHEN_EMPTY = ("finalizers", "labels", "annotations", "ownerReferences")

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


# --------------------------------------------------------------------------------------------
# Small pure helpers.


def now() -> str:
    """The current time as the API server writes it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource_of(ref: str | kmock.resource) -> kmock.resource:
    """`'v1/pods'` or `'rollout.dev/v1alpha1/rolloutjobs'` as kmock's resource reference."""
    resource = ref if isinstance(ref, kmock.resource) else kmock.resource(ref)
    if resource.group is None or resource.version is None or not resource.plural:
        raise ValueError(f"Name a resource as 'v1/pods' or 'group/version/plural', not {ref!r}")
    return resource


def resource_name(resource: kmock.resource) -> str:
    """The inverse of `resource_of`: `'v1/pods'`, `'rollout.dev/v1alpha1/rolloutjobs'`."""
    return f"{api_version(resource)}/{resource.plural}"


def resource_path_of(body: Mapping[str, Any]) -> str:
    """`'v1/pods'` for a Pod: the resource of an object, from its apiVersion and kind."""
    plural = {"Endpoints": "endpoints", "NetworkPolicy": "networkpolicies"}.get(body["kind"])
    if plural is None:
        kind = body["kind"].lower()
        plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    return f"{body['apiVersion']}/{plural}"


def api_version(resource: kmock.resource) -> str:
    return f"{resource.group}/{resource.version}" if resource.group else f"{resource.version}"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def prune(value: Any, schema: Mapping[str, Any]) -> Any:
    """Drop what a structural schema does not declare, as the API server does for custom resources.

    Best effort over the structural-schema rules: `properties`, `additionalProperties`, `items`,
    `x-kubernetes-preserve-unknown-fields` and `x-kubernetes-embedded-resource`. No validation.
    """
    if isinstance(value, list):
        items = schema.get("items")
        return [prune(item, items) for item in value] if isinstance(items, Mapping) else value
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    result: Body = {}
    for key, item in value.items():
        if isinstance(properties, Mapping) and key in properties:
            result[key] = prune(item, properties[key])
        elif isinstance(additional, Mapping):
            result[key] = prune(item, additional)
        elif (
            preserve
            or additional is True
            or (embedded and key in ("apiVersion", "kind", "metadata"))
        ):
            result[key] = item
    return result


def _lookup(body: Mapping[str, Any], dotted: str) -> Any:
    value: Any = body
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _split_selector(text: str) -> list[str]:
    """Split a selector on the commas that are not inside `in (...)` lists."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return [part for part in parts if part]


_SET_TERM = re.compile(r"(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)")
_EQUALITY_TERM = re.compile(r"(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)")
_EXISTS_TERM = re.compile(r"(?P<neg>!?)\s*(?P<key>[^\s!=()]+)")


@dataclasses.dataclass(frozen=True)
class Selector:
    """A parsed `labelSelector` plus `fieldSelector`; `matches(body)` says if an object is in."""

    labels: tuple[tuple[str, str, frozenset[str]], ...] = ()
    fields: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def parse(cls, label_selector: str = "", field_selector: str = "") -> Selector:
        labels: list[tuple[str, str, frozenset[str]]] = []
        for term in _split_selector(label_selector):
            if match := _SET_TERM.fullmatch(term):
                values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
                labels.append((match["key"], match["op"], values))
            elif match := _EQUALITY_TERM.fullmatch(term):
                op = "!=" if match["op"] == "!=" else "="
                labels.append((match["key"], op, frozenset({match["value"]})))
            elif match := _EXISTS_TERM.fullmatch(term):
                labels.append((match["key"], "!" if match["neg"] else "exists", frozenset()))
            else:
                raise bad_request(f"Unable to parse labelSelector term {term!r}")
        fields: list[tuple[str, str, str]] = []
        for term in _split_selector(field_selector):
            if match := _EQUALITY_TERM.fullmatch(term):
                fields.append((match["key"], "!=" if match["op"] == "!=" else "=", match["value"]))
            else:
                raise bad_request(f"Unable to parse fieldSelector term {term!r}")
        return cls(labels=tuple(labels), fields=tuple(fields))

    def matches(self, body: Mapping[str, Any]) -> bool:
        labels: Mapping[str, str] = body.get("metadata", {}).get("labels") or {}
        for key, op, values in self.labels:
            present = key in labels
            if op == "exists" and not present:
                return False
            if op == "!" and present:
                return False
            if op in ("=", "in") and labels.get(key) not in values:
                return False
            if op in ("!=", "notin") and present and labels[key] in values:
                return False
        for path, op, expected in self.fields:
            actual = _lookup(body, path)
            actual_text = "" if actual is None else str(actual)
            if (actual_text == expected) != (op == "="):
                return False
        return True


# --------------------------------------------------------------------------------------------
# Errors in the API server's own shape (a `Status` with the reasons Kubernetes uses).


def api_error(status: int, reason: str, message: str) -> kmock.KubernetesError:
    # Non-empty details, or kmock puts its own traceback there.
    details = {"causes": [{"message": message}]}
    return kmock.KubernetesError(status=status, reason=reason, message=message, details=details)


class PageNotFound(kmock.KubernetesError):
    """What a real API server answers for a path it serves nothing at (a resource whose CRD is
    not installed, or not yet): a plain-text `404 page not found`, not a JSON Status."""

    def __init__(self) -> None:
        super().__init__(status=404, reason="NotFound", message="404 page not found")


def bad_request(message: str) -> kmock.KubernetesError:
    return api_error(400, "BadRequest", message)


def not_found(resource: kmock.resource, name: str | None) -> kmock.KubernetesError:
    what = f"{resource.plural}.{resource.group}" if resource.group else f"{resource.plural}"
    return api_error(404, "NotFound", f'{what} "{name}" not found')


def invalid(message: str) -> kmock.KubernetesError:
    return api_error(422, "Invalid", message)


def conflict(message: str) -> kmock.KubernetesError:
    return api_error(409, "Conflict", message)


# --------------------------------------------------------------------------------------------
# Query parameters, refused as a real API server refuses them.

_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_UINT = re.compile(r"[0-9]+")


def check_query(params: Mapping[str, str]) -> None:
    """Refuse the query parameters a real kube-apiserver refuses, with its status and message.

    Checked against kube-apiserver 1.24: `timeoutSeconds` and `limit` are parsed as integers
    (`timeoutSeconds=270.0` is a 400, which once stopped every watch of the operator at start);
    a `resourceVersion` that is not an unsigned integer is a 500, or a 400 with
    `resourceVersionMatch`. Booleans such as `watch=yes` are taken leniently there too.
    """
    for name in ("timeoutSeconds", "limit"):
        value = params.get(name)
        if value is not None and value != "" and not _GO_INT.fullmatch(value):
            raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax')
    version = params.get("resourceVersion")
    if version and not _GO_UINT.fullmatch(version):
        detail = (
            f'resourceVersion: Invalid value: "{version}": strconv.ParseUint: parsing '
            f'"{version}": invalid syntax'
        )
        if params.get("resourceVersionMatch"):
            raise bad_request(f"invalid resource version: {detail}")
        raise api_error(500, "", detail)


# --------------------------------------------------------------------------------------------
# RBAC, as kube-apiserver's RBAC authorizer decides.


@dataclasses.dataclass(frozen=True)
class UserInfo:
    """An authenticated user: a name and groups (`system:authenticated` is implied)."""

    name: str
    groups: tuple[str, ...] = ()

    def is_subject(self, subject: Mapping[str, Any]) -> bool:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "ServiceAccount":
            return self.name == f"system:serviceaccount:{subject.get('namespace')}:{name}"
        if kind == "User":
            return self.name == name
        if kind == "Group":
            return name in (*self.groups, "system:authenticated")
        return False


@dataclasses.dataclass(frozen=True)
class RequestAttributes:
    """What RBAC decides on: verb, API group, resource (with subresource), namespace, name."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None

    @classmethod
    def of(cls, request: kmock.Request) -> RequestAttributes:
        assert request.resource is not None
        method = request.method.value
        watching = request.params.get("watch", "").lower() in ("true", "1")
        verb = {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if request.name else "deletecollection",
        }.get(method) or ("get" if request.name else "watch" if watching else "list")
        resource = request.resource.plural or ""
        if request.subresource:
            resource += f"/{request.subresource}"
        return cls(verb, request.resource.group or "", resource, request.namespace, request.name)

    def forbidden(self, user: str) -> str:
        """The API server's message when RBAC refuses."""
        plural = self.resource.split("/")[0]
        what = f"{plural}.{self.group}" if self.group else plural
        if self.name:
            what += f' "{self.name}"'
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return (
            f'{what} is forbidden: User "{user}" cannot {self.verb} resource "{self.resource}" '
            f'in API group "{self.group}" {where}'
        )


def rbac_allows(rules: Iterable[Mapping[str, Any]], attributes: RequestAttributes) -> bool:
    """Whether any rule grants the request (rules only grant; nothing denies)."""
    for rule in rules:
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        verbs, names = rule.get("verbs") or [], rule.get("resourceNames") or []
        if (
            ("*" in groups or attributes.group in groups)
            and ("*" in resources or attributes.resource in resources)
            and ("*" in verbs or attributes.verb in verbs)
            and (not names or attributes.name in names)
        ):
            return True
    return False


# --------------------------------------------------------------------------------------------
# Answers in pieces.

CHUNKED_AFTER_BYTES = 2048
"""Go's HTTP server buffers this much of an answer; a longer one (a Pod with its managed fields,
any list) goes out chunked, its head and first piece before the rest."""
CHUNK_PAUSE_SEC = 0.003
"""How long the emulator waits between the first piece of a long answer and the rest: long
enough that a client which hands back a connection without reading the answer to its end
(main's `create_pod` once did) reuses it while the rest is still on its way, as it happened
against a real API server under load."""


async def _send_in_pieces(
    request: aiohttp.web.BaseRequest,
    response: aiohttp.web.Response,
    body: bytes,
    pause: float,
) -> aiohttp.web.StreamResponse:
    stream = aiohttp.web.StreamResponse(status=response.status, reason=response.reason)
    for name, value in response.headers.items():
        if name.lower() not in ("content-length", "transfer-encoding"):
            stream.headers[name] = value
    stream.enable_chunked_encoding()
    try:
        await stream.prepare(request)
        await stream.write(body[:CHUNKED_AFTER_BYTES])
        await asyncio.sleep(pause)
        await stream.write(body[CHUNKED_AFTER_BYTES:])
        await stream.write_eof()
    except ConnectionError:
        pass  # the client went away
    return stream


# --------------------------------------------------------------------------------------------
# The API server.

Key = tuple[kmock.resource, str | None, str]
WatchEvent = dict[str, Any]
# kmock 0.8 mis-parses these paths (it reads "namespaces" as the start of "namespaces/<ns>/...").
_NAMESPACE_PATH = re.compile(
    r"/api/v1/namespaces(?:/(?P<name>[^/]+)(?:/(?P<sub>status|finalize))?)?/?"
)


@dataclasses.dataclass(frozen=True)
class Schema:
    """What the server knows of a resource beyond kmock's discovery info."""

    openapi: Mapping[str, Any] | None = None


@dataclasses.dataclass
class Fault:
    """An error the server answers instead of serving a matching request, `remaining` times."""

    method: str
    resource: kmock.resource | None
    name: str | None
    subresource: str | None
    error: kmock.KubernetesError
    remaining: int
    any_subresource: bool = False

    def matches(self, request: kmock.Request) -> bool:
        name = request.name or _body_meta(request.data).get("name")
        return (
            self.remaining > 0
            and request.method.value == self.method
            and (self.resource is None or request.resource == self.resource)
            and (self.name is None or name == self.name)
            and (self.any_subresource or request.subresource == self.subresource)
        )


def _body_meta(data: Any) -> Mapping[str, Any]:
    meta = data.get("metadata") if isinstance(data, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


@attrs.define(kw_only=True)
class ClusterEmulator(kmock.KubernetesEmulator):
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

    # ---- authentication and RBAC

    def _authorize(self, request: kmock.Request) -> None:
        """RBAC, as a real API server enforces it, for the users of `rbac_users` (by token).

        Other clients (no token, or one not listed) are cluster admins, as the test's own
        helpers are. The rules come from the Roles, ClusterRoles and their bindings stored here
        (the chart's, applied by the test).
        """
        header = request.headers.get("Authorization", "")
        user = self.rbac_users.get(header.removeprefix("Bearer ").strip())
        if user is None:
            return
        assert request.resource is not None
        attributes = RequestAttributes.of(request)
        if not rbac_allows(self._rbac_rules(user, attributes.namespace), attributes):
            raise api_error(403, "Forbidden", attributes.forbidden(user.name))

    def _rbac_rules(self, user: UserInfo, namespace: str | None) -> list[Body]:
        """Every rule bound to `user` that applies in `namespace` (None: cluster scope)."""
        rbac = "rbac.authorization.k8s.io/v1"
        roles = {
            (None, body["metadata"]["name"]): body
            for body in self.select(resource_of(f"{rbac}/clusterroles"), None, Selector())
        }
        roles.update(
            ((body["metadata"]["namespace"], body["metadata"]["name"]), body)
            for body in self.select(resource_of(f"{rbac}/roles"), None, Selector())
        )
        bindings = [
            *self.select(resource_of(f"{rbac}/clusterrolebindings"), None, Selector()),
            *(
                self.select(resource_of(f"{rbac}/rolebindings"), namespace, Selector())
                if namespace
                else []
            ),
        ]
        rules: list[Body] = []
        for binding in bindings:
            if not any(user.is_subject(subject) for subject in binding.get("subjects") or []):
                continue
            ref = binding["roleRef"]
            where = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
            role = roles.get((where, ref["name"]))
            if role is not None:
                rules += role.get("rules") or []
        return rules

    # ---- HTTP entry points

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """kmock's own entry point, with the namespace paths it cannot parse parsed here, and
        large answers sent in pieces as a real API server sends them."""
        response = await self._serve(raw_request)
        if isinstance(response, aiohttp.web.Response) and not response.prepared:
            body = response.body
            if isinstance(body, bytes) and len(body) > CHUNKED_AFTER_BYTES:
                return await _send_in_pieces(raw_request, response, body, self.chunk_pause)
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
        return await super(kmock.KubernetesEmulator, self)._handle(request)

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

    # ---- state

    def current(self, key: Key) -> Body | None:
        """The object's stored body (do not mutate it), or None if it does not exist."""
        if key not in self.objects:
            return None
        stored = self.objects[key]
        return None if stored.deleted else stored.raw

    def select(
        self, resource: kmock.resource, namespace: str | None, selector: Selector
    ) -> list[Body]:
        """The objects a list returns, in a real API server's order: by their etcd key
        (`<namespace>/<name>`), not by when they were made."""
        found = []
        for (res, ns, name), stored in self.objects.items():
            if res == resource and (namespace is None or ns == namespace) and not stored.deleted:
                body = stored.raw
                if selector.matches(body):
                    found.append((f"{ns}/{name}" if ns else name, body))
        return [body for _key, body in sorted(found, key=lambda item: item[0])]

    def _store(self, key: Key, body: Body) -> None:
        if key in self.objects:
            self.objects[key].history.append(body)
        else:
            self.objects[key] = body

    def _next_revision(self) -> str:
        self.revision += 1
        return str(self.revision)

    async def _publish(self, resource: kmock.resource, kind: str, body: Body) -> None:
        event: WatchEvent = {"type": kind, "object": body}
        revision = int(body["metadata"]["resourceVersion"])
        self._event_log.setdefault(resource, []).append((revision, event))
        await self._buses[resource].put(event)

    # ---- writes

    async def write(
        self,
        *,
        method: str,
        resource: kmock.resource,
        namespace: str | None,
        name: str | None,
        subresource: str | None = None,
        body: Any = None,
        content_type: str = MERGE_PATCH,
        params: Mapping[str, str] | None = None,
    ) -> Body:
        """Create (POST), patch (PATCH), replace (PUT) or delete (DELETE) one object.

        Returns what the API server would answer; raises `kmock.KubernetesError` with the status
        and reason a real API server uses (404 NotFound, 409 AlreadyExists/Conflict, 422 Invalid).
        """
        if params and params.get("dryRun"):
            raise bad_request("dryRun is not emulated: the harness would have applied the write")
        events: list[tuple[kmock.resource, str, Body]] = []
        async with self._lock:
            info = self.info(resource)
            if method == "POST" and (name is not None or subresource is not None):
                raise api_error(405, "MethodNotAllowed", f"POST to {name}/{subresource}")
            if method == "POST":
                result = self._create(resource, info, namespace, body, events)
            elif name is None:
                raise api_error(405, "MethodNotAllowed", f"{method} on a collection")
            elif method == "DELETE":
                key = (resource, namespace if info.namespaced else None, name)
                propagation = body.get("propagationPolicy") if isinstance(body, dict) else None
                result = self._delete(key, events, orphan=propagation == "Orphan")
            elif method == "PATCH" and content_type.startswith(APPLY_PATCH):
                result = self._apply(resource, info, namespace, name, body, events)
            elif method in ("PATCH", "PUT"):
                key = (resource, namespace if info.namespaced else None, name)
                current = self.current(key)
                if current is None:
                    raise not_found(resource, name)
                if subresource not in (None, "status") or (
                    subresource == "status" and "status" not in info.subresources
                ):
                    raise api_error(404, "NotFound", f"no subresource {subresource!r}")
                if method == "PUT":
                    wanted = self._replacement(current, body)
                else:
                    wanted = self._patched(resource, current, body, content_type)
                result = self._update(key, info, current, wanted, subresource, events)
            else:
                raise api_error(405, "MethodNotAllowed", f"{method} is not emulated")
            if resource == resource_of(CRDS):
                self._serve_crd(result["metadata"]["name"])
            for event_resource, kind, event_body in events:
                await self._publish(event_resource, kind, event_body)
        return result

    def _serve_crd(self, name: str) -> None:
        """Serve the resources of a CRD once it exists (however it was created), and no longer
        once it is gone, as a real API server does."""
        for ref in self._crd_resources.pop(name, ()):
            self.resources.pop(ref, None)
            self._schemas.pop(ref, None)
        crd = self.current((resource_of(CRDS), None, name))
        if crd is None:
            return
        spec = crd["spec"]
        names = spec["names"]
        served = []
        for version in spec["versions"]:
            if not version.get("served", True):
                continue
            ref = resource_of(f"{spec['group']}/{version['name']}/{names['plural']}")
            self.register(
                ref,
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                subresources=(version.get("subresources") or {}).keys(),
                singular=names.get("singular"),
                shortnames=names.get("shortNames", ()),
                categories=names.get("categories", ()),
                openapi=(version.get("schema") or {}).get("openAPIV3Schema"),
            )
            served.append(ref)
        self._crd_resources[name] = served

    def _create(
        self,
        resource: kmock.resource,
        info: kmock.ResourceInfo,
        namespace: str | None,
        body: Any,
        events: list[tuple[kmock.resource, str, Body]],
    ) -> Body:
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise bad_request("the body must be an object with a metadata object")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        kind = body.setdefault("kind", info.kind)
        version = body.setdefault("apiVersion", api_version(resource))
        if (kind, version) != (info.kind, api_version(resource)):
            raise bad_request(
                f"{version}/{kind} does not match the resource {resource_name(resource)}"
            )
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid("metadata.name: Required value: name or generateName is required")
            suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        if info.namespaced:
            if namespace is not None and meta.get("namespace", namespace) != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on"
                    " the request"
                )
            namespace = namespace or meta.get("namespace")
            if not namespace:
                raise bad_request(f"{resource_name(resource)} is namespaced: name a namespace")
            if self.current((resource_of(NAMESPACES), None, namespace)) is None:
                raise not_found(resource_of(NAMESPACES), namespace)
            meta["namespace"] = namespace
        else:
            namespace = None
            meta.pop("namespace", None)
        key = (resource, namespace, meta["name"])
        if self.current(key) is not None:
            what = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
            raise api_error(409, "AlreadyExists", f'{what} "{meta["name"]}" already exists')
        if "status" in info.subresources:
            body.pop("status", None)
        if resource_name(resource) in INITIAL_STATUS:
            body["status"] = copy.deepcopy(INITIAL_STATUS[resource_name(resource)])
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        meta.update(
            uid=str(uuid.uuid4()),
            creationTimestamp=now(),
            generation=1,
            resourceVersion=self._next_revision(),
        )
        created = self._normalised(resource, body)
        self._store(key, created)
        events.append((resource, "ADDED", created))
        return created

    def _patched(
        self, resource: kmock.resource, current: Body, patch: Any, content_type: str
    ) -> Body:
        if content_type.startswith(JSON_PATCH):
            if not isinstance(patch, list):
                raise bad_request("a JSON patch must be a list of operations")
            try:
                result: Any = jsonpatch.apply_patch(copy.deepcopy(current), patch)
            except jsonpatch.JsonPatchTestFailed as exc:
                raise invalid(f"the JSON patch test failed: {exc}") from exc
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
                raise invalid(f"the JSON patch cannot be applied: {exc}") from exc
            if not isinstance(result, dict):
                raise invalid("the JSON patch must leave an object")
            return result
        is_custom = self._schemas.get(resource, Schema()).openapi is not None
        if content_type.startswith(STRATEGIC_PATCH) and is_custom:
            raise api_error(
                415,
                "UnsupportedMediaType",
                "strategic merge patch is not supported for custom"
                " resources; use a merge patch or a JSON patch",
            )
        if not isinstance(patch, dict):
            raise bad_request("a merge patch must be an object")
        wanted_version = _body_meta(patch).get("resourceVersion")
        if wanted_version is not None and wanted_version != current["metadata"]["resourceVersion"]:
            raise conflict(
                "the object has been modified; please apply your changes to the latest version"
                " and try again"
            )
        result = merge_patch(current, patch)
        assert isinstance(result, dict)
        return result

    def _replacement(self, current: Body, body: Any) -> Body:
        if not isinstance(body, dict):
            raise bad_request("the body must be an object")
        wanted_version = _body_meta(body).get("resourceVersion")
        if wanted_version is not None and wanted_version != current["metadata"]["resourceVersion"]:
            raise conflict(
                "the object has been modified; please apply your changes to the latest version"
                " and try again"
            )
        return copy.deepcopy(body)

    def _apply(
        self,
        resource: kmock.resource,
        info: kmock.ResourceInfo,
        namespace: str | None,
        name: str,
        body: Any,
        events: list[tuple[kmock.resource, str, Body]],
    ) -> Body:
        """Server-side apply, approximated: create if absent, else a merge patch (no managers)."""
        if not isinstance(body, dict):
            raise bad_request("an applied configuration must be an object")
        key = (resource, namespace if info.namespaced else None, name)
        current = self.current(key)
        if current is None:
            created = copy.deepcopy(body)
            created.setdefault("metadata", {})["name"] = name
            return self._create(resource, info, namespace, created, events)
        wanted = merge_patch(current, body)
        assert isinstance(wanted, dict)
        return self._update(key, info, current, wanted, None, events)

    def _update(
        self,
        key: Key,
        info: kmock.ResourceInfo,
        current: Body,
        wanted: Body,
        subresource: str | None,
        events: list[tuple[kmock.resource, str, Body]],
    ) -> Body:
        resource = key[0]
        if "status" in info.subresources:
            # The status subresource: each endpoint changes only its own part of the object.
            if subresource == "status":
                status = wanted.get("status")
                wanted = copy.deepcopy(current)
                wanted.pop("status", None)
                if status is not None:
                    wanted["status"] = status
            else:
                wanted.pop("status", None)
                if "status" in current:
                    wanted["status"] = copy.deepcopy(current["status"])
        meta = wanted.get("metadata")
        if not isinstance(meta, dict):
            raise invalid("metadata: Required value")
        old_meta = current["metadata"]
        for field in (
            "name", "namespace", "uid", "creationTimestamp", "generation", "resourceVersion",
            "deletionTimestamp", "deletionGracePeriodSeconds",
        ):  # fmt: skip
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        wanted["apiVersion"], wanted["kind"] = current["apiVersion"], current["kind"]
        wanted = self._normalised(resource, wanted)
        if old_meta.get("deletionTimestamp") and set(
            wanted["metadata"].get("finalizers", [])
        ) - set(old_meta.get("finalizers", [])):
            raise invalid("no new finalizers can be added if the object is being deleted")
        if wanted == current:
            return current  # a no-op write changes nothing: no new resourceVersion, no event
        if _essence(wanted) != _essence(current):
            wanted["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        wanted["metadata"]["resourceVersion"] = self._next_revision()
        self._store(key, wanted)
        if wanted["metadata"].get("deletionTimestamp") and not wanted["metadata"].get("finalizers"):
            self.objects[key].delete()
            events.append((resource, "DELETED", wanted))
            self._collect_dependents(wanted, events)
        else:
            events.append((resource, "MODIFIED", wanted))
        return wanted

    def _delete(
        self, key: Key, events: list[tuple[kmock.resource, str, Body]], *, orphan: bool = False
    ) -> Body:
        current = self.current(key)
        if current is None:
            raise not_found(key[0], key[2])
        if current["metadata"].get("deletionTimestamp"):
            return current
        final = copy.deepcopy(current)
        final["metadata"]["resourceVersion"] = self._next_revision()
        if current["metadata"].get("finalizers"):
            final["metadata"].update(
                deletionTimestamp=now(),
                deletionGracePeriodSeconds=0,
                generation=current["metadata"].get("generation", 1) + 1,
            )
            self._store(key, final)
            events.append((key[0], "MODIFIED", final))
            return final
        self._store(key, final)
        self.objects[key].delete()
        events.append((key[0], "DELETED", final))
        if not orphan:
            self._collect_dependents(final, events)
        return final

    def _collect_dependents(
        self, owner: Body, events: list[tuple[kmock.resource, str, Body]]
    ) -> None:
        """Delete what the owner owned, as the garbage collector does (background propagation)."""
        if not self.gc_dependents:
            return
        uid = owner["metadata"]["uid"]
        dependents = [
            key
            for key, stored in list(self.objects.items())
            if not stored.deleted
            and uid in {ref.get("uid") for ref in stored.raw["metadata"].get("ownerReferences", [])}
        ]
        for key in dependents:
            if self.current(key) is not None:
                self._delete(key, events)

    def _normalised(self, resource: kmock.resource, body: Body) -> Body:
        schema = self._schemas.get(resource, Schema()).openapi
        if schema is not None:
            kept: Body = {k: body[k] for k in ("apiVersion", "kind", "metadata") if k in body}
            body = {**prune(body, schema), **kept}
        meta = body["metadata"]
        for field in DROPPED_WHEN_EMPTY:
            if field in meta and not meta[field]:
                del meta[field]
        return body


def _essence(body: Body) -> Body:
    """What `generation` counts changes of: everything but metadata and status."""
    return {key: value for key, value in body.items() if key not in ("metadata", "status")}


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


# --------------------------------------------------------------------------------------------
# CRDs.


def crd_manifests(directory: Path) -> list[Body]:
    """Every CustomResourceDefinition in the *.yaml/*.yml files of a directory (multi-document)."""
    manifests: list[Body] = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                manifests.append(document)
    return manifests


def minimal_crd(
    kind: str,
    plural: str,
    *,
    group: str = GROUP,
    version: str = VERSION,
    short_names: Sequence[str] = (),
    namespaced: bool = True,
) -> Body:
    """A CRD with the status subresource and a schema that keeps every field.

    For tests written before the real CRDs exist in crds/; they prune nothing.
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
                "shortNames": list(short_names),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def minimal_rollout_crds() -> list[Body]:
    """Minimal CRDs for RolloutJob (rj) and RolloutTrial (rt), until crds/ holds the real ones."""
    return [
        minimal_crd("RolloutJob", "rolloutjobs", short_names=["rj"]),
        minimal_crd("RolloutTrial", "rollouttrials", short_names=["rt"]),
    ]


# --------------------------------------------------------------------------------------------
# The request log.


@dataclasses.dataclass(frozen=True)
class ApiCall:
    """One HTTP request the API server received (from the operator or any other client)."""

    method: str
    path: str
    params: Mapping[str, str]
    resource: str | None  # 'v1/pods', 'rollout.dev/v1alpha1/rolloutjobs'
    namespace: str | None
    name: str | None  # for POST: the name in the body (None with generateName)
    subresource: str | None
    body: Any
    user_agent: str

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS

    @property
    def is_watch(self) -> bool:
        return self.method == "GET" and self.params.get("watch") == "true"

    @classmethod
    def of(cls, request: kmock.Request) -> ApiCall:
        resource = request.resource
        meta = _body_meta(request.data) if request.method.value == "POST" else {}
        return cls(
            method=request.method.value,
            path=request.url.path,
            params=dict(request.params),
            resource=resource_name(resource) if resource is not None and resource.plural else None,
            namespace=request.namespace or meta.get("namespace"),
            name=request.name or meta.get("name"),
            subresource=request.subresource,
            body=request.data,
            user_agent=request.headers.get("User-Agent", ""),
        )

    def __str__(self) -> str:
        query = "&".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.method} {self.path}{'?' + query if query else ''}"


# --------------------------------------------------------------------------------------------
# Waiting.


@overload
async def wait_for(
    predicate: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    interval: float = ...,
    what: str | None = ...,
    checks: Iterable[Callable[[], None]] = ...,
) -> T: ...


@overload
async def wait_for(
    predicate: Callable[[], T | None],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    interval: float = ...,
    what: str | None = ...,
    checks: Iterable[Callable[[], None]] = ...,
) -> T: ...


async def wait_for(
    predicate: Callable[[], Any],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - polling with a deadline is the point
    interval: float = 0.02,
    what: str | None = None,
    checks: Iterable[Callable[[], None]] = (),
) -> Any:
    """Poll `predicate` (sync or async) until it returns something truthy, and return that.

    Raises TimeoutError naming `what` and the last value once `timeout` seconds have passed.
    `checks` run before every poll and may raise to fail fast (e.g. "the operator crashed").
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        for check in checks:
            check()
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            description = what or getattr(predicate, "__name__", repr(predicate))
            raise TimeoutError(f"{description}: not true within {timeout}s (last: {value!r})")
        await asyncio.sleep(interval)


# --------------------------------------------------------------------------------------------
# The kopf operator, in a thread and an event loop of its own.


class OperatorCrashed(RuntimeError):
    """The operator under test stopped by itself while the test expected it to run."""


def fast_settings(settings: kopf.OperatorSettings | None = None) -> kopf.OperatorSettings:
    """Settings that make kopf quick in tests, laid over `settings` (or kopf's defaults).

    Only timing changes: watches end after a few seconds (the emulator honours
    `timeoutSeconds`), API errors are retried after short pauses, and the operator runs
    standalone (no peering) unless the caller asks for peering when starting it.
    """
    settings = settings if settings is not None else kopf.OperatorSettings()
    settings.watching.server_timeout = 5
    settings.watching.client_timeout = 10
    settings.watching.connect_timeout = 2
    settings.watching.reconnect_backoff = 0.05
    settings.networking.request_timeout = 10
    settings.networking.connect_timeout = 2
    settings.networking.error_backoffs = [0.05, 0.1, 0.2, 0.5]
    settings.queueing.idle_timeout = 1.0
    settings.queueing.exit_timeout = 1.0
    settings.peering.standalone = True
    settings.process.ultimate_exiting_timeout = None
    return settings


class RunningOperator:
    """A kopf operator running in its own thread and event loop against the loopback API.

    The thread keeps the operator's asyncio tasks apart from the test's loop, which serves the
    API: kopf cancels every task it did not start when it stops, and would otherwise cancel the
    server's connection handlers too. Credentials go straight into kopf's vault, so no login
    handler runs (the operator's own registry is not touched).
    """

    def __init__(
        self,
        connection: kopf.ConnectionInfo,
        *,
        registry: kopf.OperatorRegistry | None,
        settings: kopf.OperatorSettings,
        namespaces: Sequence[str],
        clusterwide: bool,
        standalone: bool | None,
        peering_name: str | None,
        memo: object | None,
    ) -> None:
        self.connection = connection
        self._kwargs: dict[str, Any] = dict(
            registry=registry,
            settings=settings,
            namespaces=() if clusterwide else list(namespaces),
            clusterwide=clusterwide,
            standalone=standalone,
            peering_name=peering_name,
            memo=memo,
        )
        self._ready = threading.Event()
        self._stopping = False  # asked to stop or killed: a dead thread is then no crash
        self._killed = False
        # Made in the operator's loop (see _operate).
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kopf-operator", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._operate())
        except asyncio.CancelledError:
            if not self._killed:
                self.error = OperatorCrashed("the operator was cancelled")
        except BaseException as exc:  # re-raised in the test's thread by check()/stop()
            self.error = exc

    async def _operate(self) -> None:
        # An asyncio.Event, not a threading.Event: kopf would wait for that in an executor
        # thread, and asyncio.run() waits for that thread before it returns.
        stop = self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        vault = Vault({"kube-harness": self.connection})
        existing = asyncio.all_tasks()
        tasks = await kopf.spawn_tasks(
            stop_flag=stop, ready_flag=self._ready, vault=vault, **self._kwargs
        )
        for task in tasks:
            # When the operator ends by itself (a failed startup handler, a crashed watcher),
            # kopf leaves its stop-flag waiter running and then waits 5 s for it: raise the
            # flag as soon as any root task ends, so that it ends at once.
            task.add_done_callback(lambda _: stop.set())
        await kopf.run_tasks(tasks, ignored=existing)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def check(self) -> None:
        """Raise if the operator has stopped without being asked to."""
        if not self._thread.is_alive() and not self._stopping:
            raise OperatorCrashed(f"the operator stopped by itself: {_describe(self.error)}") from (
                self.error
            )

    async def start(self, within: float = 10.0) -> None:
        """Start the thread and wait until kopf says it is ready (startup handlers done)."""
        self._thread.start()
        await wait_for(
            self._ready.is_set, timeout=within, what="operator ready", checks=[self.check]
        )

    async def stop(self, within: float = 10.0) -> None:
        """Stop gracefully, as on SIGTERM: in-flight handlers finish or are cancelled by kopf."""
        self._stopping = True
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        await self._join(within)

    async def kill(self, within: float = 10.0) -> None:
        """Cancel the operator at once: the closest thing to SIGKILL inside one process.

        Handlers are interrupted wherever they are; nothing kopf keeps in memory survives.
        For a real SIGKILL, run the operator as a subprocess with `Kube.write_kubeconfig()`.
        """
        self._stopping = self._killed = True
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        await self._join(within)

    async def _join(self, within: float) -> None:
        await wait_for(lambda: not self._thread.is_alive(), timeout=within, what="operator stop")
        if self.error is not None:
            raise OperatorCrashed(f"the operator failed: {_describe(self.error)}") from self.error


def _describe(error: BaseException | None) -> str:
    """An operator's error, with the handlers' own errors when kopf only says "handlers failed"."""
    if error is None:
        return "no error"
    outcomes = getattr(error, "outcomes", None)  # kopf's ActivityError, e.g. startup handlers
    if isinstance(outcomes, Mapping):
        causes = [f"{handler}: {outcome.exception!r}" for handler, outcome in outcomes.items()
                  if getattr(outcome, "exception", None) is not None]  # fmt: skip
        return f"{error!r} ({'; '.join(causes)})"
    return repr(error)


# --------------------------------------------------------------------------------------------
# What a test holds.

Namespace = str | None | EllipsisType
"""A namespace argument: a name, None (cluster-scoped or all namespaces), or `...` for the
test's own namespace (`Kube.namespace`)."""


class Identity(enum.Enum):
    """Who talks to the API: each is a user of its own (a bearer token), so that RBAC applies to
    what the operator does, once the chart's RBAC is applied (`Kube.apply_chart_rbac`)."""

    OPERATOR = "operator"
    """The operator installed cluster-wide: the chart's ServiceAccount in `rollout-system`."""
    NAMESPACED_OPERATOR = "namespaced-operator"
    """The operator installed with `watchNamespaces`: its ServiceAccount in
    `rollout-namespaced`, its Roles in the namespaces it watches."""
    USER = "user"
    """A person or a CI pipeline running the `rollout` CLI or kubectl: a cluster admin."""


CHART = Path(__file__).resolve().parents[2] / "charts" / "rollout-operator"
OPERATOR_RELEASE = "rollout-operator"
RELEASE_NAMESPACES = {
    Identity.OPERATOR: "rollout-system",
    Identity.NAMESPACED_OPERATOR: "rollout-namespaced",
}
RBAC_KINDS = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


@functools.cache
def chart_rbac(release_namespace: str, watch_namespaces: tuple[str, ...] = ()) -> tuple[Body, ...]:
    """The operator's ServiceAccount and RBAC objects as the chart renders them (release
    `rollout-operator`, watching `watch_namespaces` or, without them, the whole cluster)."""
    import helm_python as helm  # the chart's own engine; only tests that apply RBAC need it

    values: Body = {"watchNamespaces": list(watch_namespaces)} if watch_namespaces else {}
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(
            values=values, name=OPERATOR_RELEASE, namespace=release_namespace, is_install=True
        )
    objects = [
        document
        for template, text in sorted(manifests.items())
        if not template.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document and document["kind"] in RBAC_KINDS
    ]
    bound = {
        s["name"] for o in objects for s in o.get("subjects", []) if s["kind"] == "ServiceAccount"
    }
    return tuple(
        o for o in objects if o["kind"] != "ServiceAccount" or o["metadata"]["name"] in bound
    )


def operator_user(identity: Identity) -> UserInfo:
    """The user the API sees for an operator identity: the chart's ServiceAccount."""
    namespace = RELEASE_NAMESPACES[identity]
    account = next(o for o in chart_rbac(namespace) if o["kind"] == "ServiceAccount")
    name = account["metadata"]["name"]
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
    return UserInfo(f"system:serviceaccount:{namespace}:{name}", groups)


class Kube(abc.ABC):
    """A Kubernetes API for one test: the emulator (`EmulatedKube`) or a real kube-apiserver
    (`kube_real.RealKube`), behind the same helpers.

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

    async def create_namespace(self, name: str) -> Body:
        return await self.create(NAMESPACES, {"metadata": {"name": name}})

    async def apply_chart_rbac(self, watch_namespaces: Sequence[str] = ()) -> Identity:
        """Apply the chart's RBAC for the operator, cluster-wide or (with `watch_namespaces`) for
        those namespaces only, and return the identity the operator then runs as. From then on
        the API enforces it on that identity's requests, as a real API server does."""
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
        self._enforce_rbac(identity)
        return identity

    @abc.abstractmethod
    def _enforce_rbac(self, identity: Identity) -> None:
        """Make the API decide `identity`'s requests by RBAC (a real one always does)."""

    async def new_namespace(self, suffix: str) -> str:
        """A further namespace for this test: `suffix` on the emulator (a server of its own)."""
        await self.create_namespace(suffix)
        return suffix

    # ---- the kubelet

    @abc.abstractmethod
    async def _schedule(self, pod: Body) -> None:
        """Bind the Pod to the test's node before its status is set, if it is not yet."""

    async def set_pod_status(
        self,
        name: str,
        namespace: Namespace = ...,
        *,
        containers: Mapping[str, Mapping[str, Any]] | None = None,
        phase: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        conditions: Sequence[Mapping[str, Any]] | None = None,
    ) -> Body:
        """Write a Pod's status as the kubelet would, through the status subresource.

        `containers` maps container names (from the Pod's spec) to states made by
        `running()`, `terminated()` or `waiting()`; containers not named keep their state
        (or are "waiting: ContainerCreating"). Without `phase`, it follows from the states as
        for `restartPolicy: Never`: all terminated with 0 -> Succeeded, all terminated -> Failed,
        any running -> Running, else Pending. A Pod that gets running or terminated containers
        is bound to the test's node first, as the scheduler would have done.
        """
        pod = await self.get(PODS, name, namespace)
        spec_containers = [c for c in pod.get("spec", {}).get("containers", [])]
        known = {c["name"] for c in spec_containers}
        unknown = set(containers or {}) - known
        if unknown:
            raise ValueError(
                f"pod {self._ns(namespace)}/{name} has no containers {sorted(unknown)}"
            )
        old_statuses = {s["name"]: s for s in pod.get("status", {}).get("containerStatuses", [])}
        statuses = []
        for container in spec_containers:
            state = (containers or {}).get(container["name"])
            if state is None:
                old = old_statuses.get(container["name"])
                state = old["state"] if old else waiting("ContainerCreating")
            is_running = "running" in state
            old = old_statuses.get(container["name"])
            container_id = (old or {}).get("containerID") or f"containerd://{uuid.uuid4().hex}"
            statuses.append({
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "containerID": None if "waiting" in state else container_id,
                "ready": is_running,
                "started": is_running,
                "restartCount": 0,
                "state": dict(state),
                "lastState": {},
            })  # fmt: skip
        for status in statuses:
            if status["containerID"] is None:
                del status["containerID"]
        states = [s["state"] for s in statuses]
        if phase is None:
            phase = _phase_of(states)
        all_ready = bool(statuses) and all(s["ready"] for s in statuses)
        scheduled = conditions is None or any(
            c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions
        )
        if scheduled and any("waiting" not in s for s in states):
            await self._schedule(pod)
        new_status: Body = {
            "phase": phase,
            "containerStatuses": statuses,
            "conditions": builtins.list(conditions)
            if conditions is not None
            else [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if all_ready else "False"},
            ],
            "reason": reason,
            "message": message,
        }
        if phase != "Pending" and "startTime" not in pod.get("status", {}):
            new_status["startTime"] = now()
        return await self.patch_status(PODS, name, new_status, namespace)

    async def run_pod(self, name: str, namespace: Namespace = ...) -> Body:
        """All of the Pod's containers running, phase Running."""
        pod = await self.get(PODS, name, namespace)
        names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        return await self.set_pod_status(name, namespace, containers={n: running() for n in names})

    async def finish_pod(
        self,
        name: str,
        namespace: Namespace = ...,
        *,
        exit_codes: Mapping[str, int] | None = None,
        messages: Mapping[str, str] | None = None,
    ) -> Body:
        """All of the Pod's containers terminated (exit code 0 unless named in `exit_codes`),
        with `messages` as their termination messages; the phase follows from the exit codes."""
        pod = await self.get(PODS, name, namespace)
        names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        exit_codes, messages = exit_codes or {}, messages or {}
        states = {n: terminated(exit_codes.get(n, 0), message=messages.get(n)) for n in names}
        return await self.set_pod_status(name, namespace, containers=states)

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
        stopped or killed inside it.
        """
        running = RunningOperator(
            self.connection(identity),
            registry=registry,
            settings=settings if settings is not None else fast_settings(),
            namespaces=namespaces if namespaces is not None else (self.namespace,),
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


@dataclasses.dataclass
class EmulatedKube(Kube):
    """The loopback API server (the emulator above), seen from a test."""

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
        if namespace is None and not _body_meta(body).get("namespace"):
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


def _phase_of(states: Sequence[Mapping[str, Any]]) -> str:
    if states and all("terminated" in s for s in states):
        codes = [s["terminated"].get("exitCode", 0) for s in states]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
    if any("running" in s for s in states):
        return "Running"
    return "Pending"


def running() -> Body:
    """A container state: running since now."""
    return {"running": {"startedAt": now()}}


def terminated(
    exit_code: int = 0, *, message: str | None = None, reason: str | None = None
) -> Body:
    """A container state: terminated with an exit code and (the runner's) termination message."""
    state: Body = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": now(),
        "finishedAt": now(),
    }
    if message is not None:
        state["message"] = message
    return {"terminated": state}


def waiting(reason: str, message: str | None = None) -> Body:
    """A container state: waiting, e.g. `waiting('ImagePullBackOff', 'Back-off pulling ...')`."""
    state: Body = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {"waiting": state}


class _TestServer(aiohttp.test_utils.RawTestServer):
    """aiohttp's test server that cancels a handler when its client goes away.

    aiohttp leaves it running by default, so a watch whose client is gone would linger until
    the next event for its resource.
    """

    def __init__(self, handler: Any, **kwargs: Any) -> None:
        super().__init__(handler, handler_cancellation=True, **kwargs)


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
