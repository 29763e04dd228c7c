"""The request log: one `ApiCall` per HTTP request the API server received."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kmock

from kubeharness.resources import WRITE_METHODS, body_meta, resource_name


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
        meta = body_meta(request.data) if request.method.value == "POST" else {}
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
