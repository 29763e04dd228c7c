"""Pod-level failures, as the kubelet and the scheduler report them, mapped to trial outcomes by
the real operator: image pulls, scheduling, container start, evictions and deleted Pods (retried
in a new Pod up to maxInfraRetries, then internal_error), and trials that would need an image
build. Each such trial gets its record in storage from the operator (result.json, error.txt),
and a retried trial keeps its earlier tries' files under retries/<k>/."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_kit import Cli
from operator_kit import (
    job_manifest,
    make_dataset,
    make_task,
    operator_config,
    operator_memo,
    publish,
    runner_message,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.pod_status import terminated, waiting
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api import layout
from rollout.api.layout import job_result_key
from rollout.api.results import JobResult, TrialError, TrialResult
from rollout.api.trials import child_name, trial_resource_name
from rollout.controller.cost import pod_requests
from rollout.controller.prices import UnitPrices
from rollout.controller.trials import OLD_RUNNER_MARGIN_SEC
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration


def trial_name(job: str, task: str = "only", attempt: int = 1) -> str:
    return trial_resource_name(job, "oracle", "one", task, attempt)


def trial_prefix(job: str) -> str:
    """The trial's files in the test's bucket (no prefix there)."""
    return layout.trial_prefix("", job, "oracle", "one", "only", 1)


async def trial_status(kube: Kube, name: str, phase: str) -> dict[str, Any] | None:
    trial = await kube.find(ROLLOUT_TRIALS, name)
    status = (trial or {}).get("status") or {}
    return status if status.get("phase") == phase else None


async def start_job(kube: Kube, store: ObjectStore, tmp_path: Path, job: str, **spec: Any) -> str:
    """A one-trial job; returns the name of its trial's Pod once it exists."""
    dataset = publish(store, make_dataset(tmp_path / job / "one", ["only"]))
    await kube.create(ROLLOUT_JOBS, job_manifest(job, [dataset], **spec))
    pod = await kube.wait_for(lambda: kube.find(PODS, trial_name(job)), what=f"{job}'s Pod")
    return str(pod["metadata"]["name"])


@pytest.mark.parametrize(
    ("containers", "extra", "error_type", "words"),
    [
        pytest.param(
            {"environment": waiting("ImagePullBackOff", 'Back-off pulling image "nope:1"')},
            {},
            "environment_image_pull_failed",
            "could not be pulled (ImagePullBackOff",
            id="image-pull-after-grace",
        ),
        pytest.param(
            {"environment": waiting("InvalidImageName", 'invalid reference format "N0PE"')},
            {},
            "environment_image_pull_failed",
            "InvalidImageName",
            id="invalid-image-at-once",
        ),
        pytest.param(
            {"runner": waiting("CreateContainerConfigError", 'secret "keys" not found')},
            {},
            "environment_start_failed",
            'secret "keys" not found',
            id="create-container-config-error",
        ),
        pytest.param(
            None,
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient cpu.",
                    }
                ],
            },
            "environment_resource_allocation_failed",
            "3 Insufficient cpu",
            id="unschedulable-after-grace",
        ),
    ],
)
async def test_pod_failures_become_the_trials_error(
    kube: Kube,
    store: ObjectStore,
    s3_settings: S3Settings,
    tmp_path: Path,
    containers: dict[str, Any] | None,
    extra: dict[str, Any],
    error_type: str,
    words: str,
) -> None:
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        pod = await start_job(kube, store, tmp_path, "broken")
        await kube.set_pod_status(pod, containers=containers, **extra)
        status = await kube.wait_for(
            lambda: trial_status(kube, trial_name("broken"), "Failed"), what="trial Failed"
        )
        assert status["error"]["type"] == error_type
        assert words in status["error"]["message"]
        job = await kube.wait_for(
            lambda: _job_phase(kube, "broken", "Completed"), what="the job completes"
        )
        await kube.wait_for(lambda: _gone(kube, pod), what="the failed trial's Pod removed")
    assert job["status"]["counts"]["failed"] == 1
    assert "passRate" not in job["status"]  # no trial produced a reward
    # Not the agent's failure, nor the task's: an RL trainer masks it.
    assert status["failureClass"] == "infrastructure"
    infrastructure = {"agent": 0, "task": 0, "infrastructure": 1}
    assert job["status"]["failures"] == infrastructure
    result = json.loads(store.get_bytes(job_result_key("", "broken")))
    assert result["failed_trials"] == 1
    assert result["rollout"]["failures"] == infrastructure
    assert result["rollout"]["agents"] == {"oracle": {"failures": infrastructure}}
    # The runner never ran: the operator wrote the trial's record, where the status says.
    prefix = trial_prefix("broken")
    assert status["resultUri"] == store.uri(prefix + "result.json")
    record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert record.error is not None
    assert record.error.type == error_type
    assert words in record.error.message
    assert (record.task_name, record.dataset_name, record.agent_name, record.attempt) == (
        "only", "one", "oracle", 1
    )  # fmt: skip
    assert record.reward is None
    assert record.rollout is not None
    assert record.rollout.failure_class == "infrastructure"
    assert record.rollout.tries == 1
    assert record.timestamps.started_at is not None
    assert record.timestamps.ended_at is not None
    assert record.durations.environment_setup_sec is not None
    error_txt = store.get_bytes(prefix + "error.txt").decode()
    assert error_txt.startswith(f"{error_type}: ")
    assert words in error_txt


async def test_an_evicted_pod_is_retried_then_the_trial_fails_with_internal_error(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    config = operator_config(s3_settings)
    evicted: dict[str, Any] = {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on memory.",
    }
    prefix = trial_prefix("evict")
    async with kube.operator(memo=operator_memo(kube, config)):
        first = await start_job(kube, store, tmp_path, "evict", maxInfraRetries=1)
        await kube.run_pod(first)
        # The first try's runner uploaded some of its files before its node took it away.
        store.put_bytes(prefix + "logs/agent/trace.txt", b"first try")
        await kube.set_pod_status(first, **evicted)
        retry_pod = child_name(trial_name("evict"), "r1")
        await kube.wait_for(lambda: kube.find(PODS, retry_pod), what="a new Pod for the retry")
        status = (await kube.get(ROLLOUT_TRIALS, trial_name("evict")))["status"]
        assert status["infraRetries"] == 1
        assert status["podName"] == retry_pod
        # The first try's files were kept under retries/1/ before the retry began.
        assert store.list_keys(prefix) == [prefix + "retries/1/logs/agent/trace.txt"]
        assert store.get_bytes(prefix + "retries/1/logs/agent/trace.txt") == b"first try"
        await kube.wait_for(lambda: _gone(kube, first), what="the evicted Pod removed")

        store.put_bytes(prefix + "logs/agent/trace.txt", b"second try")
        await kube.set_pod_status(retry_pod, **evicted)
        status = await kube.wait_for(
            lambda: trial_status(kube, trial_name("evict"), "Failed"), what="trial Failed"
        )
    assert status["error"]["type"] == "internal_error"
    assert "lost 2 times" in status["error"]["message"]
    assert "Evicted" in status["error"]["message"]
    pods_made = [w.name for w in kube.writes(PODS) if w.method == "POST"]
    assert pods_made == [first, retry_pod]
    # The last try's files stay at the seed's paths, with the record the operator wrote.
    assert sorted(store.list_keys(prefix)) == [
        prefix + key
        for key in ("error.txt", "logs/agent/trace.txt", "result.json",
                    "retries/1/logs/agent/trace.txt")
    ]  # fmt: skip
    record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert record.rollout is not None
    assert record.rollout.tries == 2
    assert "Tries: 2" in store.get_bytes(prefix + "error.txt").decode()


async def test_the_operators_records_are_downloaded_like_any_other(
    kube: Kube,
    store: ObjectStore,
    s3_settings: S3Settings,
    cli: Cli,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        pod = await start_job(kube, store, tmp_path, "fetched")
        pull = waiting("InvalidImageName", 'invalid reference format "N0PE"')
        await kube.set_pod_status(pod, containers={"environment": pull})
        await kube.wait_for(lambda: _job_phase(kube, "fetched", "Completed"))
    out = tmp_path / "out"
    outcome = await cli.run(
        capsys, "download", "fetched", "--jobs-dir", str(out), *cli.cluster_args(),
        *cli.storage_args(),
    )  # fmt: skip
    assert outcome.code == 0, outcome.stderr
    trial = out / "fetched" / "oracle" / "one" / "only__1"
    assert sorted(p.name for p in trial.iterdir()) == ["error.txt", "result.json"]
    assert (trial / "result.json").read_bytes() == store.get_bytes(
        trial_prefix("fetched") + "result.json"
    )
    assert (out / "fetched" / "result.json").is_file()


async def test_a_trials_cost_is_in_its_status_its_record_and_the_jobs_totals(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    # One unit per core-hour: the trial Pod asks for the task's 1 core and the runner's 50m.
    config = operator_config(s3_settings, unit_prices=UnitPrices(per_hour={"cpu": 1.0}))
    prefix = trial_prefix("priced")
    async with kube.operator(memo=operator_memo(kube, config)):
        pod = await start_job(kube, store, tmp_path, "priced")
        running = await kube.run_pod(pod)
        started = running["status"]["startTime"]
        requested = pod_requests(running)["cpu"]
        # The runner wrote its result.json (without a cost: it cannot know one) and ends an
        # hour after the kubelet took its Pod.
        runner_record = TrialResult(
            task_name="only", dataset_name="one", agent_name="oracle", attempt=1, reward=1.0
        )
        store.put_bytes(prefix + "result.json", runner_record.to_json().encode())
        hour_later = datetime.fromisoformat(started) + timedelta(hours=1)
        ended = terminated(message=runner_message(1.0))
        ended["terminated"]["finishedAt"] = hour_later.isoformat().replace("+00:00", "Z")
        await kube.set_pod_status(pod, containers={"runner": ended, "environment": terminated()})
        status = await kube.wait_for(
            lambda: trial_status(kube, trial_name("priced"), "Succeeded"), what="Succeeded"
        )
        job = await kube.wait_for(lambda: _job_phase(kube, "priced", "Completed"))
    assert status["cost"] == float(requested)  # cores x 1 hour x 1 per core-hour
    record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert record.cost == status["cost"]
    assert record.reward == 1.0  # the rest of the runner's record is kept
    assert job["status"]["totalCost"] == status["cost"]
    result = JobResult.from_json(store.get_bytes(job_result_key("", "priced")))
    assert result.total_cost == status["cost"]
    assert result.agents["oracle"].total_cost == status["cost"]


async def test_a_record_already_in_storage_is_kept(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """An operator that wrote a trial's record and stopped before the trial's status said so
    leaves it to the next one, which keeps it: the record is written once."""
    config = operator_config(s3_settings)
    prefix = trial_prefix("again")
    async with kube.operator(memo=operator_memo(kube, config)):
        pod = await start_job(kube, store, tmp_path, "again")
        earlier = b'{"written": "by the operator before it stopped"}'
        store.put_bytes(prefix + "result.json", earlier)
        pull = waiting("InvalidImageName", 'invalid reference format "N0PE"')
        await kube.set_pod_status(pod, containers={"environment": pull})
        status = await kube.wait_for(
            lambda: trial_status(kube, trial_name("again"), "Failed"), what="trial Failed"
        )
    assert store.get_bytes(prefix + "result.json") == earlier
    assert status["resultUri"] == store.uri(prefix + "result.json")
    assert store.get_bytes(prefix + "error.txt").startswith(b"environment_image_pull_failed: ")


async def test_a_pod_deleted_under_a_running_trial_is_replaced_and_the_trial_finishes(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        first = await start_job(kube, store, tmp_path, "deleted")
        await kube.run_pod(first)
        await kube.wait_for(lambda: trial_status(kube, trial_name("deleted"), "Running"))
        # No kubelet here stops it: it goes at once, its runner shown running, as a Pod
        # force-deleted does, so the retry waits OLD_RUNNER_MARGIN_SEC for that runner.
        await kube.delete(PODS, first)
        retry_pod = child_name(trial_name("deleted"), "r1")
        await kube.wait_for(
            lambda: kube.find(PODS, retry_pod),
            timeout=OLD_RUNNER_MARGIN_SEC + 10,
            what="a replacement Pod",
        )
        await kube.run_pod(retry_pod)
        await kube.finish_pod(retry_pod, messages={"runner": runner_message(1.0)})
        status = await kube.wait_for(
            lambda: trial_status(kube, trial_name("deleted"), "Succeeded"), what="Succeeded"
        )
        job = await kube.wait_for(lambda: _job_phase(kube, "deleted", "Completed"))
    assert status["reward"] == 1.0
    assert status["infraRetries"] == 1
    assert job["status"]["counts"]["completed"] == 1
    assert job["status"]["passRate"] == 1.0


async def test_a_dockerfile_of_only_settings_runs_its_from_image_in_the_pod(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    config = operator_config(s3_settings)
    dockerfile = "FROM busybox:1.36\nWORKDIR /work\nENV GREETING=hello\n"
    lifted = publish(
        store,
        make_dataset(tmp_path / "lifted" / "one", ["only"], image=None, dockerfile=dockerfile),
    )
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("lifted", [lifted]))
        pod = await kube.wait_for(lambda: kube.find(PODS, trial_name("lifted")), what="a Pod")
    environment = next(c for c in pod["spec"]["containers"] if c["name"] == "environment")
    assert environment["image"] == "busybox:1.36"
    assert environment["workingDir"] == "/work"


async def test_without_a_registry_trials_that_need_a_build_fail_clearly_without_a_pod(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    config = operator_config(s3_settings)
    needs_build = "FROM busybox\nRUN echo built > /built\n"
    no_image = publish(
        store,
        make_dataset(tmp_path / "plain" / "one", ["only"], image=None, dockerfile=needs_build),
    )
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("unbuilt", [no_image]))
        forced = publish(store, make_dataset(tmp_path / "forced" / "one", ["only"]))
        await kube.create(
            ROLLOUT_JOBS,
            job_manifest("forced", [forced], environment={"forceBuild": True}),
        )
        unbuilt = await kube.wait_for(
            lambda: trial_status(kube, trial_name("unbuilt"), "Failed"), what="unbuilt fails"
        )
        forced_status = await kube.wait_for(
            lambda: trial_status(kube, trial_name("forced"), "Failed"), what="forced fails"
        )
        await kube.wait_for(lambda: _job_phase(kube, "unbuilt", "Completed"))
        await kube.wait_for(lambda: _job_phase(kube, "forced", "Completed"))
    assert unbuilt["error"]["type"] == "environment_build_failed"
    assert "no image registry" in unbuilt["error"]["message"]
    assert "environment.docker_image" in unbuilt["error"]["message"]
    assert forced_status["error"]["type"] == "environment_build_failed"
    assert "force_build" in forced_status["error"]["message"]
    # The build never ran (the operator has no registry): the infrastructure's, not the task's.
    assert unbuilt["failureClass"] == forced_status["failureClass"] == "infrastructure"
    assert [w for w in kube.writes(PODS) if w.method == "POST"] == []
    for job in ("unbuilt", "forced"):
        record = TrialResult.from_json(store.get_bytes(trial_prefix(job) + "result.json"))
        assert record.error is not None
        assert record.error.type == "environment_build_failed"
        assert record.rollout is not None
        assert record.rollout.failure_class == "infrastructure"


async def test_trials_of_broken_tasks_fail_without_a_pod_and_the_others_run(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    # Seed 000: the broken task's trials end with its error type and message, "no container is
    # started", and the other tasks run; the oracle on a task with no solution is task_invalid
    # the same way, for the oracle's trials only.
    root = make_dataset(tmp_path / "mixed" / "one", ["good"], solution=False)
    make_task(root, "invalid")
    (root / "invalid" / "task.toml").write_text("version = \n")
    (root / "gone").symlink_to("moved-away")
    dataset = publish(store, root)
    agents = [{"name": "oracle"}, {"name": "claude", "execute": "claude"}]
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, job_manifest("mixed", [dataset], agents=agents))
        runs = trial_resource_name("mixed", "claude", "one", "good", 1)
        pod = await kube.wait_for(lambda: kube.find(PODS, runs), what="claude's Pod for good")
        await kube.run_pod(pod["metadata"]["name"])
        await kube.finish_pod(pod["metadata"]["name"], messages={"runner": runner_message(1.0)})
        await kube.wait_for(lambda: _job_phase(kube, "mixed", "Completed"))
        trials = {
            (t["spec"]["agent"]["name"], t["spec"]["taskName"]): t
            for t in await kube.list(ROLLOUT_TRIALS, ...)
        }
    # The one trial that can run ran; no other Pod was ever created.
    assert [w.name for w in kube.writes(PODS) if w.method == "POST"] == [runs]
    assert trials[("claude", "good")]["status"]["phase"] == "Succeeded"
    expected = {
        ("oracle", "gone"): "task_not_found",
        ("claude", "gone"): "task_not_found",
        ("oracle", "invalid"): "task_invalid",
        ("claude", "invalid"): "task_invalid",
        ("oracle", "good"): "task_invalid",  # no solution: the oracle's trials only
    }
    for (agent, task), error_type in expected.items():
        status = trials[(agent, task)]["status"]
        assert status["phase"] == "Failed", (agent, task)
        assert status["error"]["type"] == error_type
        assert status["failureClass"] == "task"
        prefix = layout.trial_prefix("", "mixed", agent, "one", task, 1)
        record = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
        assert record.error == TrialError.model_validate(status["error"])
        assert record.rollout is not None
        assert record.rollout.failure_class == "task"
        error_txt = store.get_bytes(prefix + "error.txt").decode()
        assert error_txt.startswith(f"{error_type}: {status['error']['message']}")
        assert status["resultUri"] == store.uri(prefix + "result.json")
    messages = {t: trials[("claude", t)]["status"]["error"]["message"] for t in ("gone", "invalid")}
    assert messages["gone"] == (
        "Task 'gone' was not found: is a symbolic link to 'moved-away', which does not exist"
    )
    assert messages["invalid"].startswith("Task 'invalid' is invalid: task.toml: not valid TOML")
    assert trials[("oracle", "good")]["status"]["error"]["message"] == (
        "Task 'good' is invalid: the oracle agent needs solution/solve.sh (or, as in seed 004, "
        "solve.sh at the task root), and the task has neither"
    )


async def _job_phase(kube: Kube, name: str, phase: str) -> dict[str, Any] | None:
    job = await kube.find(ROLLOUT_JOBS, name)
    return job if job and (job.get("status") or {}).get("phase") == phase else None


async def _gone(kube: Kube, pod: str) -> bool:
    return await kube.find(PODS, pod) is None


async def test_preserve_env_keeps_the_pod_of_a_finished_trial(
    kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    config = operator_config(s3_settings)
    async with kube.operator(memo=operator_memo(kube, config)):
        pod = await start_job(kube, store, tmp_path, "kept", environment={"preserveEnv": True})
        await kube.run_pod(pod)
        await kube.finish_pod(pod, messages={"runner": runner_message(1.0)})
        await kube.wait_for(lambda: _job_phase(kube, "kept", "Completed"), what="completed")
        await kube.settle(quiet=0.3)
    assert await kube.find(PODS, pod) is not None
    assert [w for w in kube.writes(PODS) if w.method == "DELETE"] == []
