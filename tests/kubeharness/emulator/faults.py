"""Errors on demand: what `Kube.fail()` asks the emulator to answer instead of serving."""

from __future__ import annotations

import dataclasses

import kmock

from kubeharness.resources import body_meta


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
        name = request.name or body_meta(request.data).get("name")
        return (
            self.remaining > 0
            and request.method.value == self.method
            and (self.resource is None or request.resource == self.resource)
            and (self.name is None or name == self.name)
            and (self.any_subresource or request.subresource == self.subresource)
        )
