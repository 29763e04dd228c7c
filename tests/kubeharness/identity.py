"""Who talks to the API (`Identity`, each a user of its own), and the operator's and the bridge's
RBAC as the chart renders it, which both backends apply and enforce.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
from collections.abc import Mapping
from typing import Any

import yaml

from kubeharness.resources import Body
from paths import REPO


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


class Identity(enum.Enum):
    """Who talks to the API: each is a user of its own (a bearer token), so that RBAC applies to
    what the operator and the bridge do, once the chart's RBAC is applied
    (`Kube.apply_chart_rbac`)."""

    OPERATOR = "operator"
    """The operator installed cluster-wide: the chart's ServiceAccount in `rollout-system`."""
    NAMESPACED_OPERATOR = "namespaced-operator"
    """The operator installed with `watchNamespaces`: its ServiceAccount in
    `rollout-namespaced`, its Roles in the namespaces it watches."""
    BRIDGE = "bridge"
    """The bridge (`rollout-bridge`) installed cluster-wide: the chart's bridge ServiceAccount
    (`<fullname>-bridge`) in `rollout-system`, bound by the bridge's RBAC alone."""
    USER = "user"
    """A person or a CI pipeline running the `rollout` CLI or kubectl: a cluster admin."""


CHART = REPO / "charts" / "rollout-operator"
OPERATOR_RELEASE = "rollout-operator"
RELEASE_NAMESPACES = {
    Identity.OPERATOR: "rollout-system",
    Identity.NAMESPACED_OPERATOR: "rollout-namespaced",
    Identity.BRIDGE: "rollout-system",
}
"""Where the release each controller identity belongs to is installed (its ServiceAccount's
namespace): the cluster-wide release has both the operator and the bridge."""
CONTROLLERS = tuple(RELEASE_NAMESPACES)
"""The identities of controller processes, each a ServiceAccount of the chart (not the user)."""
COMPONENTS = {
    Identity.OPERATOR: "operator",
    Identity.NAMESPACED_OPERATOR: "operator",
    Identity.BRIDGE: "bridge",
}
"""The chart's `app.kubernetes.io/component` label of each controller's ServiceAccount."""
CHART_VALUES: Body = {"bridge": {"enabled": True}}
"""The release as the harness installs it: the operator and the bridge (`bridge.enabled`, which
adds the bridge's ServiceAccount and RBAC and changes none of the operator's)."""
RBAC_KINDS = frozenset(
    {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


@functools.cache
def chart_rbac(release_namespace: str, watch_namespaces: tuple[str, ...] = ()) -> tuple[Body, ...]:
    """The operator's and the bridge's ServiceAccounts and RBAC objects as the chart renders them
    (release `rollout-operator` with `CHART_VALUES`, watching `watch_namespaces` or, without
    them, the whole cluster)."""
    import helm_python as helm  # the chart's own engine; only tests that apply RBAC need it

    values: Body = copy.deepcopy(CHART_VALUES)
    if watch_namespaces:
        values["watchNamespaces"] = list(watch_namespaces)
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
    """The user the API sees for a controller identity (the operator's or the bridge's): its
    ServiceAccount as the chart renders it, told apart by its component label."""
    namespace = RELEASE_NAMESPACES[identity]
    account = next(
        o
        for o in chart_rbac(namespace)
        if o["kind"] == "ServiceAccount"
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == COMPONENTS[identity]
    )
    name = account["metadata"]["name"]
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
    return UserInfo(f"system:serviceaccount:{namespace}:{name}", groups)
