"""The names the harness and the tests share: resources, the test's namespace, object bodies.

Resources are strings, `'v1/pods'` or `'rollout.dev/v1alpha1/rolloutjobs'`; `resource_of()`
turns one into kmock's reference.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from types import EllipsisType
from typing import Any

import kmock

from paths import REPO

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
CRDS_DIR = REPO / "crds"

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


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


def body_meta(data: Any) -> Mapping[str, Any]:
    meta = data.get("metadata") if isinstance(data, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


Namespace = str | None | EllipsisType
"""A namespace argument: a name, None (cluster-scoped or all namespaces), or `...` for the
test's own namespace (`Kube.namespace`)."""
