"""RBAC, as kube-apiserver's RBAC authorizer decides: the emulator's authorizer, with the rules of
the Roles, ClusterRoles and bindings stored in it (the chart's, once a test applies them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import kmock

from kubeharness.emulator.errors import api_error
from kubeharness.emulator.selectors import Selector
from kubeharness.identity import UserInfo
from kubeharness.resources import Body, resource_of


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


class RbacAuthorizer:
    """The emulator's RBAC (a mixin of `ClusterEmulator`, whose `rbac_users` and stored objects
    it reads)."""

    __slots__ = ()

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
