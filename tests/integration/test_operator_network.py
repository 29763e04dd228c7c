"""A job with no-internet tasks: the operator makes its NetworkPolicies once, before any of its
Pods, owned by the job; the Pods of those tasks carry the label the policies select, the others
do not. Against the suite's Kubernetes API (a real kube-apiserver validates each policy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from operator_kit import (
    job_manifest,
    job_phase,
    make_task,
    operator_config,
    operator_memo,
    play_kubelet,
    publish,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS

pytestmark = pytest.mark.integration

NETWORK_POLICIES = "networking.k8s.io/v1/networkpolicies"
EGRESS_LABEL = "rollout.dev/egress"


def no_internet_dataset(root: Path) -> Path:
    root.mkdir()
    make_task(root, "offline", toml="allow_internet = false\n")
    make_task(root, "online")
    make_task(root, "lab", toml='network_mode = "allowlist"\nallowed_hosts = ["192.0.2.8"]\n')
    make_task(root, "sealed", toml='network_mode = "none"\n')
    return root


async def test_a_jobs_network_policies_are_made_once_before_its_pods_and_go_with_it(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    dataset = publish(s3_settings.store(), no_internet_dataset(tmp_path / "set"))
    memo = operator_memo(kube, operator_config(s3_settings))
    async with kube.operator(memo=memo):
        await kube.create(ROLLOUT_JOBS, job_manifest("net", [dataset], n_attempts=2))
        await play_kubelet(kube, lambda: job_phase(kube, "net", "Completed"))

        # Once per job: one policy for its restricted trials, one for the set of hosts, however
        # many trials (8 here); each before the job's first Pod.
        creates = [
            c for c in kube.calls() if c.method == "POST" and c.resource in (NETWORK_POLICIES, PODS)
        ]
        policy_posts = [c for c in creates if c.resource == NETWORK_POLICIES]
        assert next(c.name for c in policy_posts) == "net-egress"
        assert len(policy_posts) == 2
        assert str(policy_posts[1].name).startswith("net-egress-hosts-")
        assert [c.resource for c in creates[:2]] == [NETWORK_POLICIES] * 2
        assert kube.writes(NETWORK_POLICIES) == policy_posts  # created, never changed

        job = await kube.get(ROLLOUT_JOBS, "net")
        policies = await kube.list(NETWORK_POLICIES, ...)
        assert sorted(p["metadata"]["name"] for p in policies) == sorted(
            str(c.name) for c in policy_posts
        )
        for policy in policies:
            (owner,) = policy["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"]) == ("RolloutJob", job["metadata"]["uid"])

        # The Pods as created: the label on the restricted tasks' Pods only.
        labels = {}
        for call in creates:
            if call.resource == PODS:
                pod_labels = call.body["metadata"]["labels"]
                labels.setdefault(pod_labels["rollout.dev/task"], set()).add(
                    pod_labels.get(EGRESS_LABEL)
                )
        assert labels["online"] == {None}
        assert labels["offline"] == labels["sealed"] == {"restricted"}
        (lab,) = labels["lab"]
        assert str(lab).startswith("hosts-")

        # Deleted with the job (owner references: the garbage collector).
        kube.needs_garbage_collector()
        await kube.delete(ROLLOUT_JOBS, "net")

        async def policies_gone() -> bool:
            return not await kube.list(NETWORK_POLICIES, ...)

        await kube.wait_for(policies_gone, timeout=30, what="the job's policies to go")


async def test_a_job_of_public_tasks_gets_no_network_policy(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    root = tmp_path / "set"
    root.mkdir()
    make_task(root, "online")
    dataset = publish(s3_settings.store(), root)
    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await kube.create(ROLLOUT_JOBS, job_manifest("open", [dataset]))
        await play_kubelet(kube, lambda: job_phase(kube, "open", "Completed"))
    assert kube.writes(NETWORK_POLICIES) == []
