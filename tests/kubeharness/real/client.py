"""A small synchronous client for bootstrapping and for the audit barrier; paths and plain
requests.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeharness.resources import CRDS


class ApiError(RuntimeError):
    """An API server error answer: its status, reason and message."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = body.get("reason", "") if isinstance(body, Mapping) else ""
        message = body.get("message", body) if isinstance(body, Mapping) else body
        super().__init__(f"{status} {self.reason}: {message}")


@dataclass
class SyncClient:
    host: str
    port: int
    token: str
    context: ssl.SSLContext

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=30
        )
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            text = response.read()
        finally:
            connection.close()
        decoded: Any = json.loads(text) if text.strip().startswith(b"{") else text.decode()
        if response.status >= 400:
            raise ApiError(response.status, decoded)
        return decoded


CLUSTER_SCOPED = frozenset(
    {
        "v1/namespaces",
        "v1/nodes",
        "v1/persistentvolumes",
        CRDS,
        "rbac.authorization.k8s.io/v1/clusterroles",
        "rbac.authorization.k8s.io/v1/clusterrolebindings",
        "storage.k8s.io/v1/storageclasses",
        "scheduling.k8s.io/v1/priorityclasses",
        "admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "kopf.dev/v1/clusterkopfpeerings",
    }
)


def resource_path(
    resource: str, namespace: str | None, name: str | None = None, subresource: str | None = None
) -> str:
    """The URL path of a resource (a collection when `name` is None)."""
    parts = resource.split("/")
    base = "/api/v1" if len(parts) == 2 else f"/apis/{parts[0]}/{parts[1]}"
    plural = parts[-1]
    path = base
    if namespace is not None and resource not in CLUSTER_SCOPED:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def create(client: SyncClient, resource: str, body: Mapping[str, Any]) -> Any:
    """Create an object; an existing one is left as it is."""
    namespace = body.get("metadata", {}).get("namespace")
    try:
        return client.request("POST", resource_path(resource, namespace), dict(body))
    except ApiError as err:
        if err.status != 409:
            raise
        return None


def install_crd(client: SyncClient, crd: Mapping[str, Any], timeout: float = 30.0) -> None:
    """Create or update a CRD and wait until it is established and its resource is served."""
    name = crd["metadata"]["name"]
    path = resource_path(CRDS, None, name)
    try:
        client.request("POST", resource_path(CRDS, None), dict(crd))
    except ApiError as err:
        if err.status != 409:
            raise
        current = client.request("GET", path)
        if current["spec"] != crd["spec"]:
            replacement = {**crd, "metadata": {**crd["metadata"], **current["metadata"]}}
            client.request("PUT", path, replacement)
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    discovery = f"/apis/{spec['group']}/{version}"
    deadline = time.monotonic() + timeout
    while True:
        current = client.request("GET", path)
        conditions = {
            c["type"]: c["status"] for c in (current.get("status") or {}).get("conditions") or []
        }
        if conditions.get("Established") == "True":
            with contextlib.suppress(ApiError):
                served = client.request("GET", discovery)
                if any(r["name"] == spec["names"]["plural"] for r in served.get("resources", [])):
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} was not established and served within {timeout}s")
        time.sleep(0.1)
