"""The bridge end to end on loopback: the real operator and a real bridge against the test's
Kubernetes API, real S3, and the docker provider talking to a real Docker-compatible engine
(Podman's API service, reached over tcp:// as a remote engine is; skipped, saying why, where
containers cannot run).

A RolloutJob of `type: docker` with a `dockerHost` runs as any job does: the operator makes its
RolloutTrials, the bridge claims and runs them in containers of that engine, and the job's
status, counters and result.json come out as for Pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bridge_docker_kit import tcp_address
from bridge_kit import BridgeProcess, bridge_containers, bridge_memo, bridge_settings
from engine_kit import EngineUnderTest
from operator_kit import (
    job_manifest,
    job_phase,
    make_dataset,
    operator_config,
    operator_memo,
    publish_whole,
)
from s3_kit import S3Settings

from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS, ROLLOUT_TRIALS, SECRETS
from rollout.api.layout import trial_prefix
from rollout.api.results import JobResult, TrialResult
from rollout.api.trials import trial_resource_name
from rollout.bridge import handlers
from rollout.bridge.kube import ANNOTATION_BRIDGE
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

SLOW_SOLUTION = "#!/bin/sh\nsleep 120\necho solved\n"


@pytest.fixture
def engine_address(test_engine: EngineUnderTest) -> Iterator[str]:
    with tcp_address(test_engine) as address:
        yield address


def trial(job: str, task: str) -> str:
    return trial_resource_name(job, "oracle", "set", task, 1)


def result_of(store: ObjectStore, job: str, task: str) -> TrialResult:
    return TrialResult.from_json(
        store.get_bytes(trial_prefix("", job, "oracle", "set", task, 1) + "result.json")
    )


def remote_job(name: str, dataset: dict[str, str], address: str, **spec: Any) -> dict[str, Any]:
    return job_manifest(
        name, [dataset], environment={"type": "docker", "dockerHost": address}, **spec
    )


def write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


async def trial_running(kube: Kube, name: str) -> dict[str, Any] | None:
    found = await kube.find(ROLLOUT_TRIALS, name)
    return found if ((found or {}).get("status") or {}).get("phase") == "Running" else None


async def test_a_remote_docker_job_runs_on_the_engine_with_the_seeds_outcomes(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    """The oracle scores 1.0 (a), a verifier that exits non-zero is verifier_failed (b), an
    agent past its timeout is agent_execution_timeout (c); the job completes with its figures,
    and no container is left on the engine."""
    store = s3_settings.store()
    root = make_dataset(tmp_path / "set", ["a", "b", "c"], image=test_engine.image)
    write(
        root / "b" / "tests" / "test.sh", "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\nexit 3\n"
    )
    write(root / "c" / "solution" / "solve.sh", SLOW_SOLUTION)
    (root / "c" / "task.toml").write_text(
        f'version = "1.0"\n[agent]\ntimeout_sec = 2\n[environment]\n'
        f'docker_image = "{test_engine.image}"\n'
    )
    dataset = publish_whole(store, root, tmp_path / "cache")
    memo = bridge_memo(kube, bridge_settings(kube, s3_settings), tmp_path / "bridge")
    async with (
        kube.operator(memo=operator_memo(kube, operator_config(s3_settings))),
        kube.operator(registry=handlers.REGISTRY, memo=memo),
    ):
        await kube.create(ROLLOUT_JOBS, remote_job("remote", dataset, engine_address))
        done = await kube.wait_for(lambda: job_phase(kube, "remote", "Completed"), timeout=120)
    assert done is not None
    status = done["status"]
    assert status["counts"]["finished"] == 3
    a, b, c = (result_of(store, "remote", task) for task in "abc")
    assert a.reward == 1.0
    assert a.error is None
    assert b.error is not None
    assert b.error.type == "verifier_failed"
    assert c.error is not None
    assert c.error.type == "agent_execution_timeout"
    for task, phase in (("a", "Succeeded"), ("b", "Failed"), ("c", "Failed")):
        made = await kube.get(ROLLOUT_TRIALS, trial("remote", task))
        assert made["status"]["phase"] == phase
        assert made["metadata"]["annotations"][ANNOTATION_BRIDGE] == "test-bridge"
        assert "podName" not in made["status"]
        assert made["status"]["resultUri"].endswith(f"/remote/oracle/set/{task}__1/result.json")
    keys = store.list_keys(trial_prefix("", "remote", "oracle", "set", "a", 1))
    assert any(k.endswith("/logs/verifier/reward.txt") for k in keys)
    job_result = JobResult.from_json(store.get_bytes("jobs/remote/result.json"))
    assert (job_result.total_trials, job_result.completed_trials) == (3, 1)
    assert sorted(memo.bridge.started) == [
        (kube.namespace, trial("remote", t)) for t in sorted("abc")
    ]
    assert bridge_containers(test_engine, "test-bridge") == []


async def test_a_cancelled_job_ends_its_running_sandbox_and_records_the_trial(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    store = s3_settings.store()
    root = make_dataset(tmp_path / "set", ["a"], image=test_engine.image)
    write(root / "a" / "solution" / "solve.sh", SLOW_SOLUTION)
    dataset = publish_whole(store, root, tmp_path / "cache")
    settings = bridge_settings(kube, s3_settings, identity="cancel-bridge")
    async with (
        kube.operator(memo=operator_memo(kube, operator_config(s3_settings))),
        kube.operator(
            registry=handlers.REGISTRY, memo=bridge_memo(kube, settings, tmp_path / "bridge")
        ),
    ):
        await kube.create(ROLLOUT_JOBS, remote_job("cancel", dataset, engine_address))
        await kube.wait_for(lambda: trial_running(kube, trial("cancel", "a")), timeout=60)
        await kube.wait_for(
            lambda: _some(bridge_containers(test_engine, "cancel-bridge")), what="its container"
        )
        await kube.delete(ROLLOUT_JOBS, "cancel")
        # The garbage collector takes the trial with its job; a control plane without one
        # (envtest's) leaves that to the test.
        await kube.delete(ROLLOUT_TRIALS, trial("cancel", "a"))
        await kube.wait_for(
            lambda: _none(bridge_containers(test_engine, "cancel-bridge")),
            what="the trial's container removed",
            timeout=60,
        )
    record = result_of(store, "cancel", "a")
    assert record.error is not None
    assert record.error.type == "internal_error"


async def test_a_bridge_killed_mid_trial_ends_the_lost_sandbox_and_runs_the_trial_again(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    """SIGKILL leaves the trial Running under the bridge's claim and its container running; the
    bridge started again under the same identity removes that container and runs the trial as
    an infrastructure retry: tries 2, and the trial ends with the oracle's reward."""
    store = s3_settings.store()
    root = make_dataset(tmp_path / "set", ["a"], image=test_engine.image)
    marker = "/tmp/rollout-first-try"
    # The first try sleeps long enough to be killed; the second (a new container) does not.
    write(
        root / "a" / "solution" / "solve.sh",
        f"#!/bin/sh\nsleep 2\nif [ -e /first ]; then sleep 120; fi\necho solved > {marker}\n",
    )
    dataset = publish_whole(store, root, tmp_path / "cache")
    settings = bridge_settings(kube, s3_settings, identity="killed-bridge")
    process = BridgeProcess(kube, tmp_path, settings)
    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await process.start()
        try:
            await kube.create(ROLLOUT_JOBS, remote_job("killed", dataset, engine_address))
            await kube.wait_for(lambda: trial_running(kube, trial("killed", "a")), timeout=60)
            [first] = await kube.wait_for(
                lambda: _some(bridge_containers(test_engine, "killed-bridge")),
                what="its container",
            )
            _touch(test_engine, first["Id"], "/first")
            await asyncio.sleep(1.0)  # into the agent's sleep
            await process.kill()
            assert [c["Id"] for c in bridge_containers(test_engine, "killed-bridge")] == [
                first["Id"]
            ]
            await process.start()
            done = await kube.wait_for(lambda: job_phase(kube, "killed", "Completed"), timeout=120)
        finally:
            await process.kill()
    assert done is not None, process.log_tail()
    made = await kube.get(ROLLOUT_TRIALS, trial("killed", "a"))
    assert made["status"]["phase"] == "Succeeded"
    assert made["status"]["infraRetries"] == 1
    record = result_of(store, "killed", "a")
    assert record.reward == 1.0
    assert record.rollout is not None
    assert record.rollout.tries == 2
    remaining = {c["Id"] for c in bridge_containers(test_engine, "killed-bridge")}
    assert first["Id"] not in remaining
    assert remaining == set()
    assert "ending sandbox" in process.log_tail(400)


async def test_two_bridges_on_the_same_trials_run_each_trial_once(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    store = s3_settings.store()
    tasks = [f"t{i}" for i in range(6)]
    dataset = publish_whole(
        store, make_dataset(tmp_path / "set", tasks, image=test_engine.image), tmp_path / "cache"
    )
    one = bridge_memo(
        kube, bridge_settings(kube, s3_settings, identity="bridge-one", docker=2), tmp_path / "1"
    )
    two = bridge_memo(
        kube, bridge_settings(kube, s3_settings, identity="bridge-two", docker=2), tmp_path / "2"
    )
    async with (
        kube.operator(memo=operator_memo(kube, operator_config(s3_settings))),
        kube.operator(registry=handlers.REGISTRY, memo=one),
        kube.operator(registry=handlers.REGISTRY, memo=two),
    ):
        await kube.create(
            ROLLOUT_JOBS, remote_job("twice", dataset, engine_address, nConcurrentTrials=6)
        )
        done = await kube.wait_for(lambda: job_phase(kube, "twice", "Completed"), timeout=120)
    assert done is not None
    started = one.bridge.started + two.bridge.started
    names = sorted(trial("twice", t) for t in tasks)
    assert sorted(name for _, name in started) == names  # each once, by one bridge or the other
    for name in names:
        made = await kube.get(ROLLOUT_TRIALS, name)
        owner = made["metadata"]["annotations"][ANNOTATION_BRIDGE]
        ran = one if owner == "bridge-one" else two
        assert (kube.namespace, name) in ran.bridge.started
    for task in tasks:
        record = result_of(store, "twice", task)
        assert record.reward == 1.0
        assert record.rollout is not None
        assert record.rollout.tries == 1


async def test_the_bridge_runs_as_the_charts_service_account_with_the_agents_key_from_a_secret(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    """The chart's RBAC is all the bridge needs: it claims, reads the one Secret key the agent's
    env names (as a kubelet would for a Pod) and writes the status. The verifier checks that the
    agent saw the key; the files uploaded have it scrubbed."""
    key = "s3cret-agent-key-0123456789"
    await kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "agent-keys"},
            "stringData": {"api": key},
        },
    )
    store = s3_settings.store()
    root = make_dataset(tmp_path / "set", ["a"], image=test_engine.image)
    write(
        root / "a" / "tests" / "test.sh",
        f'#!/bin/sh\nif [ "$(cat /tmp/key)" = "{key}" ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n",
    )
    dataset = publish_whole(store, root, tmp_path / "cache")
    ref = {"secretKeyRef": {"name": "agent-keys", "key": "api"}}
    agent = {
        "name": "keyed",
        "execute": 'echo "$API_KEY" > /tmp/key; echo "using $API_KEY"',
        "env": [{"name": "API_KEY", "valueFrom": ref}],
    }
    identity = "rollout-operator-bridge"
    settings = bridge_settings(kube, s3_settings, identity=identity)
    memo = bridge_memo(kube, settings, tmp_path / "bridge", identity=Identity.BRIDGE)
    async with (
        kube.operator(memo=operator_memo(kube, operator_config(s3_settings))),
        kube.operator(
            registry=handlers.REGISTRY, memo=memo, identity=Identity.BRIDGE, clusterwide=True
        ),
    ):
        await kube.create(
            ROLLOUT_JOBS, remote_job("keyed", dataset, engine_address, agents=[agent])
        )
        done = await kube.wait_for(lambda: job_phase(kube, "keyed", "Completed"), timeout=120)
    assert done is not None
    prefix = trial_prefix("", "keyed", "keyed", "set", "a", 1)
    record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert record.reward == 1.0
    stdout = [k for k in store.list_keys(prefix) if k.endswith("stdout.txt")]
    assert stdout
    texts = [store.get_bytes(k).decode() for k in stdout]
    assert any("using ***" in text for text in texts)
    assert all(key not in text for text in texts)


async def _some(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return rows or None


async def _none(rows: list[dict[str, Any]]) -> bool:
    return not rows


def _touch(engine: EngineUnderTest, container_id: str, path: str) -> None:
    from rollout.local.engine import connect_engine

    client = connect_engine(engine.environ)
    try:
        client.containers.get(container_id).exec_run(["touch", path], user="0")
    finally:
        client.close()
