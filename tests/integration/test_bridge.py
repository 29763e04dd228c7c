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

pytestmark = [pytest.mark.integration, pytest.mark.engine]

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


async def wait_explained(
    kube: Kube,
    predicate: Any,
    *,
    what: str,
    job: str,
    timeout: float = 10.0,  # noqa: ASYNC109 - kube.wait_for's deadline
    process: BridgeProcess | None = None,
) -> Any:
    """kube.wait_for, whose timeout says where the job got to: its status, its trials' and the
    bridge process's log (a wait that times out on a loaded machine says why)."""
    try:
        return await kube.wait_for(predicate, what=what, timeout=timeout)
    except TimeoutError as err:
        found = await kube.find(ROLLOUT_JOBS, job)
        trials = [
            (t["metadata"]["name"], t.get("metadata", {}).get("annotations"), t.get("status"))
            for t in await kube.list(ROLLOUT_TRIALS, kube.namespace)
        ]
        log_tail = process.log_tail(80) if process is not None else "(the bridge runs in-thread)"
        raise AssertionError(
            f"{err}\nthe job's status: {(found or {}).get('status')}\nthe trials: {trials}"
            f"\nthe bridge's log:\n{log_tail}"
        ) from err


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
    # A core-second costs 1: each trial's cost is about its sandbox's seconds (1 cpu each).
    prices = {"docker": {"cpu": 3600.0}}
    settings = bridge_settings(kube, s3_settings, unit_prices=prices)
    memo = bridge_memo(kube, settings, tmp_path / "bridge")
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
    assert a.error is None, a.error
    assert a.reward == 1.0
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
        record = result_of(store, "remote", task)
        assert 0 < made["status"]["cost"] < 120
        assert record.cost == made["status"]["cost"]
    keys = store.list_keys(trial_prefix("", "remote", "oracle", "set", "a", 1))
    assert any(k.endswith("/logs/verifier/reward.txt") for k in keys)
    job_result = JobResult.from_json(store.get_bytes("jobs/remote/result.json"))
    assert (job_result.total_trials, job_result.completed_trials) == (3, 1)
    assert job_result.total_cost == pytest.approx(sum(r.cost or 0 for r in (a, b, c)))
    registry = memo.metrics.registry
    docker = {"provider": "docker"}

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"rollout_bridge_{name}", {**docker, **labels})

    assert sample("trials_claimed_total") == 3
    assert sample("tries_started_total", retry="false") == 3
    assert sample("trials_finished_total", phase="Succeeded", error_type="") == 1
    for error in ("verifier_failed", "agent_execution_timeout"):
        assert sample("trials_finished_total", phase="Failed", error_type=error) == 1
    assert sample("runs") == 0
    assert sample("sandbox_start_seconds_count") == 3
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
            # Running: a container whose start failed is removed, and the bridge makes another.
            [first] = await wait_explained(
                kube,
                lambda: _running(bridge_containers(test_engine, "killed-bridge")),
                what="its container running",
                job="killed",
                process=process,
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
    assert record.reward == 1.0, record.error
    assert record.rollout is not None
    assert record.rollout.tries == 2
    remaining = {c["Id"] for c in bridge_containers(test_engine, "killed-bridge")}
    assert first["Id"] not in remaining
    assert remaining == set()
    assert "ending sandbox" in process.log_tail(400)


async def test_a_restarted_bridge_removes_the_containers_of_trials_deleted_while_it_was_down(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    """Killed mid-trial, the bridge leaves the trial's container running; the job is deleted
    before it comes back, so no trial names the engine any more: the engines the bridge is
    told of (ROLLOUT_BRIDGE_DOCKER_HOSTS) are swept at its start."""
    store = s3_settings.store()
    root = make_dataset(tmp_path / "set", ["a"], image=test_engine.image)
    write(root / "a" / "solution" / "solve.sh", SLOW_SOLUTION)
    dataset = publish_whole(store, root, tmp_path / "cache")
    settings = bridge_settings(
        kube, s3_settings, identity="swept-bridge", docker_hosts=[engine_address]
    )
    process = BridgeProcess(kube, tmp_path, settings)
    async with kube.operator(memo=operator_memo(kube, operator_config(s3_settings))):
        await process.start()
        try:
            await kube.create(ROLLOUT_JOBS, remote_job("swept", dataset, engine_address))
            await wait_explained(
                kube,
                lambda: _some(bridge_containers(test_engine, "swept-bridge")),
                what="its container",
                job="swept",
                timeout=60,
                process=process,
            )
            await process.kill()
            await kube.delete(ROLLOUT_JOBS, "swept")
            await kube.delete(ROLLOUT_TRIALS, trial("swept", "a"))  # as the collector would
            assert bridge_containers(test_engine, "swept-bridge") != []
            await process.start()
            await kube.wait_for(
                lambda: _none(bridge_containers(test_engine, "swept-bridge")),
                what="the leftover container removed",
                timeout=60,
            )
            # ... by the sweep at the start, which says so once the engine has removed it.
            await kube.wait_for(lambda: _logged(process, "ended leftover sandbox"), timeout=10)
            swept = 'rollout_bridge_leftover_sandboxes_ended_total{provider="docker"} 1.0'
            assert swept in (await process.metrics()).splitlines()
        finally:
            await process.kill()


async def test_two_bridges_on_the_same_trials_run_each_trial_once(
    kube: Kube,
    s3_settings: S3Settings,
    test_engine: EngineUnderTest,
    engine_address: str,
    tmp_path: Path,
) -> None:
    store = s3_settings.store()
    tasks = [f"t{i}" for i in range(4)]
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
            ROLLOUT_JOBS, remote_job("twice", dataset, engine_address, nConcurrentTrials=4)
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
        assert record.reward == 1.0, record.error
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
    assert record.reward == 1.0, record.error
    stdout = [k for k in store.list_keys(prefix) if k.endswith("stdout.txt")]
    assert stdout
    texts = [store.get_bytes(k).decode() for k in stdout]
    assert any("using ***" in text for text in texts)
    assert all(key not in text for text in texts)


async def _some(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return rows or None


async def _running(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    return [row for row in rows if row.get("State") == "running"] or None


@pytest.mark.parametrize(
    ("provider", "missing"),
    [
        ("modal", "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"),
        ("daytona", "DAYTONA_API_KEY"),
        ("e2b", "E2B_API_KEY"),
    ],
)
async def test_a_cloud_provider_without_its_credentials_fails_the_trial_saying_what_is_missing(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path, provider: str, missing: str
) -> None:
    """A RolloutJob of a cloud type runs as any job up to the bridge, whose provider cannot sign
    in: each trial fails with environment_start_failed naming the variables, as a record and a
    status, and the job completes (no traceback, nothing left waiting)."""
    store = s3_settings.store()
    dataset = publish_whole(store, make_dataset(tmp_path / "set", ["a"]), tmp_path / "cache")
    memo = bridge_memo(kube, bridge_settings(kube, s3_settings), tmp_path / "bridge")
    job = job_manifest("cloud", [dataset], environment={"type": provider})
    async with (
        kube.operator(memo=operator_memo(kube, operator_config(s3_settings))),
        kube.operator(registry=handlers.REGISTRY, memo=memo),
    ):
        await kube.create(ROLLOUT_JOBS, job)
        done = await kube.wait_for(lambda: job_phase(kube, "cloud", "Completed"), timeout=60)
    assert done is not None
    made = await kube.get(ROLLOUT_TRIALS, trial("cloud", "a"))
    assert made["spec"]["environmentType"] == provider
    error = made["status"]["error"]
    assert error["type"] == "environment_start_failed"
    assert missing in error["message"]
    assert "Traceback" not in error["message"]
    assert made["status"]["failureClass"] == "infrastructure"
    record = result_of(store, "cloud", "a")
    assert record.error is not None
    assert record.error.message == error["message"]
    text = store.get_bytes(trial_prefix("", "cloud", "oracle", "set", "a", 1) + "error.txt")
    assert "The bridge controller wrote this record" in text.decode()


async def test_a_jobs_provider_secret_signs_its_trials_in_over_the_bridges_own(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """The bridge reads the Secret the job names and gives its keys to the provider: with only
    MODAL_TOKEN_ID in it, the provider says the other variable is missing (and a Secret that
    does not exist is named as such)."""
    await kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "team-modal"},
            "stringData": {"MODAL_TOKEN_ID": "ak-team-token-id"},
        },
    )
    store = s3_settings.store()
    dataset = publish_whole(store, make_dataset(tmp_path / "set", ["a"]), tmp_path / "cache")
    memo = bridge_memo(kube, bridge_settings(kube, s3_settings), tmp_path / "bridge")
    named = {"type": "modal", "providerSecret": "team-modal"}
    gone = {"type": "modal", "providerSecret": "no-such-secret"}
    async with (
        kube.operator(memo=operator_memo(kube, operator_config(s3_settings))),
        kube.operator(registry=handlers.REGISTRY, memo=memo),
    ):
        await kube.create(ROLLOUT_JOBS, job_manifest("named", [dataset], environment=named))
        await kube.create(ROLLOUT_JOBS, job_manifest("gone", [dataset], environment=gone))
        for job in ("named", "gone"):
            await kube.wait_for(lambda job=job: job_phase(kube, job, "Completed"), timeout=60)
    named_error = (await kube.get(ROLLOUT_TRIALS, trial("named", "a")))["status"]["error"]
    assert named_error["type"] == "environment_start_failed"
    assert named_error["message"].endswith("MODAL_TOKEN_SECRET is not set")
    assert "ak-team-token-id" not in named_error["message"]
    gone_error = (await kube.get(ROLLOUT_TRIALS, trial("gone", "a")))["status"]["error"]
    assert gone_error["type"] == "environment_start_failed"
    assert gone_error["message"] == (
        "the job's provider Secret cannot be read: "
        f"Secret {kube.namespace}/no-such-secret does not exist"
    )


async def _logged(process: BridgeProcess, text: str) -> bool:
    return text in process.log_tail(400)


async def _none(rows: list[dict[str, Any]]) -> bool:
    return not rows


def _touch(engine: EngineUnderTest, container_id: str, path: str) -> None:
    from rollout.local.engine import connect_engine

    client = connect_engine(engine.environ)
    try:
        client.containers.get(container_id).exec_run(["touch", path], user="0")
    finally:
        client.close()
