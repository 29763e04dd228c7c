"""The API server's audit log as the request log."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubeharness.calls import ApiCall
from kubeharness.real.plane import HARNESS_USER

VERB_METHODS = {
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


class AuditLog:
    """The API server's audit log, read incrementally: one ApiCall per request (its first event)."""

    def __init__(self, path: Path, users: Iterable[str]) -> None:
        self.path = path
        self.users = set(users)
        self.calls: list[ApiCall] = []
        self._offset = 0
        self._seen: set[str] = set()
        self._pending = b""

    def read(self) -> list[str]:
        """Read what is new; the request URIs of the harness's own (barrier) requests."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
        self._offset += len(data)
        data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        barriers = []
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            if event["auditID"] in self._seen:
                continue
            self._seen.add(event["auditID"])
            user = event.get("user", {}).get("username", "")
            if user == HARNESS_USER:
                barriers.append(event.get("requestURI", ""))
            elif user in self.users:
                self.calls.append(api_call(event))
        return barriers


def api_call(event: Mapping[str, Any]) -> ApiCall:
    """An audit event as the harness's ApiCall."""
    uri = urllib.parse.urlsplit(event.get("requestURI", ""))
    params = dict(urllib.parse.parse_qsl(uri.query, keep_blank_values=True))
    ref = event.get("objectRef") or {}
    resource = None
    if ref.get("resource"):
        group = ref.get("apiGroup") or ""
        version = ref.get("apiVersion") or ""
        resource = (
            f"{group}/{version}/{ref['resource']}" if group else f"{version}/{ref['resource']}"
        )
    body = event.get("requestObject")
    # As in the emulator's log: the name in the path (the API server also names the object of a
    # list or watch by a `metadata.name=` field selector; the path does not), or in a POST's body.
    name = None if event.get("verb") in ("list", "watch") else ref.get("name")
    if name is None and event.get("verb") == "create" and isinstance(body, Mapping):
        name = (body.get("metadata") or {}).get("name")
    return ApiCall(
        method=VERB_METHODS.get(event.get("verb", ""), "GET"),
        path=uri.path,
        params=params,
        resource=resource,
        namespace=ref.get("namespace"),
        name=name,
        subresource=ref.get("subresource"),
        body=body,
        user_agent=event.get("userAgent", ""),
    )
