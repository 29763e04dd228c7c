"""The real operator against the loopback Kubernetes API and a real S3 endpoint (moto).

A job of 2 agents x 3 tasks x 2 attempts with nConcurrentTrials 3: trials in the seed's order,
never more than 3 unfinished, Pods finished by the test (as the kubelet would) flowing into the
trials' status and the job's counters and figures, result.json in storage; API writes per trial
and job status patches counted from the request log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kopf
import pytest
from cli_kit import s3_client, versions_by_key
from operator_kit import (
    AGENTS,
    DATASET,
    TASK_IMAGE,
    TASKS,
    expected_names,
    job_manifest,
    job_phase,
    make_dataset,
    most_unfinished,
    operator_config,
    operator_memo,
    play_kubelet,
    pod_trial_spec,
    publish,
    runner_message,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import EVENTS, PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api import catalogue
from rollout.api.layout import job_config_key, job_result_key
from rollout.api.results import JobResult
from rollout.api.trials import enumerate_trials, trial_resource_name
from rollout.controller.settings import WATCH_SERVER_TIMEOUT_SEC
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration


@pytest.fixture
def dataset(tmp_path: Path, store: ObjectStore) -> dict[str, Any]:
    root = make_dataset(tmp_path / DATASET, TASKS)
    return {**publish(store, root), "source": {"path": str(root)}}


async def test_a_job_runs_its_trials_in_order_within_its_concurrency_and_reports(
    kube: Kube, store: ObjectStore, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    config = operator_config(s3_settings)
    job = job_manifest(
        "eval", [dataset], agents=AGENTS, n_attempts=2, n_concurrent=3, metrics=[{"type": "mean"}]
    )
    async with kube.operator(memo=operator_memo(kube, config)):
        created = await kube.create(ROLLOUT_JOBS, job)
        finished_pods = await play_kubelet(kube, lambda: job_phase(kube, "eval", "Completed"))

    calls = kube.calls()
    # Trials were created in the seed's order, each once, never more than 3 unfinished.
    posted = [c.name for c in calls if c.method == "POST" and c.resource == ROLLOUT_TRIALS]
    assert posted == expected_names("eval")
    assert most_unfinished(calls) == 3
    trials = await kube.list(ROLLOUT_TRIALS, kube.namespace)
    assert len(trials) == 12
    for trial in trials:
        owner = trial["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"], o["uid"], o["controller"]) for o in owner] == [
            ("RolloutJob", "eval", created["metadata"]["uid"], True)
        ]
        assert trial["metadata"]["labels"]["rollout.dev/job"] == "eval"
        assert trial["metadata"]["labels"]["rollout.dev/environment"] == "kubernetes"
        assert trial["spec"]["image"] == TASK_IMAGE
        assert trial["spec"]["timeouts"]["agentSec"] == 120
    # One Pod per trial, named after it, and removed when the trial ended.
    assert finished_pods == set(expected_names("eval"))
    assert await kube.list(PODS, kube.namespace, labels="rollout.dev/trial") == []

    by_name = {t["metadata"]["name"]: t for t in trials}
    failed = by_name[trial_resource_name("eval", "claude", "hello-set", "task-c", 1)]["status"]
    assert failed["phase"] == "Failed"
    assert failed["error"] == {"type": "agent_execution_failed", "message": "exit code 2"}
    assert failed["failureClass"] == "agent"
    assert failed["durations"]["agentExecutionSec"] == 8.0
    passed = by_name[trial_resource_name("eval", "oracle", "hello-set", "task-b", 2)]["status"]
    assert passed["phase"] == "Succeeded"
    assert passed["reward"] == 1.0
    assert passed["podName"] == trial_resource_name("eval", "oracle", "hello-set", "task-b", 2)
    assert passed["timestamps"]["startedAt"] == "2025-01-15T10:30:00Z"

    status = (await kube.get(ROLLOUT_JOBS, "eval"))["status"]
    assert status["counts"] == {
        "total": 12, "pending": 0, "running": 0, "finished": 12, "completed": 11, "failed": 1
    }  # fmt: skip
    assert status["passRate"] == pytest.approx(7 / 11)
    assert status["meanReward"] == pytest.approx(8 / 11)
    assert status["metrics"] == [{"type": "mean", "value": pytest.approx(8 / 11)}]
    assert status["agents"]["oracle"]["passRate"] == 1.0
    assert status["agents"]["claude"]["failed"] == 1
    assert status["observedGeneration"] == 1
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Complete"]["status"] == "True"
    assert conditions["Valid"]["status"] == "True"
    assert status["resultUri"] == store.uri(job_result_key("", "eval"))

    result = JobResult.from_json(store.get_bytes(job_result_key("", "eval")))
    assert (result.total_trials, result.completed_trials, result.failed_trials) == (12, 11, 1)
    assert result.pass_rate == pytest.approx(7 / 11)
    assert result.agents["claude"].mean_reward == pytest.approx(2 / 5)
    assert [(r.agent_name, r.task_name, r.attempt) for r in result.results] == [
        (k.agent, k.task, k.attempt)
        for k in enumerate_trials(["oracle", "claude"], [("hello-set", TASKS)], 2)
    ]
    assert result.rollout is not None
    assert [(m.type, m.value) for m in result.rollout.metrics or []] == [
        ("mean", pytest.approx(8 / 11))
    ]
    written = json.loads(store.get_bytes(job_result_key("", "eval")))
    assert "metrics" not in written  # the project's additions are all under `rollout`
    assert written["rollout"]["failures"] == {"agent": 1, "task": 0, "infrastructure": 0}
    assert written["rollout"]["agents"]["claude"]["failures"]["agent"] == 1
    assert status["failures"] == {"agent": 1, "task": 0, "infrastructure": 0}
    config_json = json.loads(store.get_bytes(job_config_key("", "eval")))
    assert config_json["name"] == "eval"
    assert config_json["n_attempts"] == 2
    assert config_json["n_concurrent_trials"] == 3
    assert [a["name"] for a in config_json["agents"]] == ["oracle", "claude"]
    assert config_json["datasets"] == [dataset["source"]]


async def test_api_writes_per_trial_stay_small_and_job_status_patches_are_batched(
    kube: Kube, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    """Four writes for a trial whose runner ends within `running_status_after_sec` of its
    start (its RolloutTrial goes from Pending to its outcome), five for a longer one."""
    config = operator_config(s3_settings, status_interval_sec=1.0, running_status_after_sec=2.0)
    job = job_manifest("lean", [dataset], agents=AGENTS, n_attempts=2, n_concurrent=12)
    names = expected_names("lean")
    short = set(names[::2])  # their runner ends at once; the others' once their trial says Running

    def runs_long(pod: dict[str, Any]) -> bool:
        return pod["metadata"]["labels"]["rollout.dev/trial"] not in short

    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job)
        await play_kubelet(
            kube, lambda: job_phase(kube, "lean", "Completed"), wait_running=runs_long
        )
        await kube.settle(quiet=0.5)

    writes = kube.writes()
    for name in names:
        mine = [
            (w.method, w.resource, w.subresource)
            for w in writes
            if w.name in (name,) and w.resource in (ROLLOUT_TRIALS, PODS)
        ]
        running = [] if name in short else [("PATCH", ROLLOUT_TRIALS, "status")]
        assert mine == [
            ("POST", ROLLOUT_TRIALS, None),
            ("POST", PODS, None),
            *running,  # Running, once its runner has run for 2 s
            ("PATCH", ROLLOUT_TRIALS, "status"),  # the outcome
            ("DELETE", PODS, None),
        ], name
    # Nothing of kopf's on trials or Pods: no annotations, no finalizers.
    assert not [w for w in writes if w.resource in (ROLLOUT_TRIALS, PODS) and w.subresource is None
                and w.method == "PATCH"]  # fmt: skip
    # Meanwhile the job counted the long ones as running, from their Pods.
    first_said = next(i for i, w in enumerate(writes) if w.resource == ROLLOUT_TRIALS
                      and status_of(w).get("phase") == "Running")  # fmt: skip
    counted = next(i for i, w in enumerate(writes) if w.resource == ROLLOUT_JOBS
                   and (status_of(w).get("counts") or {}).get("running"))  # fmt: skip
    assert counted < first_said
    trial_events = len([c for c in kube.calls() if c.resource == ROLLOUT_TRIALS and c.is_write])
    pod_events = 4 * 12  # created, running, finished, deleted
    job_status_patches = kube.writes(ROLLOUT_JOBS, "lean", subresource="status")
    assert 2 <= len(job_status_patches) <= 10
    assert len(job_status_patches) * 5 < trial_events + pod_events


def status_of(call: Any) -> dict[str, Any]:
    """The status a write sends (a status patch's body), else empty."""
    if call.subresource != "status" or not isinstance(call.body, dict):
        return {}
    status = call.body.get("status")
    return status if isinstance(status, dict) else {}


async def test_trial_pods_are_watched_by_label_selector_only(
    kube: Kube, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.settle(quiet=0.3)
    pod_reads = [c for c in kube.calls() if c.resource == PODS and c.method == "GET"]
    assert pod_reads, "the operator lists and watches trial Pods"
    for call in pod_reads:
        assert call.params.get("labelSelector") == "rollout.dev/trial", call
        assert call.namespace == kube.namespace, call


async def test_an_invalid_job_gets_a_condition_and_an_event_and_creates_nothing(
    kube: Kube, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    config = operator_config(s3_settings)
    bad = job_manifest("bad", [dataset], agents=[{"name": "claude"}])  # no execute script
    missing = job_manifest("missing", [{"name": "gone", "digest": "0" * 64}])
    # Local mode's host sandbox is no cluster's: its trials would wait forever, so it is refused.
    local = job_manifest("local", [dataset], environment={"type": "local"})
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, bad)
        await kube.create(ROLLOUT_JOBS, missing)
        await kube.create(ROLLOUT_JOBS, local)
        failed = await kube.wait_for(lambda: job_phase(kube, "bad", "Failed"), what="bad fails")
        gone = await kube.wait_for(lambda: job_phase(kube, "missing", "Failed"), what="missing")
        nowhere = await kube.wait_for(lambda: job_phase(kube, "local", "Failed"), what="local")
        await kube.settle(quiet=0.3)

    conditions = {c["type"]: c for c in failed["status"]["conditions"]}
    assert conditions["Valid"]["status"] == "False"
    assert conditions["Valid"]["reason"] == "InvalidSpec"
    assert "spec.agents[0].execute" in conditions["Valid"]["message"]
    assert "'claude' needs an 'execute' script" in conditions["Valid"]["message"]
    assert conditions["Failed"]["status"] == "True"
    conditions = {c["type"]: c for c in gone["status"]["conditions"]}
    assert conditions["Valid"]["reason"] == "DatasetNotFound"
    assert "spec.datasets[0] (gone)" in conditions["Valid"]["message"]
    assert "does not exist" in conditions["Valid"]["message"]

    conditions = {c["type"]: c for c in nowhere["status"]["conditions"]}
    assert conditions["Valid"]["reason"] == "UnsupportedEnvironment"
    assert "spec.environment.type is 'local'" in conditions["Valid"]["message"]
    assert "never on a cluster" in conditions["Valid"]["message"]

    events = [c.body for c in kube.calls() if c.method == "POST" and c.resource == EVENTS]
    warnings = {(e["involvedObject"]["name"], e["reason"], e["type"]) for e in events}
    assert ("bad", "InvalidSpec", "Warning") in warnings
    assert ("missing", "DatasetNotFound", "Warning") in warnings
    assert ("local", "UnsupportedEnvironment", "Warning") in warnings
    assert await kube.list(ROLLOUT_TRIALS, kube.namespace) == []
    assert await kube.list(PODS, kube.namespace) == []


async def test_the_operator_runs_a_job_with_the_settings_it_ships_with(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """No test speed-ups: kopf's defaults, then the operator's own (`configure_settings`), with
    the watch timeout it sends to the API server (once `270.0`, which a real one refuses)."""
    settings = kopf.OperatorSettings()
    dataset = publish(store, make_dataset(tmp_path / "shipped", ["only"]))
    memo = operator_memo(kube, operator_config(s3_settings))
    async with kube.operator(settings=settings, memo=memo):
        await kube.create(ROLLOUT_JOBS, job_manifest("shipped", [dataset]))
        await play_kubelet(kube, lambda: job_phase(kube, "shipped", "Completed"))
    watches = [c for c in kube.calls() if c.is_watch]
    assert {c.params["timeoutSeconds"] for c in watches} == {str(WATCH_SERVER_TIMEOUT_SEC)}
    kopfs = {c.resource for c in watches if c.user_agent.startswith("kopf")}
    assert kopfs >= {ROLLOUT_JOBS}
    assert not kopfs & {ROLLOUT_TRIALS, PODS}  # the operator's own watches (`watches`)
    assert {c.resource for c in watches} >= {ROLLOUT_JOBS, ROLLOUT_TRIALS, PODS}


async def test_a_docker_job_runs_its_trials_as_pods_like_kubernetes(
    kube: Kube, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    """`docker` means the task's containers; on a cluster they are the trial's Pod (DESIGN.md,
    "Environment types"), whether the CLI or a GitOps repository submitted the job."""
    config = operator_config(s3_settings)
    job = job_manifest("dockerjob", [dataset], environment={"type": "docker"})
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job)
        finished_pods = await play_kubelet(kube, lambda: job_phase(kube, "dockerjob", "Completed"))

    trials = await kube.list(ROLLOUT_TRIALS, kube.namespace)
    assert trials
    assert {t["spec"]["environmentType"] for t in trials} == {"kubernetes"}
    assert finished_pods == {t["metadata"]["name"] for t in trials}
    status = (await kube.get(ROLLOUT_JOBS, "dockerjob"))["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Valid"] == "True"


async def test_a_job_naming_a_builtin_agent_runs_it_with_its_key_from_the_secret(
    kube: Kube, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    """A RolloutJob written by hand (GitOps) names a built-in: the trials carry which one, its
    pinned version and model (the runner runs the catalogue's scripts), and the key comes from
    the Secret the job names."""
    key_ref = {"secretKeyRef": {"name": "agent-keys", "key": "anthropic"}}
    agent = {
        "name": "claude-code",
        "modelName": "claude-opus-4-1",
        "env": [{"name": "ANTHROPIC_API_KEY", "valueFrom": key_ref}],
    }
    job = job_manifest("builtin", [dataset], agents=[agent])
    pods: list[dict[str, Any]] = []

    def record(pod: dict[str, Any]) -> str:
        pods.append(pod)
        return runner_message(1.0)

    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await kube.create(ROLLOUT_JOBS, job)
        await play_kubelet(kube, lambda: job_phase(kube, "builtin", "Completed"), record)

    trials = await kube.list(ROLLOUT_TRIALS, kube.namespace)
    version = catalogue_version("claude-code")
    for trial in trials:
        spec_agent = trial["spec"]["agent"]
        assert spec_agent["builtin"] == "claude-code"
        assert spec_agent["version"] == version
        assert spec_agent["modelName"] == "claude-opus-4-1"
        assert "install" not in spec_agent
        assert "execute" not in spec_agent
    assert pods
    for pod in pods:
        assert pod_trial_spec(pod)["agent"]["version"] == version
        carriers = [
            e for c in pod["spec"]["containers"] for e in c.get("env", []) if "valueFrom" in e
        ]
        assert {"name": "agent-keys", "key": "anthropic"} in [
            {k: e["valueFrom"]["secretKeyRef"][k] for k in ("name", "key")}
            for e in carriers
            if "secretKeyRef" in e["valueFrom"]
        ]


def catalogue_version(name: str) -> str:
    agent = catalogue.get(name)
    assert agent is not None
    return agent.version


async def test_a_job_has_its_config_json_from_its_start_and_keeps_it_when_deleted(
    kube: Kube, store: ObjectStore, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    """A RolloutJob applied without the CLI: the operator writes its job.yaml form as JSON when
    it accepts the job, before the job's first trial; a job deleted mid-run keeps it."""
    config = operator_config(s3_settings)
    job = job_manifest(
        "early", [dataset], environment={"type": "docker"}, metrics=[{"type": "mean"}]
    )
    first = trial_resource_name("early", "oracle", DATASET, TASKS[0], 1)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job)
        # Running, and no trial has finished: no kubelet plays here.
        await kube.wait_for(lambda: kube.find(PODS, first), what="the first trial's Pod")
        written = store.get_bytes(job_config_key("", "early"))
        await kube.delete(ROLLOUT_JOBS, "early")
        await kube.wait_for(lambda: kube.gone(ROLLOUT_JOBS, "early"), what="the job deleted")

    config_json = json.loads(written)
    assert config_json["name"] == "early"
    assert config_json["environment"]["type"] == "docker"  # as applied (it ran as Pods)
    assert config_json["datasets"] == [dataset["source"]]
    assert config_json["metrics"] == [{"type": "mean"}]
    assert store.get_bytes(job_config_key("", "early")) == written  # kept
    assert not store.exists(job_result_key("", "early"))  # the job never finished


async def test_a_config_json_in_storage_before_the_job_is_never_overwritten(
    kube: Kube, store: ObjectStore, dataset: dict[str, Any], s3_settings: S3Settings
) -> None:
    """`rollout run` writes config.json (the file as submitted) before it creates the
    RolloutJob: the operator keeps it, byte for byte, and writes it no second time."""
    s3_client(s3_settings).put_bucket_versioning(
        Bucket=s3_settings.location.bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    key = job_config_key("", "submitted")
    submitted = b'{\n  "name": "submitted",\n  "environment": {\n    "type": "docker"\n  }\n}\n'
    store.put_bytes(key, submitted, "application/json")
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("submitted", [dataset]))
        await play_kubelet(kube, lambda: job_phase(kube, "submitted", "Completed"))
    assert store.get_bytes(key) == submitted
    assert versions_by_key(s3_settings, "jobs/submitted/")[key] == 1
