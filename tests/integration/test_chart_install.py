"""The chart installs: its rendered objects applied the way `helm install` applies them, and every
one accepted by the test's API (a real kube-apiserver where one is installed).

Helm first maps every plain object to an API resource the server serves (a kind that is not
served, such as a custom resource of a CRD in the same release, fails the whole install before
anything is created), then creates them in its install order, then runs the hooks: so a CRD and
an object of its kind can only meet as "CRD plain, object a hook". CRDs of the release that exist
already (the suite installed them) must be the same.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import helm_python as helm
import pytest
import yaml

from kubeharness.kube import Kube
from kubeharness.kubelet import container_env
from paths import REPO
from rollout.controller.prices import UnitPrices, parse_unit_prices

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "rollout-operator"
# Helm's install order of kinds (pkg/release/util/kind_sorter.go); other kinds come last.
INSTALL_ORDER = [
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
    "PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
    "ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
    "APIService",
]  # fmt: skip
HOOK = "helm.sh/hook"


def render(values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name=release, namespace=namespace, is_install=True)
    return [
        document
        for template, text in sorted(manifests.items())
        if not template.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


class Api:
    """Discovery and creation over HTTP, as a Helm client does them."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(
            method, path, **({"json": body} if body is not None else {})
        ) as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except json.JSONDecodeError:
                return response.status, text

    async def resource(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The served resource of an object's kind (name, namespaced), or None."""
        version = obj["apiVersion"]
        status, found = await self.request(
            "GET", "/api/v1" if version == "v1" else f"/apis/{version}"
        )
        if status != 200:
            return None
        return next(
            (r for r in found["resources"] if r["kind"] == obj["kind"] and "/" not in r["name"]),
            None,
        )

    async def create(self, obj: dict[str, Any], namespace: str) -> tuple[int, Any]:
        resource = await self.resource(obj)
        assert resource is not None, f"{obj['apiVersion']} {obj['kind']} is not served"
        version = obj["apiVersion"]
        path = "/api/v1" if version == "v1" else f"/apis/{version}"
        if resource["namespaced"]:
            namespace = obj["metadata"].get("namespace", namespace)
            path += f"/namespaces/{namespace}"
        return await self.request("POST", f"{path}/{resource['name']}", obj)


def order(obj: dict[str, Any]) -> int:
    kind = obj["kind"]
    return INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)


def hook_order(obj: dict[str, Any]) -> tuple[int, int]:
    weight = int(obj["metadata"].get("annotations", {}).get("helm.sh/hook-weight", "0"))
    return weight, order(obj)


async def install(kube: Kube, api: Api, objects: list[dict[str, Any]], namespace: str) -> list[str]:
    """Apply as `helm install` does; the kinds/names created (or found the same)."""
    plain = [o for o in objects if HOOK not in o["metadata"].get("annotations", {})]
    hooks = [o for o in objects if HOOK in o["metadata"].get("annotations", {})]
    unmapped = [f"{o['apiVersion']} {o['kind']}" for o in plain if await api.resource(o) is None]
    assert unmapped == [], f"Helm would refuse the install: no API serves {unmapped}"
    done = [await apply(api, o, namespace) for o in sorted(plain, key=order)]
    for obj in sorted(hooks, key=hook_order):
        # Helm maps a hook when it runs it: by then the release's CRDs are established.
        await kube.wait_for(lambda obj=obj: api.resource(obj), what=f"{obj['kind']} served")
        done.append(await apply(api, obj, namespace))
    return done


async def apply(api: Api, obj: dict[str, Any], namespace: str) -> str:
    name = f"{obj['kind']}/{obj['metadata']['name']}"
    status, answer = await api.create(obj, namespace)
    if status == 409 and obj["kind"] == "CustomResourceDefinition":
        _, current = await api.request(
            "GET",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{obj['metadata']['name']}",
        )
        assert current["spec"]["versions"] == obj["spec"]["versions"], f"{name} differs"
        return name
    assert status == 201, f"{name} was refused: {status} {answer}"
    return name


@pytest.mark.parametrize("scenario", ["default", "quickstart", "namespaced"])
async def test_the_chart_installs_and_every_object_is_accepted(
    kube: Kube, http: aiohttp.ClientSession, scenario: str
) -> None:
    release = f"ro-{kube.namespace}"  # of its own: cluster-wide names derive from it
    values: dict[str, Any] = {}
    if scenario == "quickstart":
        values = helm.values_from_yaml((CHART / "values-quickstart.yaml").read_text())
    elif scenario == "namespaced":
        evals, scratch = await kube.new_namespace("evals"), await kube.new_namespace("scratch")
        values = {
            "watchNamespaces": [evals],
            "trialNamespaces": [scratch],
            "storage": {
                "bucket": "results",
                "credentials": {"accessKeyId": "AKIAEXAMPLEKEY", "secretAccessKey": "s3cr3t-value"},
            },
            "operator": {"peering": {"enabled": True}},
            "unitPrices": {"cpu": 0.031, "memory": 0.004, "nvidia.com/gpu": 2.5},
        }
    # The peering object is cluster-wide too: one per test on a shared control plane.
    operator = values.setdefault("operator", {})
    operator["peering"] = {**operator.get("peering", {}), "name": release}
    objects = render(values, release, kube.namespace)
    created = await install(kube, Api(http), objects, kube.namespace)
    kinds = {name.split("/")[0] for name in created}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds
    assert len(created) == len(objects)
    if scenario == "namespaced":
        assert {"Role", "RoleBinding", "KopfPeering"} <= kinds
        # The prices reach the operator, from its Deployment as the API server stores it.
        [rendered] = [o for o in objects if o["kind"] == "Deployment"]
        name = rendered["metadata"]["name"]
        stored = await kube.get("apps/v1/deployments", name, kube.namespace)
        [operator] = stored["spec"]["template"]["spec"]["containers"]
        env = container_env({"env": [e for e in operator["env"] if "value" in e]})
        assert parse_unit_prices(env["ROLLOUT_UNIT_PRICES"]) == UnitPrices(
            per_hour={"cpu": 0.031, "memory": 0.004, "nvidia.com/gpu": 2.5}
        )
