"""Writes, as the API server makes them: create, patch, replace, apply and delete, with the
status subresource, resourceVersion and generation, finalizers, the garbage collector and
pruning by the CRD's schema.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import uuid
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer
import kmock

from kubeharness.emulator.errors import api_error, bad_request, conflict, invalid, not_found
from kubeharness.emulator.names import metadata_errors
from kubeharness.emulator.patching import merge_patch, prune
from kubeharness.emulator.schema import (
    decoded_numbers,
    defaulted,
    invalid_message,
    schema_errors,
)
from kubeharness.emulator.state import Key, Schema
from kubeharness.emulator.validation import check_builtin, pod_errors
from kubeharness.resources import (
    CRDS,
    NAMESPACES,
    PODS,
    SECRETS,
    Body,
    api_version,
    body_meta,
    now,
    resource_name,
    resource_of,
)

# What the API server puts in `status` when it creates these objects (their strategies do it).
INITIAL_STATUS: dict[str, Body] = {PODS: {"phase": "Pending"}, NAMESPACES: {"phase": "Active"}}
# Empty ones of these are removed by the API server (kopf knows and expects it).
DROPPED_WHEN_EMPTY = ("finalizers", "labels", "annotations", "ownerReferences")

MAX_OBJECT_BYTES = 1536 * 1024
"""etcd's default limit on a request (`--max-request-bytes`), which bounds a stored object."""
GRPC_MAX_BYTES = 2 * 1024 * 1024
"""kube-apiserver's limit on a message to etcd; beyond it the write fails before etcd sees it."""

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class ObjectWrites:
    """Every write, from HTTP and from the test helpers alike (a mixin of `ClusterEmulator`)."""

    __slots__ = ()

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
        if self._is_custom(resource) and version != api_version(resource):
            raise bad_request(
                f"the API version in the data ({version}) does not match the expected API "
                f"version ({api_version(resource)})"
            )
        if self._is_custom(resource) and kind != info.kind:
            # A custom resource's kind is checked with its schema: a 422, in the body's kind.
            raise invalid(
                invalid_message(
                    str(kind),
                    resource.group or "",
                    str(meta.get("name", "")),
                    [f'kind: Invalid value: "{kind}": must be {info.kind}'],
                )
            )
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
        check_builtin(resource, body)
        created = self._normalised(resource, body)
        self._validate(resource, created)
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
        wanted_version = body_meta(patch).get("resourceVersion")
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
        wanted_version = body_meta(body).get("resourceVersion")
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
        new_uid = meta.get("uid")
        if new_uid and new_uid != old_meta.get("uid"):
            # kube-apiserver's ValidateObjectMetaUpdate: the UID is immutable, which makes a UID
            # in a patch a precondition (the garbage collector's and kubelets' patches use it).
            error = f'metadata.uid: Invalid value: "{new_uid}": field is immutable'
            raise invalid(invalid_message(current["kind"], key[0].group or "", key[2], [error]))
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
        check_builtin(resource, wanted)
        self._validate(resource, wanted)
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

    def _is_custom(self, resource: kmock.resource) -> bool:
        return self._schemas.get(resource, Schema()).openapi is not None

    def _normalised(self, resource: kmock.resource, body: Body) -> Body:
        """The body as the API server stores it: for a custom resource, its numbers decoded,
        unknown fields pruned, nulls dropped and defaults applied by its schema; a Secret's
        stringData merged into its data, base64-encoded (stringData is write-only)."""
        if resource_name(resource) == SECRETS and "stringData" in body:
            body = dict(body)
            plain = body.pop("stringData") or {}
            encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in plain.items()}
            body["data"] = {**(body.get("data") or {}), **encoded}
        schema = self._schemas.get(resource, Schema()).openapi
        if schema is not None:
            kept: Body = {k: body[k] for k in ("apiVersion", "kind", "metadata") if k in body}
            rest = defaulted(prune(decoded_numbers(body), schema), schema)
            body = {**rest, **kept}
        meta = body["metadata"]
        for field in DROPPED_WHEN_EMPTY:
            if field in meta and not meta[field]:
                del meta[field]
        return body

    def _validate(self, resource: kmock.resource, body: Body) -> None:
        """Refuse a custom resource that breaks its schema, or a Pod the API server refuses,
        as kube-apiserver does (422, its messages); and an object too large for etcd (500)."""
        size = len(json.dumps(body, separators=(",", ":")))
        if size > GRPC_MAX_BYTES:
            raise api_error(
                500,
                "",
                "rpc error: code = ResourceExhausted desc = trying to send message larger than "
                f"max ({size} vs. {GRPC_MAX_BYTES})",
            )
        if size > MAX_OBJECT_BYTES:
            raise api_error(500, "", "etcdserver: request is too large")
        schema = self._schemas.get(resource, Schema()).openapi
        if schema is not None:
            errors = metadata_errors(body["metadata"])
            rest = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}
            errors += schema_errors(rest, schema, "")
            group = resource.group or ""
        elif resource_name(resource) == PODS:
            errors = pod_errors(body)
            group = ""
        else:
            return
        if errors:
            raise invalid(invalid_message(body["kind"], group, body["metadata"]["name"], errors))


def _essence(body: Body) -> Body:
    """What `generation` counts changes of: everything but metadata and status."""
    return {key: value for key, value in body.items() if key not in ("metadata", "status")}
