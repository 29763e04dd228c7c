"""The loopback Kubernetes API harness (tests/kubeharness), proven with a tiny kopf operator.

The demo operator stands in for the real one: on a new RolloutJob it reads a Secret, creates a Pod
owned by the job and marks the job Running; when the Pod ends, it copies the runner's termination
message into the job's status. It talks to the API with the `kubernetes` client (creates, reads,
status patches) and with kopf (watches, finalizer, progress annotations), as the real operator will.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import kopf
import kubernetes.client
import pytest

from kubeharness.crds import minimal_crd, minimal_rollout_crds
from kubeharness.emulator.emulated import kube_api
from kubeharness.kube import Kube
from kubeharness.operator_thread import OperatorCrashed, fast_settings
from kubeharness.pod_status import terminated, waiting
from kubeharness.real.kube import RealKube
from kubeharness.real.plane import NODE
from kubeharness.resources import CRDS_DIR, EVENTS, GROUP, PODS, ROLLOUT_JOBS, SECRETS, VERSION

pytestmark = pytest.mark.integration

JOB_LABEL = "rollout.dev/job"
FINALIZER = "rollout.dev/finalizer"
NS = "default"


def rollout_settings() -> kopf.OperatorSettings:
    """The persistence and posting choices the real operator makes, sped up for tests."""
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="rollout.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="rollout.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    return fast_settings(settings)


def demo_registry() -> kopf.OperatorRegistry:
    """Handlers of the demo operator, in a registry of their own (not kopf's global one)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.create(GROUP, VERSION, "rolloutjobs", registry=registry)
    def start_job(
        body: kopf.Body, name: str, namespace: str | None, patch: kopf.Patch, memo: Any, **_: Any
    ) -> None:
        assert namespace is not None  # RolloutJobs are namespaced
        core: kubernetes.client.CoreV1Api = memo.core
        secret = core.read_namespaced_secret(
            body["spec"]["credentialsSecret"], namespace, _request_timeout=5
        )
        pod_name = f"{name}-trial-0"
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "labels": {JOB_LABEL: name}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "environment", "image": "busybox"},
                    {
                        "name": "runner",
                        "image": "runner",
                        "env": [
                            {"name": "TOKEN_KEYS", "value": ",".join(sorted(secret.data or {}))}
                        ],
                    },
                ],
            },
        }
        kopf.adopt(pod, owner=body)
        try:
            core.create_namespaced_pod(namespace, cast(Any, pod), _request_timeout=5)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:  # created before a restart: accept it
                raise
        patch.status["phase"] = "Running"
        patch.status["pod"] = pod_name

    @kopf.on.delete(GROUP, VERSION, "rolloutjobs", registry=registry)
    def stop_job(**_: Any) -> None:
        pass  # only here so that kopf puts its finalizer on jobs

    @kopf.on.event("v1", "pods", labels={JOB_LABEL: kopf.PRESENT}, registry=registry)
    def pod_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
    ) -> None:
        phase = body.get("status", {}).get("phase")
        if event["type"] == "DELETED" or phase not in ("Succeeded", "Failed"):
            return
        assert namespace is not None  # Pods are namespaced
        job = body["metadata"]["labels"][JOB_LABEL]
        custom: kubernetes.client.CustomObjectsApi = memo.custom
        current = cast(
            dict[str, Any],
            custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "rolloutjobs", job, _request_timeout=5
            ),
        )
        if current.get("status", {}).get("phase") == phase:
            return  # already recorded (kopf replays events after a restart)
        runner = next(s for s in body["status"]["containerStatuses"] if s["name"] == "runner")
        summary = json.loads(runner["state"]["terminated"]["message"])
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            "rolloutjobs",
            job,
            {"status": {"phase": phase, "reward": summary["reward"]}},
            _request_timeout=5,
        )

    return registry


@pytest.fixture
async def demo_kube() -> AsyncIterator[Kube]:
    """The demo operator's API: always the emulator, with minimal CRDs and the job's Secret
    (not conftest's `kube`: no chart RBAC, no real control plane)."""
    async with kube_api(crds=minimal_rollout_crds()) as kube:
        await kube.create(
            SECRETS, {"metadata": {"name": "creds", "namespace": NS}, "data": {"token": "eA=="}}
        )
        yield kube


@pytest.fixture
def memo(demo_kube: Kube) -> kopf.Memo:
    """The demo operator's API clients, pointed at the loopback server."""
    configuration = kubernetes.client.Configuration()
    configuration.host = demo_kube.url
    api = kubernetes.client.ApiClient(configuration)
    return kopf.Memo(
        core=kubernetes.client.CoreV1Api(api), custom=kubernetes.client.CustomObjectsApi(api)
    )


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"credentialsSecret": "creds"},
    }


async def status_of(kube: Kube, name: str) -> dict[str, Any]:
    found = await kube.find(ROLLOUT_JOBS, name)
    return found.get("status", {}) if found else {}


async def test_demo_operator_runs_a_job_and_its_writes_are_counted(
    demo_kube: Kube, memo: kopf.Memo
) -> None:
    async with demo_kube.operator(registry=demo_registry(), settings=rollout_settings(), memo=memo):
        created = await demo_kube.create(ROLLOUT_JOBS, job("job-a"))

        pod = await demo_kube.wait_for(
            lambda: demo_kube.find(PODS, "job-a-trial-0"), what="pod created"
        )
        assert pod["metadata"]["labels"] == {JOB_LABEL: "job-a"}
        assert pod["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
        assert pod["status"] == {"phase": "Pending"}  # set by the API server, not the operator
        runner_env = pod["spec"]["containers"][1]["env"]
        assert runner_env == [{"name": "TOKEN_KEYS", "value": "token"}]  # the Secret was read
        running = await demo_kube.wait_for(
            lambda: _phase_is(demo_kube, "job-a", "Running"), what="job Running"
        )
        assert running["status"]["pod"] == "job-a-trial-0"

        await demo_kube.run_pod("job-a-trial-0")
        summary = json.dumps({"reward": 1.0, "error": None})
        finished = await demo_kube.finish_pod("job-a-trial-0", messages={"runner": summary})
        assert finished["status"]["phase"] == "Succeeded"
        done = await demo_kube.wait_for(
            lambda: _phase_is(demo_kube, "job-a", "Succeeded"), what="job Succeeded"
        )
        assert done["status"]["reward"] == 1.0

        job_writes = [
            f"{c.method} {c.subresource}" for c in demo_kube.writes(ROLLOUT_JOBS, "job-a")
        ]
        # kopf: finalizer (JSON patch) + progress/diffbase annotations; its status patch carries
        # the create handler's `patch.status`; the demo's pod handler: one status patch.
        assert job_writes == ["PATCH None", "PATCH None", "PATCH status", "PATCH status"]
        assert [c.method for c in demo_kube.writes(PODS)] == ["POST"]  # nothing written to the Pod
        assert demo_kube.writes(EVENTS) == []  # posting level WARNING: no routine events

        stored = await demo_kube.get(ROLLOUT_JOBS, "job-a")
        assert stored["metadata"]["finalizers"] == [FINALIZER]
        annotations = stored["metadata"]["annotations"]
        assert "rollout.dev/last-handled-configuration" in annotations
        assert sorted(annotations) == [  # kopf's state, all under our own domain
            "rollout.dev/kopf-managed",
            "rollout.dev/last-handled-configuration",
        ]

        # Deletion: kopf runs the delete handler and removes its finalizer; the garbage
        # collector then removes the Pod the job owned.
        await demo_kube.delete(ROLLOUT_JOBS, "job-a")
        await demo_kube.wait_for(
            lambda: _gone(demo_kube, ROLLOUT_JOBS, "job-a"), what="job deleted after its finalizer"
        )
        assert await demo_kube.find(PODS, "job-a-trial-0") is None


async def test_a_new_operator_continues_from_the_state_in_the_api(
    demo_kube: Kube, memo: kopf.Memo
) -> None:
    settings = rollout_settings()
    async with demo_kube.operator(registry=demo_registry(), settings=settings, memo=memo) as first:
        await demo_kube.create(ROLLOUT_JOBS, job("job-b"))
        await demo_kube.wait_for(
            lambda: _phase_is(demo_kube, "job-b", "Running"), what="job Running"
        )
        await first.kill()  # as if the process died: nothing in memory survives

    # The Pod finishes while no operator runs.
    summary = json.dumps({"reward": 0.5})
    await demo_kube.finish_pod(
        "job-b-trial-0", messages={"runner": summary}, exit_codes={"runner": 0}
    )
    restart = demo_kube.mark()

    async with demo_kube.operator(registry=demo_registry(), settings=rollout_settings(), memo=memo):
        done = await demo_kube.wait_for(
            lambda: _phase_is(demo_kube, "job-b", "Succeeded"), what="job Succeeded after restart"
        )
        assert done["status"]["reward"] == 0.5
        # Give the new operator time to (wrongly) handle the job again: wait until it has
        # re-listed jobs and pods and gone quiet, then check it created nothing.
        await demo_kube.settle()

    assert [str(c) for c in demo_kube.writes(PODS, since=restart)] == []
    job_writes = demo_kube.writes(ROLLOUT_JOBS, "job-b", since=restart)
    assert [(c.method, c.subresource) for c in job_writes] == [("PATCH", "status")]


OPERATOR_FILE = """
import logging
import kopf

@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    settings.persistence.finalizer = "rollout.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="rollout.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="rollout.dev")
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 5

@kopf.on.create("rollout.dev", "v1alpha1", "rolloutjobs")
def start_job(patch, **_):
    patch.status["phase"] = "Running"
"""


@contextlib.asynccontextmanager
async def operator_process(
    operator_file: Path, kubeconfig: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """`kopf run` in a subprocess; killed at the end if the test has not ended it already."""
    command = [sys.executable, "-m", "kopf", "run", "--standalone", "-n", NS, str(operator_file)]
    process = await asyncio.create_subprocess_exec(
        *command,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_an_operator_process_killed_with_sigkill_and_restarted(
    demo_kube: Kube, tmp_path: Path
) -> None:
    """`kopf run` in a subprocess, logged in through kopf's own kubeconfig login."""
    operator_file = tmp_path / "operator.py"
    operator_file.write_text(OPERATOR_FILE, encoding="utf-8")
    kubeconfig = demo_kube.write_kubeconfig(tmp_path / "kubeconfig")

    async with operator_process(operator_file, kubeconfig) as first:
        await demo_kube.create(ROLLOUT_JOBS, job("job-d"))
        await demo_kube.wait_for(
            lambda: _phase_is(demo_kube, "job-d", "Running"), timeout=30, what="job-d"
        )
        first.send_signal(signal.SIGKILL)
        assert await first.wait() == -signal.SIGKILL

    await demo_kube.create(ROLLOUT_JOBS, job("job-e"))  # while no operator runs
    restart = demo_kube.mark()
    async with operator_process(operator_file, kubeconfig):
        await demo_kube.wait_for(
            lambda: _phase_is(demo_kube, "job-e", "Running"), timeout=30, what="job-e"
        )
        await demo_kube.settle()
    assert demo_kube.writes(ROLLOUT_JOBS, "job-d", since=restart) == []  # job-d is not redone
    assert {c.user_agent.split("/")[0] for c in demo_kube.calls(restart)} == {"kopf"}


async def test_the_real_crds_are_served_and_prune_unknown_fields() -> None:
    async with kube_api(crds=CRDS_DIR) as kube, aiohttp.ClientSession() as session:
        discovery_url = f"{kube.url}/apis/{GROUP}/{VERSION}"
        async with session.get(discovery_url, timeout=aiohttp.ClientTimeout(total=5)) as rsp:
            discovery = await rsp.json()
        served = {r["name"]: r.get("shortNames") for r in discovery["resources"]}
        assert served == {
            "rolloutjobs": ["rj"],
            "rolloutjobs/status": ["rj"],
            "rollouttrials": ["rt"],
            "rollouttrials/status": ["rt"],
            "rolloutimages": ["ri"],
            "rolloutimages/status": ["ri"],
        }

        spec = {
            "agents": [{"name": "oracle", "bogus": 1}],
            "datasets": [{"name": "hello", "digest": "0" * 64}],
            "notAField": True,
        }
        created = await kube.create(ROLLOUT_JOBS, {**job("job-f"), "spec": spec})
        assert created["spec"]["agents"] == [{"name": "oracle"}]
        assert created["spec"]["datasets"] == [{"name": "hello", "digest": "0" * 64}]
        assert "notAField" not in created["spec"]
        assert created["spec"]["nAttempts"] == 1  # the schema's default, as a real server sets
        # What kopf would store if a handler returned a value: gone, as on a real cluster.
        status = {"phase": "Running", "start_job": {"pod": "x"}}
        patched = await kube.patch_status(ROLLOUT_JOBS, "job-f", status)
        assert patched["status"] == {"phase": "Running"}


async def test_an_operator_that_fails_at_startup_is_reported_with_its_cause(
    demo_kube: Kube,
) -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(**_: Any) -> None:
        raise kopf.PermanentError("the storage bucket is not configured")

    with pytest.raises(OperatorCrashed) as crash:
        async with demo_kube.operator(registry=registry, ready_timeout=30):
            pass
    assert "the storage bucket is not configured" in str(crash.value)


async def test_status_subresource_and_resource_versions(demo_kube: Kube) -> None:
    created = await demo_kube.create(ROLLOUT_JOBS, {**job("job-c"), "status": {"phase": "Bogus"}})
    assert "status" not in created  # status is ignored on create
    assert created["metadata"]["generation"] == 1

    with_status = await demo_kube.patch_status(ROLLOUT_JOBS, "job-c", {"phase": "Running"})
    main = await demo_kube.patch(
        ROLLOUT_JOBS, "job-c", {"spec": {"x": 1}, "status": {"phase": "No"}}
    )
    assert main["status"] == {"phase": "Running"}  # the main endpoint leaves status alone
    assert main["metadata"]["generation"] == 2  # the spec changed
    assert with_status["metadata"]["generation"] == 1
    versions = [created, with_status, main]
    revisions = [int(body["metadata"]["resourceVersion"]) for body in versions]
    assert revisions == sorted(set(revisions))

    same = await demo_kube.patch(ROLLOUT_JOBS, "job-c", {"spec": {"x": 1}})
    assert same["metadata"]["resourceVersion"] == main["metadata"]["resourceVersion"]  # no-op


async def test_watch_resumes_from_a_resource_version_with_selectors(demo_kube: Kube) -> None:
    pods_url = f"{demo_kube.url}/api/v1/namespaces/{NS}/pods"
    pod = {"metadata": {"name": "p1", "labels": {"app": "a"}}, "spec": {"containers": []}}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(pods_url, params={"labelSelector": "app in (a,b)"}) as response:
            listing = await response.json()
        assert listing["kind"] == "PodList"
        assert listing["items"] == []
        since = listing["metadata"]["resourceVersion"]

        # Changes made before the watch starts must still arrive (no gap after the list).
        await demo_kube.create(PODS, pod, namespace=NS)
        await demo_kube.create(
            PODS, {**pod, "metadata": {"name": "p2", "labels": {"app": "z"}}}, NS
        )
        await demo_kube.set_pod_status("p1", containers={})
        await demo_kube.delete(PODS, "p1")

        params = {
            "watch": "true",
            "resourceVersion": since,
            "labelSelector": "app in (a,b)",
            "timeoutSeconds": "1",
        }
        async with session.get(pods_url, params=params) as response:
            lines = (await response.text()).splitlines()  # ends after timeoutSeconds
    events = [json.loads(line) for line in lines]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "p1"),
        ("MODIFIED", "p1"),
        ("DELETED", "p1"),
    ]


async def test_injected_errors_and_kubelet_states(demo_kube: Kube) -> None:
    pod = {"metadata": {"name": "p3"}, "spec": {"containers": [{"name": "environment"}]}}
    await demo_kube.create(PODS, pod, namespace=NS)
    demo_kube.fail("PATCH", PODS, name="p3", status=503, reason="ServiceUnavailable")
    url = f"{demo_kube.url}/api/v1/namespaces/{NS}/pods/p3"
    headers = {"Content-Type": "application/merge-patch+json"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        statuses = []
        for _ in range(2):
            async with session.patch(
                url, json={"metadata": {"labels": {"a": "b"}}}, headers=headers
            ) as rsp:
                statuses.append(rsp.status)
    assert statuses == [503, 200]

    pulling = waiting("ImagePullBackOff", 'Back-off pulling image "nope"')
    stuck = await demo_kube.set_pod_status("p3", containers={"environment": pulling})
    assert stuck["status"]["phase"] == "Pending"
    [stuck_state] = [s["state"] for s in stuck["status"]["containerStatuses"]]
    assert stuck_state["waiting"]["reason"] == "ImagePullBackOff"
    killed = terminated(137, message="oom")
    failed = await demo_kube.set_pod_status("p3", containers={"environment": killed})
    assert failed["status"]["phase"] == "Failed"
    [failed_state] = [s["state"] for s in failed["status"]["containerStatuses"]]
    assert failed_state["terminated"] == {**killed["terminated"], "reason": "Error"}
    with pytest.raises(ValueError, match="no containers"):
        await demo_kube.set_pod_status("p3", containers={"runner": terminated(0)})


async def test_the_kubelet_sets_the_pods_start_time_once_when_it_takes_the_pod(
    kube: Kube,
) -> None:
    """status.startTime is the kubelet's: set when it accepts a bound Pod, before it pulls the
    images, and never changed after; a Pod no node took has none (the cost of a trial runs
    from it)."""

    async def make(name: str) -> None:
        container = {"name": "environment", "image": "registry.example.test/task:1"}
        await kube.create(PODS, {"metadata": {"name": name}, "spec": {"containers": [container]}})

    await make("unschedulable")
    unschedulable = await kube.set_pod_status(
        "unschedulable",
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
            }
        ],
    )
    assert "startTime" not in unschedulable["status"]
    assert "nodeName" not in unschedulable["spec"]

    await make("pulling")
    pulling = await kube.set_pod_status(
        "pulling", containers={"environment": waiting("ImagePullBackOff", "Back-off pulling")}
    )
    assert pulling["status"]["phase"] == "Pending"
    started = pulling["status"]["startTime"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", started)  # RFC 3339, as the API writes
    if isinstance(kube, RealKube):  # the emulator takes status for unbound Pods
        assert pulling["spec"]["nodeName"] == NODE

    earlier = "2024-05-01T12:00:00Z"  # a start long ago: a later write must not move it
    await kube.patch_status(PODS, "pulling", {"startTime": earlier})
    running = await kube.run_pod("pulling")
    finished = await kube.finish_pod("pulling")
    assert running["status"]["startTime"] == finished["status"]["startTime"] == earlier


async def test_peering_with_kopf_peering_objects() -> None:
    peering_crd = minimal_crd("KopfPeering", "kopfpeerings", group="kopf.dev", version="v1")
    async with kube_api(crds=[*minimal_rollout_crds(), peering_crd]) as kube:
        await kube.create(
            "kopf.dev/v1/kopfpeerings", {"metadata": {"name": "rollout", "namespace": NS}}
        )
        async with kube.operator(registry=demo_registry(), peering_name="rollout") as operator:
            peering = await kube.wait_for(
                lambda: _peers(kube), what="operator's keep-alive in the peering object"
            )
            assert operator.alive
            assert len(peering) == 1


async def _phase_is(kube: Kube, name: str, phase: str) -> dict[str, Any] | None:
    found = await kube.find(ROLLOUT_JOBS, name)
    return found if found and found.get("status", {}).get("phase") == phase else None


async def _gone(kube: Kube, resource: str, name: str) -> bool:
    return await kube.find(resource, name) is None


async def _peers(kube: Kube) -> dict[str, Any]:
    found = await kube.find("kopf.dev/v1/kopfpeerings", "rollout")
    return dict((found or {}).get("status", {}))


async def test_the_bridge_identity_is_bound_by_the_charts_bridge_rbac(
    kube: Kube, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`Identity.BRIDGE` gets what the chart's bridge RBAC grants and nothing more, on both
    backends: a Secret by name but no list of them, a claim on a trial but no Pod; its requests
    are in the request log; and the bridge's handlers start under it, serving the cluster."""
    # Imported here: this file's tests are appended to, its import block left as it is.
    import kubernetes.config
    from bridge_kit import bridge_trial

    from kubeharness.identity import Identity
    from kubeharness.resources import ROLLOUT_TRIALS
    from rollout.bridge import handlers as bridge_handlers
    from rollout.bridge.settings import BridgeSettings

    await kube.apply_chart_rbac()
    await kube.create(SECRETS, {"metadata": {"name": "agent-env"}, "data": {"KEY": "eA=="}})
    await kube.create(ROLLOUT_TRIALS, bridge_trial("remote"))
    api = kubernetes.client.ApiClient(kube.client_configuration(Identity.BRIDGE))
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    ns = kube.namespace
    mark = kube.mark()

    secret = await asyncio.to_thread(
        core.read_namespaced_secret, "agent-env", ns, _request_timeout=5
    )
    assert secret.data == {"KEY": "eA=="}
    with pytest.raises(kubernetes.client.ApiException) as listing:
        await asyncio.to_thread(core.list_namespaced_secret, ns, _request_timeout=5)
    assert listing.value.status == 403
    claim = {"metadata": {"annotations": {"rollout.dev/bridge": "rollout-operator-bridge"}}}
    await asyncio.to_thread(
        custom.patch_namespaced_custom_object,
        GROUP,
        VERSION,
        ns,
        "rollouttrials",
        "remote",
        claim,
        _request_timeout=5,
    )
    trial = await kube.get(ROLLOUT_TRIALS, "remote")
    assert trial["metadata"]["annotations"]["rollout.dev/bridge"] == "rollout-operator-bridge"
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(kubernetes.client.ApiException) as creating:
        await asyncio.to_thread(core.create_namespaced_pod, ns, pod, _request_timeout=5)
    assert creating.value.status == 403
    assert await kube.find(PODS, "p") is None
    [patched] = kube.writes(ROLLOUT_TRIALS, "remote", since=mark)
    assert patched.body == claim  # the bridge's requests are in the log, as the operator's

    # The same user through a kubeconfig and through kopf's connection.
    kubeconfig = kube.write_kubeconfig(tmp_path / "bridge.kubeconfig", identity=Identity.BRIDGE)
    via_kubeconfig = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    with pytest.raises(kubernetes.client.ApiException) as listing:
        await asyncio.to_thread(
            kubernetes.client.CoreV1Api(via_kubeconfig).list_namespaced_secret,
            ns,
            _request_timeout=5,
        )
    assert listing.value.status == 403
    assert kube.connection(Identity.BRIDGE).token == kube.client_configuration(
        Identity.BRIDGE
    ).api_key["authorization"].removeprefix("Bearer ")

    # The bridge's own handlers, as the chart runs them (cluster-wide), start without an error
    # (with no trial to run: running one needs a Docker engine).
    await kube.delete(ROLLOUT_TRIALS, "remote")
    memo = kopf.Memo(
        settings=BridgeSettings(identity="rollout-operator-bridge"),
        api_client=api,
        environ={},
        work_root=tmp_path,
    )
    caplog.set_level(logging.WARNING)
    async with kube.operator(
        registry=bridge_handlers.REGISTRY, identity=Identity.BRIDGE, memo=memo, clusterwide=True
    ):
        await kube.settle()
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
