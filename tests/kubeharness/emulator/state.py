"""The emulator's objects: kmock's `objects` array, read as the API server reads etcd, and the
log of watch events by resourceVersion.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import kmock

from kubeharness.emulator.selectors import Selector
from kubeharness.resources import Body

Key = tuple[kmock.resource, str | None, str]
WatchEvent = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Schema:
    """What the server knows of a resource beyond kmock's discovery info."""

    openapi: Mapping[str, Any] | None = None


class ObjectState:
    """Reads of the stored objects and the watch event log (a mixin of `ClusterEmulator`, which
    holds the `objects`, the buses, the revision counter and the event log)."""

    __slots__ = ()

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
