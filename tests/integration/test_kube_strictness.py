"""The test's Kubernetes API refuses what a real kube-apiserver refuses, on either backend.

A stand-in is only as good as its strictness: main's watches were refused by every real API
server (`timeoutSeconds=270.0`) while the emulator took them. These run against the emulator and,
where its binaries are installed, against a real control plane, and expect the same answers
(checked against kube-apiserver 1.24).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from kubeharness.identity import Identity, operator_user
from kubeharness.kube import Kube
from kubeharness.resources import CRDS

pytestmark = pytest.mark.integration


async def answer(
    session: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    kwargs: dict[str, Any] = {}
    if body is not None:
        kwargs["json"] = body
    async with session.request(method, path, **kwargs) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except json.JSONDecodeError:
            return response.status, text


def message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body).strip()


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        ("watch=true&timeoutSeconds=270.0", 400, 'strconv.ParseInt: parsing "270.0"'),
        ("limit=abc", 400, 'strconv.ParseInt: parsing "abc"'),
        ("limit=1.5", 400, 'strconv.ParseInt: parsing "1.5"'),
        ("resourceVersion=abc", 500, 'resourceVersion: Invalid value: "abc"'),
        (
            "resourceVersion=1.5&resourceVersionMatch=Exact",
            400,
            'invalid resource version: resourceVersion: Invalid value: "1.5"',
        ),
    ],
)
async def test_query_parameters_of_the_wrong_type_are_refused(
    kube: Kube, http: aiohttp.ClientSession, query: str, status: int, says: str
) -> None:
    got, body = await answer(http, "GET", f"/api/v1/namespaces/{kube.namespace}/pods?{query}")
    assert got == status, body
    assert says in message(body)


async def test_whole_numbers_are_taken(kube: Kube, http: aiohttp.ClientSession) -> None:
    path = f"/api/v1/namespaces/{kube.namespace}/pods"
    got, body = await answer(http, "GET", f"{path}?limit=5&timeoutSeconds=3")
    assert got == 200, body
    version = body["metadata"]["resourceVersion"]
    got, _ = await answer(
        http, "GET", f"{path}?watch=true&timeoutSeconds=1&resourceVersion={version}"
    )
    assert got == 200


def thing_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"things.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": "Thing",
                "plural": "things",
                "singular": "thing",
                "listKind": "ThingList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


async def test_custom_resources_are_served_once_their_crd_is_created_over_http(
    kube: Kube, http: aiohttp.ClientSession
) -> None:
    group = f"{kube.namespace}.strict.example"  # of its own: CRDs are cluster-wide
    things = f"/apis/{group}/v1/namespaces/{kube.namespace}/things"
    thing = {"apiVersion": f"{group}/v1", "kind": "Thing", "metadata": {"name": "t"}}
    got, body = await answer(http, "POST", things, thing)
    assert (got, message(body)) == (404, "404 page not found")

    got, body = await answer(
        http, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", thing_crd(group)
    )
    assert got == 201, body

    async def created() -> Any:
        status, body = await answer(
            http, "POST", things, {**thing, "spec": {"size": 3, "color": "red"}}
        )
        return body if status == 201 else None

    stored = await kube.wait_for(created, what="the new resource is served")
    assert stored["spec"] == {"size": 3}  # pruned by the structural schema

    await kube.delete(CRDS, f"things.{group}", None)

    async def refused() -> bool:
        status, _ = await answer(http, "GET", things)
        return status == 404

    await kube.wait_for(refused, what="the resource is no longer served")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/api/v1/namespaces/{ns}/pods", True),
        ("GET", "/api/v1/namespaces/{ns}/pods?watch=true&timeoutSeconds=1", True),
        ("GET", "/apis/rollout.dev/v1alpha1/namespaces/{ns}/rolloutjobs", True),
        ("GET", "/api/v1/namespaces/{ns}/secrets", False),
        ("GET", "/api/v1/namespaces/{ns}/pods/some-pod/log", False),
        ("POST", "/api/v1/namespaces/{ns}/pods/some-pod/exec", False),
        ("DELETE", "/apis/rollout.dev/v1alpha1/namespaces/{ns}/rolloutjobs", False),
        ("GET", "/api/v1/nodes", False),
    ],
)
async def test_the_operator_may_do_what_the_charts_rbac_allows_and_nothing_else(
    kube: Kube, method: str, path: str, allowed: bool
) -> None:
    async with kube.http_session(Identity.OPERATOR) as operator:
        got, body = await answer(operator, method, path.format(ns=kube.namespace))
    assert (got != 403) == allowed, body
    if not allowed:
        user = operator_user(Identity.OPERATOR).name
        assert f'is forbidden: User "{user}" cannot' in message(body)


def network_policy(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {}, **spec},
    }


def egress_to(*peers: Any, ports: Any = None) -> list[dict[str, Any]]:
    rule: dict[str, Any] = {"to": list(peers)}
    if ports is not None:
        rule["ports"] = ports
    return [rule]


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        (network_policy("Bad_Name"), 'metadata.name: Invalid value: "Bad_Name"'),
        (
            network_policy(policyTypes=["Egress", "Sideways"]),
            'spec.policyTypes[1]: Unsupported value: "Sideways"',
        ),
        (
            network_policy(
                podSelector={
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
                }
            ),
            "spec.podSelector.matchExpressions[0].values: Forbidden",
        ),
        (
            network_policy(podSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
            "spec.podSelector.matchExpressions[0].values: Required value",
        ),
        (
            network_policy(podSelector={"matchLabels": {"bad key!": "v"}}),
            'spec.podSelector.matchLabels: Invalid value: "bad key!"',
        ),
        (
            network_policy(egress=[{"ports": [{"protocol": "ICMP", "port": 53}]}]),
            'spec.egress[0].ports[0].protocol: Unsupported value: "ICMP"',
        ),
        (
            network_policy(egress=[{"ports": [{"protocol": "TCP", "port": 70000}]}]),
            "spec.egress[0].ports[0].port: Invalid value: 70000",
        ),
        (
            network_policy(egress=egress_to({"ipBlock": {"cidr": "10.0.0.1"}})),
            'spec.egress[0].to[0].ipBlock.cidr: Invalid value: "10.0.0.1": not a valid CIDR',
        ),
        (
            network_policy(
                egress=egress_to({"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/8"]}})
            ),
            "spec.egress[0].to[0].ipBlock.except[0]: Invalid value",
        ),
        (
            network_policy(egress=egress_to({})),
            "spec.egress[0].to[0]: Required value: must specify a peer",
        ),
        (
            network_policy(
                egress=egress_to({"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}})
            ),
            "spec.egress[0].to[0]: Forbidden: may not specify both ipBlock and another peer",
        ),
    ],
)
async def test_network_policies_are_validated_as_the_api_server_does(
    kube: Kube, http: aiohttp.ClientSession, policy: dict[str, Any], says: str
) -> None:
    path = f"/apis/networking.k8s.io/v1/namespaces/{kube.namespace}/networkpolicies"
    got, body = await answer(http, "POST", path, policy)
    assert (got, body.get("reason")) == (422, "Invalid"), body
    assert f'NetworkPolicy.extensions "{policy["metadata"]["name"]}" is invalid: ' in message(body)
    assert says in message(body)


async def test_a_valid_network_policy_is_taken(kube: Kube, http: aiohttp.ClientSession) -> None:
    path = f"/apis/networking.k8s.io/v1/namespaces/{kube.namespace}/networkpolicies"
    dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    policy = network_policy(
        podSelector={"matchExpressions": [{"key": "rollout.dev/egress", "operator": "Exists"}]},
        policyTypes=["Egress"],
        egress=[
            *egress_to(
                dns, ports=[{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
            ),
            *egress_to({"ipBlock": {"cidr": "10.0.0.5/32"}}, {"ipBlock": {"cidr": "::/0"}}),
        ],
    )
    got, body = await answer(http, "POST", path, policy)
    assert got == 201, body


async def test_a_secrets_string_data_is_stored_as_data_and_never_read_back(kube: Kube) -> None:
    """As the API server does: stringData is merged into data, base64-encoded, and dropped (a
    reader of the Secret, such as the bridge resolving an agent's key, sees only data)."""
    await kube.create(
        "v1/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "mixed"},
            "data": {"kept": "a2VwdA=="},
            "stringData": {"plain": "text value"},
        },
    )
    stored = await kube.get("v1/secrets", "mixed")
    assert "stringData" not in stored
    assert stored["data"] == {"kept": "a2VwdA==", "plain": "dGV4dCB2YWx1ZQ=="}


async def test_a_uid_in_a_patch_is_a_precondition(kube: Kube, http: aiohttp.ClientSession) -> None:
    """An object's UID is immutable (ValidateObjectMetaUpdate): a patch that names another UID
    is refused, which makes it a precondition on the object patched (the test kubelet's patches
    use it, so that a Pod made again under a name is another Pod to them, as to a kubelet)."""
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    got, made = await answer(
        http, "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "u"}}
    )
    assert got == 201, made
    uid = made["metadata"]["uid"]
    headers = {"Content-Type": "application/merge-patch+json"}
    same = {"metadata": {"uid": uid, "labels": {"a": "b"}}}
    async with http.patch(f"{path}/u", data=json.dumps(same), headers=headers) as response:
        assert response.status == 200, await response.text()
    other = {"metadata": {"uid": "0b6c6a64-0000-4000-8000-000000000000", "labels": {"a": "c"}}}
    async with http.patch(f"{path}/u", data=json.dumps(other), headers=headers) as response:
        body = await response.json()
    # apimachinery's ValidateObjectMetaUpdate (a patch carries no storage precondition).
    assert (response.status, body.get("reason")) == (422, "Invalid"), body
    assert 'ConfigMap "u" is invalid: metadata.uid: Invalid value: ' in message(body)
    assert message(body).endswith("field is immutable"), body
    assert (await kube.get("v1/configmaps", "u"))["metadata"]["labels"] == {"a": "b"}
