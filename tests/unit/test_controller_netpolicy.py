"""A job's NetworkPolicies, rendered from the job and checked against where its trial Pods must
connect: the job's storage endpoint, cluster DNS, allowed hosts, and nothing else.

The Pods are the operator's own (trial manifest, then Pod), so the label the policies select by
is the one the Pod renderer sets; `allows` reads the policies as NetworkPolicy semantics have it
(a Pod no policy selects may go anywhere; a selected Pod only where some rule of some selecting
policy allows).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
import pytest

from rollout.api.errors import ErrorType
from rollout.api.plan import JobPlan, ResolvedDataset, ResolvedTask, plan_job
from rollout.api.resources import RolloutJob, StorageSpec
from rollout.api.results import TrialError
from rollout.api.task import parse_task_config
from rollout.controller.config import OperatorConfig
from rollout.controller.netpolicy import (
    PolicyPlan,
    Rendered,
    policy_name,
    policy_plan,
    render_policies,
)
from rollout.controller.pod import render_trial_pod
from rollout.controller.trials import trial_manifest

NAMESPACE = "evals"
JOB_UID = "job-uid"
MINIO = StorageSpec(bucket="b", endpoint="http://10.0.0.7:9000")
IMAGE = {"docker_image": "img:1"}
PYPI = ["151.101.0.223", "2a04:4e42::223"]

TASKS = {
    "public": {},
    "offline": {"allow_internet": False},
    "pip": {"network_mode": "allowlist", "allowed_hosts": ["pypi.org"]},
}


def job(name: str = "nightly") -> RolloutJob:
    return RolloutJob.model_validate(
        {
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "agents": [{"name": "oracle"}],
                "datasets": [{"name": "d", "digest": "a" * 64}],
            },
        }
    )


def plan(tasks: dict[str, dict[str, Any]]) -> JobPlan:
    resolved = tuple(
        ResolvedTask(name, f"{i:064x}", parse_task_config({"environment": {**IMAGE, **env}}))
        for i, (name, env) in enumerate(tasks.items())
    )
    return plan_job("nightly", ["oracle"], [ResolvedDataset("d", "a" * 64, resolved)], 1)


def pods(the_job: RolloutJob, the_plan: JobPlan, storage: StorageSpec) -> dict[str, dict]:
    """Each task's trial Pod, as the operator makes it."""
    made = {}
    for trial in the_plan.trials:
        manifest = trial_manifest(
            the_job,
            trial,
            namespace=NAMESPACE,
            job_uid=JOB_UID,
            storage=storage,
            runner_image="runner:1",
        )
        manifest["metadata"]["uid"] = f"uid-{trial.name}"
        made[trial.key.task] = render_trial_pod(
            manifest,
            config=OperatorConfig(runner_image="runner:1"),
            pod_name=f"{trial.name}-r0",
            created_at=datetime(2025, 1, 1, tzinfo=UTC),
        )
    return made


def rendered(
    storage: StorageSpec = MINIO,
    addresses: dict[str, list[str]] | None = None,
    tasks: dict[str, dict[str, Any]] = TASKS,
) -> tuple[Rendered, dict[str, dict], PolicyPlan]:
    the_job, the_plan = job(), plan(tasks)
    policies = policy_plan(the_job, storage, the_plan)
    assert policies is not None
    out = render_policies(
        policies,
        job_name="nightly",
        job_uid=JOB_UID,
        namespace=NAMESPACE,
        addresses={"pypi.org": PYPI} if addresses is None else addresses,
    )
    return out, pods(the_job, the_plan, storage), policies


# --- NetworkPolicy semantics, for the checks --------------------------------------------------


@dataclass(frozen=True)
class To:
    """A destination: an address and port, and when it is a Pod, its labels and namespace's."""

    ip: str
    port: int
    protocol: str = "TCP"
    pod_labels: dict[str, str] | None = None
    namespace: str | None = None


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        if operator == "Exists" and key not in labels:
            return False
        if operator == "In" and labels.get(key) not in expression["values"]:
            return False
    return True


def peer_matches(peer: dict[str, Any], to: To) -> bool:
    if "ipBlock" in peer:
        return ipaddress.ip_address(to.ip) in ipaddress.ip_network(peer["ipBlock"]["cidr"])
    if to.pod_labels is None or to.namespace is None:
        return False
    namespace_labels = {"kubernetes.io/metadata.name": to.namespace}
    if "namespaceSelector" in peer and not selects(peer["namespaceSelector"], namespace_labels):
        return False
    if "namespaceSelector" not in peer and to.namespace != NAMESPACE:
        return False
    return selects(peer.get("podSelector") or {}, to.pod_labels)


def allows(policies: list[dict[str, Any]], pod: dict[str, Any], to: To) -> bool:
    labels = pod["metadata"]["labels"]
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod["metadata"]["namespace"]
        and "Egress" in p["spec"]["policyTypes"]
        and selects(p["spec"]["podSelector"], labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("egress") or []:
            peers = rule.get("to")
            ports = rule.get("ports")
            to_ok = not peers or any(peer_matches(peer, to) for peer in peers)
            port_ok = not ports or any(
                p.get("protocol", "TCP") == to.protocol and p.get("port") in (None, to.port)
                for p in ports
            )
            if to_ok and port_ok:
                return True
    return False


DNS_POD = {"pod_labels": {"k8s-app": "kube-dns"}, "namespace": "kube-system"}


# --- the tests ------------------------------------------------------------------------------------


def test_a_no_internet_trial_reaches_storage_and_dns_and_nothing_else() -> None:
    out, made, _ = rendered()
    policies, offline = out.policies, made["offline"]
    assert allows(policies, offline, To("10.0.0.7", 9000))  # the job's storage endpoint
    assert allows(policies, offline, To("10.96.0.10", 53, "UDP", **DNS_POD))
    assert allows(policies, offline, To("10.96.0.10", 53, "TCP", **DNS_POD))
    assert not allows(policies, offline, To("10.0.0.7", 22))  # storage's host, another port
    assert not allows(policies, offline, To("1.1.1.1", 443))
    assert not allows(policies, offline, To(PYPI[0], 443))  # another task's allowed host
    assert not allows(policies, offline, To("10.96.0.11", 53, "UDP", {"app": "x"}, NAMESPACE))
    assert out.warnings == []


def test_a_public_trial_of_the_same_job_is_not_selected() -> None:
    out, made, _ = rendered()
    public = made["public"]
    assert "rollout.dev/egress" not in public["metadata"]["labels"]
    assert not any(
        selects(p["spec"]["podSelector"], public["metadata"]["labels"]) for p in out.policies
    )
    assert allows(out.policies, public, To("1.1.1.1", 443))


def test_allowed_hosts_are_reached_at_their_resolved_addresses_on_any_port() -> None:
    out, made, _ = rendered()
    pip = made["pip"]
    for address in PYPI:
        assert allows(out.policies, pip, To(address, 443))
        assert allows(out.policies, pip, To(address, 80))
    assert allows(out.policies, pip, To("10.0.0.7", 9000))  # and what every trial needs
    assert not allows(out.policies, pip, To("1.1.1.1", 443))


def test_one_base_policy_per_job_and_one_per_set_of_hosts_owned_by_the_job() -> None:
    out, _, _ = rendered()
    names = [p["metadata"]["name"] for p in out.policies]
    assert names[0] == "nightly-egress"
    assert len(names) == 2
    assert names[1].startswith("nightly-egress-hosts-")
    for policy in out.policies:
        assert policy["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "rollout.dev/v1alpha1",
                "kind": "RolloutJob",
                "name": "nightly",
                "uid": JOB_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert policy["metadata"]["labels"] == {"rollout.dev/job": "nightly"}
        assert policy["spec"]["policyTypes"] == ["Egress"]  # ingress is left alone
        for version in ("1.25", "1.33"):
            kubernetes_validate.validate(policy, version, strict=True)


def test_an_in_cluster_storage_service_is_reached_in_its_namespace_and_at_its_address() -> None:
    storage = StorageSpec(bucket="b", endpoint="http://minio.rollout-system.svc.cluster.local:9000")
    host = "minio.rollout-system.svc.cluster.local"
    out, made, plan_ = rendered(storage, {host: ["10.96.5.5"], "pypi.org": PYPI})
    assert host in plan_.names
    offline = made["offline"]
    minio_pod = {"pod_labels": {"app": "minio"}, "namespace": "rollout-system"}
    assert allows(out.policies, offline, To("10.244.1.9", 9000, **minio_pod))
    assert allows(out.policies, offline, To("10.96.5.5", 9000))  # the Service's address
    assert not allows(out.policies, offline, To("10.244.1.9", 22, **minio_pod))
    assert not allows(out.policies, offline, To("10.244.1.9", 9000, {"app": "x"}, "other"))


@pytest.mark.parametrize(
    ("storage", "port"),
    [
        (StorageSpec(bucket="b", endpoint="https://s3.unresolvable.example"), 443),
        (StorageSpec(bucket="b", region="eu-west-1"), 443),  # AWS S3: addresses change
    ],
)
def test_storage_whose_addresses_cannot_be_known_has_its_port_open_and_says_so(
    storage: StorageSpec, port: int
) -> None:
    out, made, _ = rendered(storage, {"pypi.org": PYPI})
    offline = made["offline"]
    assert allows(out.policies, offline, To("52.218.1.1", port))
    assert not allows(out.policies, offline, To("52.218.1.1", 22))
    assert len(out.warnings) == 1
    assert f"port {port}" in out.warnings[0]


def test_an_allowed_host_that_does_not_resolve_is_left_out_never_opened() -> None:
    out, made, _ = rendered(addresses={})
    pip = made["pip"]
    assert [p["metadata"]["name"] for p in out.policies] == ["nightly-egress"]
    assert not allows(out.policies, pip, To(PYPI[0], 443))
    assert not allows(out.policies, pip, To("1.1.1.1", 443))
    assert out.warnings == ["allowed host pypi.org did not resolve: left out"]


def test_addresses_and_cidrs_in_allowed_hosts_need_no_resolving() -> None:
    tasks = {"lab": {"network_mode": "allowlist", "allowed_hosts": ["192.0.2.8", "10.1.0.0/16"]}}
    out, made, plan_ = rendered(addresses={}, tasks=tasks)
    assert plan_.names == []  # the storage endpoint is an address too
    assert allows(out.policies, made["lab"], To("192.0.2.8", 5432))
    assert allows(out.policies, made["lab"], To("10.1.200.3", 443))
    assert not allows(out.policies, made["lab"], To("10.2.0.1", 443))


def test_a_job_of_public_tasks_needs_no_policy() -> None:
    assert policy_plan(job(), MINIO, plan({"public": {}})) is None


def test_a_broken_task_needs_no_policy_as_its_trials_get_no_pod() -> None:
    config = parse_task_config({"environment": {**IMAGE, "allow_internet": False}})
    error = TrialError(type=ErrorType.TASK_INVALID, message="Task 'b' is invalid: ...")
    broken = ResolvedTask("b", None, config, error=error)
    the_plan = plan_job("nightly", ["oracle"], [ResolvedDataset("d", "a" * 64, (broken,))], 1)
    assert policy_plan(job(), MINIO, the_plan) is None


def test_long_job_names_make_valid_distinct_policy_names() -> None:
    long_a, long_b = "a" * 250, "a" * 249 + "b"
    names = {policy_name(name, "egress-hosts-0123456789ab") for name in (long_a, long_b)}
    assert len(names) == 2
    assert all(len(name) <= 253 for name in names)
    assert policy_name("nightly", "egress") == "nightly-egress"


def test_a_no_internet_trial_reaches_the_services_its_job_names_and_only_those() -> None:
    # An endpoint agent, a model agent and the llm_judgement evaluator are called from the
    # trial's Pod (by the runner): a no-internet trial must still reach them.
    the_job = RolloutJob.model_validate(
        {
            "metadata": {"name": "nightly", "namespace": NAMESPACE},
            "spec": {
                "agents": [
                    {"name": "svc", "endpoint": "http://10.0.0.9:8080/rollout/eval"},
                    {"name": "llm", "model": {"name": "m", "baseUrl": "https://10.0.0.10/v1"}},
                ],
                "datasets": [{"name": "d", "digest": "a" * 64}],
                "evaluatorBaseUrl": "http://10.0.0.11:4000/v1",
            },
        }
    )
    tasks = tuple(
        ResolvedTask(name, f"{i:064x}", parse_task_config({"environment": {**IMAGE, **env}}))
        for i, (name, env) in enumerate(TASKS.items())
    )
    the_plan = plan_job("nightly", ["svc", "llm"], [ResolvedDataset("d", "a" * 64, tasks)], 1)
    policies = policy_plan(the_job, MINIO, the_plan)
    assert policies is not None
    out = render_policies(
        policies,
        job_name="nightly",
        job_uid=JOB_UID,
        namespace=NAMESPACE,
        addresses={"pypi.org": PYPI},
    )
    offline = pods(the_job, the_plan, MINIO)["offline"]
    for service in (To("10.0.0.9", 8080), To("10.0.0.10", 443), To("10.0.0.11", 4000)):
        assert allows(out.policies, offline, service)
    assert allows(out.policies, offline, To("10.0.0.7", 9000))  # storage, as before
    assert not allows(out.policies, offline, To("10.0.0.9", 22))
    assert not allows(out.policies, offline, To("1.1.1.1", 443))
    assert out.warnings == []
