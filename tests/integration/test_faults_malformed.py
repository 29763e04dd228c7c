"""Fault 5 of issue 20: 50 malformed RolloutJobs, applied as a user applies them, are each refused
by the API server (the CRD's schema, the object's metadata) or end with `Valid=False`, while the
operator goes on serving a valid job beside them, which completes.

Both backends give the same answers: these ran against kube-apiserver 1.24 first, and the
emulator refuses the same set in the same words (tests/kubeharness/emulator/schema.py). What a
real API server does with what it does not refuse is asserted too: unknown fields are pruned
(kube-apiserver 1.24 ignores `fieldValidation`; kubectl 1.25+ against a 1.25+ server sends
`fieldValidation=Strict` and gets them refused, which tests/e2e/test_faults_e2e.py checks on a
cluster), nulls of fields that may not be null are dropped, a whole float is an integer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from operator_kit import (
    BackgroundKubelet,
    OperatorProcess,
    job_manifest,
    job_phase,
    make_dataset,
    operator_config,
    operator_memo,
    publish,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from malformed_jobs import CASES, Malformed, Manifest, typed

pytestmark = pytest.mark.integration


async def post(session: aiohttp.ClientSession, namespace: str, body: Any) -> tuple[int, Any]:
    """What `kubectl create -f` (a plain POST, as a cluster admin) gets back."""
    path = f"/apis/rollout.dev/v1alpha1/namespaces/{namespace}/rolloutjobs"
    headers = {"Content-Type": "application/json"}
    async with session.post(path, data=json.dumps(body), headers=headers) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except json.JSONDecodeError:
            return response.status, text


def valid_condition(job: Manifest | None) -> dict[str, Any] | None:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Valid"), None)


async def test_fifty_malformed_jobs_are_refused_or_invalid_and_a_valid_job_beside_them_completes(
    kube: Kube, http: aiohttp.ClientSession, s3_settings: S3Settings, tmp_path: Path
) -> None:
    assert len(CASES) >= 50
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "hello-set", ["t1"]))
    config = operator_config(s3_settings)
    wrong: list[str] = []
    taken: list[Malformed] = []
    async with kube.operator(memo=operator_memo(kube, config)), BackgroundKubelet(kube):
        for case in CASES:
            status, body = await post(http, kube.namespace, case.manifest(dataset))
            if case.refused is None:
                if status != 201:
                    wrong.append(f"{case.id}: refused ({status}), expected taken: {body}")
                taken.append(case)
                continue
            says = body.get("message", "") if isinstance(body, dict) else str(body)
            reason = body.get("reason") if isinstance(body, dict) else None
            if (status, reason) != (case.status, case.reason) or case.refused not in says:
                wrong.append(f"{case.id}: {status} {reason} {says!r}, expected {case.refused!r}")
        # Beside them: a valid job, and one whose only fault is an unknown field (pruned).
        status, _ = await post(http, kube.namespace, job_manifest("valid", [dataset]))
        assert status == 201
        typo = job_manifest("misspelt-field", [dataset])
        typo["spec"]["nAttemps"] = 3
        status, stored = await post(http, kube.namespace, typo)
        assert status == 201
        assert "nAttemps" not in stored["spec"]
        assert stored["spec"]["nAttempts"] == 1  # pruned, and the default applied

        async def settled() -> bool:
            for name in ("valid", "misspelt-field"):
                if await job_phase(kube, name, "Completed") is None:
                    return False
            for case in taken:
                if valid_condition(await kube.find(ROLLOUT_JOBS, case.id)) is None:
                    return False
            return True

        await kube.wait_for(settled, timeout=30, what="every job valid and done, or invalid")

    for case in taken:
        job = await kube.get(ROLLOUT_JOBS, case.id)
        condition = valid_condition(job)
        assert case.invalid is not None
        assert condition is not None
        reason, words = case.invalid
        if (condition["status"], condition["reason"]) != ("False", reason) or (
            words not in condition["message"]
        ):
            wrong.append(f"{case.id}: Valid {condition}, expected {case.invalid}")
        if job["status"].get("phase") != "Failed":
            wrong.append(f"{case.id}: phase {job['status'].get('phase')}, expected Failed")
    assert wrong == []
    # Nothing ran for a malformed job: the only trials and Pods are the two good jobs'.
    made = {
        c.name.split("-oracle-")[0]
        for c in kube.calls()
        if c.method == "POST" and c.resource in (ROLLOUT_TRIALS, PODS) and c.name
    }
    assert made == {"valid", "misspelt-field"}
    valid = await kube.get(ROLLOUT_JOBS, "valid")
    assert valid["status"]["counts"]["completed"] == 1


async def test_numbers_and_nulls_are_read_as_the_api_server_reads_them(
    kube: Kube, http: aiohttp.ClientSession
) -> None:
    """Not malformed after all: a whole float where an integer goes, a null where a value has a
    default (and where none may be), a list's null item refused."""
    manifest = job_manifest("numbers", [{"name": "d", "digest": "0" * 64}])
    manifest["spec"].update(nConcurrentTrials=2.0, nAttempts=None, storage=None, maxTasks=None)
    status, stored = await post(http, kube.namespace, manifest)
    assert status == 201, stored
    assert stored["spec"]["nConcurrentTrials"] == 2
    assert stored["spec"]["nAttempts"] == 1  # null: the default
    assert "storage" not in stored["spec"] or stored["spec"]["storage"] is None
    assert stored["spec"]["maxTasks"] is None  # nullable: kept
    manifest = job_manifest("null-agent", [{"name": "d", "digest": "0" * 64}])
    manifest["spec"]["agents"] = [None]
    status, body = await post(http, kube.namespace, manifest)
    assert (status, body["reason"]) == (422, "Invalid")
    assert typed("spec.agents", "object", "null") in body["message"]


# --- what only the operator can refuse ----------------------------------------------------------

POD_SETTINGS = [
    pytest.param({"nodeSelector": {"bad key!": "v"}}, "spec.pod.nodeSelector.bad key!: is no "
                 "label key", id="node-selector-key"),
    pytest.param({"nodeSelector": {"disk": "bad value!"}}, "spec.pod.nodeSelector.disk: 'bad "
                 "value!' is no label value", id="node-selector-value"),
    pytest.param({"tolerations": [{"key": "bad key!", "operator": "Exists"}]},
                 "spec.pod.tolerations[0].key: is no label key", id="toleration-key"),
    pytest.param({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
                 "spec.pod.tolerations[0].value: must be empty when operator is Exists",
                 id="toleration-value-with-exists"),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "says"), POD_SETTINGS)
async def test_pod_settings_no_pod_can_have_make_the_job_invalid(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path, pod: dict[str, Any], says: str
) -> None:
    """What the CRD cannot check and the API server would refuse in every trial's Pod (below):
    the job is Invalid at once, with no trial."""
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "hello-set", ["t1"]))
    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await kube.create(ROLLOUT_JOBS, job_manifest("bad-pod", [dataset], pod=pod))
        job = await kube.wait_for(lambda: _invalid(kube, "bad-pod"), timeout=5, what="Valid=False")
    assert says in valid_condition(job)["message"]  # type: ignore[index]
    assert await kube.list(ROLLOUT_TRIALS, kube.namespace) == []


async def test_a_job_of_a_billion_trials_is_invalid_and_the_operator_serves_the_others(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "hello-set", ["t1"]))
    # A process of its own, memory capped: were the trials enumerated, it would fail, not the test.
    operator = OperatorProcess(kube, tmp_path, s3_settings, memory_limit=1536 << 20)
    await operator.start()
    try:
        await kube.create(ROLLOUT_JOBS, job_manifest("huge", [dataset], nAttempts=10**9))
        await kube.create(ROLLOUT_JOBS, job_manifest("beside", [dataset]))
        async with BackgroundKubelet(kube):
            await kube.wait_for(
                lambda: job_phase(kube, "beside", "Completed"), timeout=8, what="beside completes"
            )
        job = await kube.wait_for(lambda: _invalid(kube, "huge"), timeout=5, what="Valid=False")
    finally:
        await operator.kill()
    message = valid_condition(job)["message"]  # type: ignore[index]
    assert "spec.nAttempts: the job would have 1,000,000,000 trials" in message
    assert "more than the 250,000 one job may have" in message


async def _invalid(kube: Kube, name: str) -> Manifest | None:
    job = await kube.find(ROLLOUT_JOBS, name)
    condition = valid_condition(job)
    return job if condition is not None and condition["status"] == "False" else None


POD_REFUSALS = [
    pytest.param(
        {"nodeSelector": {"bad key!": "v"}},
        'spec.nodeSelector: Invalid value: "bad key!": name part must consist of',
        id="node-selector-key",
    ),
    pytest.param(
        {"nodeSelector": {"disk": "bad value!"}},
        'spec.nodeSelector: Invalid value: "bad value!": a valid label must be an empty string',
        id="node-selector-value",
    ),
    pytest.param(
        {"tolerations": [{"key": "bad key!", "operator": "Exists"}]},
        'spec.tolerations[0].key: Invalid value: "bad key!": name part must consist of',
        id="toleration-key",
    ),
    pytest.param(
        {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        'spec.tolerations[0].operator: Invalid value: core.Toleration{Key:"k", '
        'Operator:"Exists", Value:"v", Effect:"", TolerationSeconds:(*int64)(nil)}: value must '
        "be empty when `operator` is 'Exists'",
        id="toleration-value-with-exists",
    ),
]


@pytest.mark.parametrize(("pod_spec", "says"), POD_REFUSALS)
async def test_pods_that_a_jobs_pod_settings_would_make_are_refused_alike(
    kube: Kube, http: aiohttp.ClientSession, pod_spec: dict[str, Any], says: str
) -> None:
    """What spec.pod passes to its trials' Pods and the CRD cannot check: refused at the Pod,
    in the same words by both backends (the operator's Invalid above comes first)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **pod_spec},
    }
    async with http.post(f"/api/v1/namespaces/{kube.namespace}/pods", json=pod) as response:
        body = await response.json()
    assert (response.status, body["reason"]) == (422, "Invalid"), body
    assert body["message"].startswith('Pod "p" is invalid: ')
    assert says in body["message"]
