"""The chart with the bridge enabled installs (every object accepted by the test's API, applied
as `helm install` applies them: test_chart_install.py), and the bridge's ServiceAccount may then
do exactly what the bridge's contract says, as the API server's own RBAC authorizer decides
(SubjectAccessReviews; a real kube-apiserver only: the emulator decides none).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from test_chart_install import Api, install, render

from kubeharness.kube import Kube
from kubeharness.real.plane import ControlPlane

pytestmark = pytest.mark.integration

ALLOWED, DENIED = True, False
Case = tuple[bool, str, str, str | None, str]
"""(allowed, verb, resource[/subresource], namespace or None for the cluster, API group)."""


def each(want: bool, verbs: str, resource: str, namespace: str | None, group: str) -> list[Case]:
    return [(want, verb, resource, namespace, group) for verb in verbs.split()]


def bridge_values(release: str, watched: list[str]) -> dict[str, Any]:
    return {
        "watchNamespaces": watched,
        "storage": {
            "bucket": "results",
            "credentials": {"accessKeyId": "AKIAEXAMPLEKEY", "secretAccessKey": "s3cr3t-value"},
        },
        # The peering object is cluster-wide: one per test on a shared control plane.
        "operator": {"peering": {"enabled": True, "name": release}},
        "bridge": {
            "enabled": True,
            "limits": {"docker": 8},
            "docker": {"tlsSecret": "engine-tls"},
        },
    }


async def installed(
    kube: Kube, http: aiohttp.ClientSession, scope: str
) -> tuple[str, str, str | None]:
    """Install the chart with the bridge; (its ServiceAccount's user name, a namespace it serves,
    a namespace it does not serve or None when it serves the whole cluster)."""
    release = f"rob-{kube.namespace}"  # of its own: cluster-wide names derive from it
    watched = [await kube.new_namespace("evals")] if scope == "namespaced" else []
    objects = render(bridge_values(release, watched), release, kube.namespace)
    created = await install(kube, Api(http), objects, kube.namespace)
    assert len(created) == len(objects)
    [bridge] = [
        o for o in objects if o["kind"] == "Deployment" and "bridge" in o["metadata"]["name"]
    ]
    name = bridge["metadata"]["name"]
    assert f"Deployment/{name}" in created
    assert f"ServiceAccount/{name}" in created
    expected = {"ClusterRole", "ClusterRoleBinding"}
    if watched:
        expected |= {"Role", "RoleBinding"}
    bridge_kinds = {o["kind"] for o in objects if o["metadata"]["name"] in (name, f"{name}-crds")}
    assert expected | {"Deployment", "ServiceAccount"} == bridge_kinds
    # The API server keeps the Deployment as rendered: one replica, replaced, never rolled.
    stored = await kube.get("apps/v1/deployments", name, kube.namespace)
    assert stored["spec"]["replicas"] == 1
    assert stored["spec"]["strategy"] == {"type": "Recreate"}
    user = f"system:serviceaccount:{kube.namespace}:{name}"
    if watched:
        return user, watched[0], kube.namespace
    return user, kube.namespace, None


@pytest.mark.parametrize("scope", ["cluster-wide", "namespaced"])
async def test_the_chart_installs_with_the_bridge(
    kube: Kube, http: aiohttp.ClientSession, scope: str
) -> None:
    await installed(kube, http, scope)


async def allowed(
    api: Api, user: str, verb: str, resource: str, namespace: str | None, group: str = ""
) -> bool:
    """Whether the API server's authorizer lets `user` (a ServiceAccount) do this."""
    plural, _, subresource = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": plural, "subresource": subresource}
    if namespace is not None:
        attributes["namespace"] = namespace
    account_namespace = user.split(":")[2]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{account_namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": attributes,
        },
    }
    status, answer = await api.request(
        "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
    )
    assert status == 201, answer
    return bool(answer["status"].get("allowed"))


@pytest.mark.parametrize("scope", ["cluster-wide", "namespaced"])
async def test_the_bridge_may_do_its_contract_and_nothing_more(
    control_plane: ControlPlane | None, kube: Kube, http: aiohttp.ClientSession, scope: str
) -> None:
    if control_plane is None:
        pytest.skip("needs a real kube-apiserver's authorizer (the emulator decides no reviews)")
    api = Api(http)
    user, served, other = await installed(kube, http, scope)
    rollout, crds, leases = "rollout.dev", "apiextensions.k8s.io", "coordination.k8s.io"
    cases: list[Case] = [
        # What it does: claim and run trials, write their status, post kopf's events, resolve
        # agent env secretKeyRefs by name; kopf follows the CRDs.
        *each(ALLOWED, "get list watch patch", "rollouttrials", served, rollout),
        *each(ALLOWED, "get patch", "rollouttrials/status", served, rollout),
        *each(ALLOWED, "create patch", "events", served, ""),
        (ALLOWED, "get", "secrets", served, ""),
        *each(ALLOWED, "list watch", "customresourcedefinitions", None, crds),
        # Nothing more.
        *each(DENIED, "create update delete deletecollection", "rollouttrials", served, rollout),
        (DENIED, "update", "rollouttrials/status", served, rollout),
        (DENIED, "update", "rollouttrials/finalizers", served, rollout),
        *each(DENIED, "get list patch", "rolloutjobs", served, rollout),
        (DENIED, "get", "rolloutimages", served, rollout),
        *each(DENIED, "list watch create update", "secrets", served, ""),
        *each(DENIED, "get list create delete", "pods", served, ""),
        (DENIED, "create", "pods/exec", served, ""),
        (DENIED, "get", "pods/log", served, ""),
        (DENIED, "list", "events", served, ""),
        (DENIED, "delete", "events", served, ""),
        (DENIED, "get", "configmaps", served, ""),
        (DENIED, "create", "serviceaccounts/token", served, ""),
        *each(DENIED, "get create update", "leases", served, leases),
        (DENIED, "list", "kopfpeerings", served, "kopf.dev"),
        (DENIED, "list", "clusterkopfpeerings", None, "kopf.dev"),
        (DENIED, "get", "customresourcedefinitions", None, crds),
        (DENIED, "create", "customresourcedefinitions", None, crds),
        (DENIED, "get", "namespaces", None, ""),
        (DENIED, "create", "namespaces", None, ""),
    ]
    if other is None:
        # Cluster-wide, kopf watches the whole cluster and never lists namespaces.
        cases += [
            (ALLOWED, "list", "rollouttrials", None, rollout),
            (ALLOWED, "get", "secrets", "elsewhere", ""),
            (DENIED, "list", "namespaces", None, ""),
            (DENIED, "list", "secrets", None, ""),
        ]
    else:
        # A list of namespaces: kopf follows namespaces; nothing of another namespace.
        cases += [
            (ALLOWED, "list", "namespaces", None, ""),
            (ALLOWED, "watch", "namespaces", None, ""),
            (DENIED, "list", "rollouttrials", None, rollout),
            (DENIED, "list", "rollouttrials", other, rollout),
            (DENIED, "patch", "rollouttrials/status", other, rollout),
            (DENIED, "get", "secrets", other, ""),
            (DENIED, "create", "events", other, ""),
        ]
    decided = [
        (await allowed(api, user, verb, resource, namespace, group), verb, resource, namespace)
        for _, verb, resource, namespace, group in cases
    ]
    expected = [(want, verb, resource, namespace) for want, verb, resource, namespace, _ in cases]
    assert decided == expected
