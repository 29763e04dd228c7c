"""A resumed RolloutJob (`spec.resume`) against the API on loopback and a real S3 endpoint: the
trials an earlier run scored, or that failed for the agent's reason, keep their records byte for
byte and get no RolloutTrial; the others run again, their earlier try's files moved under
`retries/<k>/` first and their Pod numbered as the try after; the job's result.json counts every
trial. The earlier run is written into storage as the runner and the operator leave it."""

from __future__ import annotations

from pathlib import Path

import pytest
from operator_kit import (
    AGENTS,
    job_manifest,
    job_phase,
    make_dataset,
    operator_config,
    operator_memo,
    pod_env,
    publish,
    runner_message,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS, ROLLOUT_TRIALS
from rollout.api.additions import TrialAdditions
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.layout import job_result_key, trial_prefix
from rollout.api.results import JobResult, TrialError, TrialResult
from rollout.api.trials import trial_resource_name
from rollout.api.wire.spec import TRY_ENV_VAR
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

AGENT = AGENTS[1]  # a script agent: its execution failures are the agent's
SCORED, AGENT_FAILED, INFRA_FAILED, NEVER_RAN = "scored", "agent-failed", "infra-failed", "never"
TASKS = [SCORED, AGENT_FAILED, INFRA_FAILED, NEVER_RAN]


def prefix(job: str, task: str) -> str:
    return trial_prefix("", job, AGENT["name"], "set", task, 1)


def trial(job: str, task: str) -> str:
    return trial_resource_name(job, AGENT["name"], "set", task, 1)


def record(
    task: str, *, reward: float | None = None, error: ErrorType | None = None, tries: int = 1
) -> bytes:
    kind = None
    if error is ErrorType.INTERNAL_ERROR:
        kind = FailureClass.INFRASTRUCTURE
    elif error is not None:
        kind = FailureClass.AGENT
    result = TrialResult(
        task_name=task,
        dataset_name="set",
        agent_name=AGENT["name"],
        attempt=1,
        reward=reward,
        error=TrialError(type=error, message="earlier run") if error else None,
        rollout=TrialAdditions(tries=tries, failure_class=kind),
    )
    return result.to_json().encode()


def earlier_run(store: ObjectStore, job: str) -> dict[str, bytes]:
    """What a first run left: a scored trial, an agent failure, an infrastructure failure (with
    its logs, after one earlier retry kept under retries/1/), and a trial that never ran."""
    files = {
        prefix(job, SCORED) + "result.json": record(SCORED, reward=1.0),
        prefix(job, SCORED) + "logs/agent/out.txt": b"done\n",
        prefix(job, AGENT_FAILED) + "result.json": record(
            AGENT_FAILED, error=ErrorType.AGENT_EXECUTION_FAILED
        ),
        prefix(job, INFRA_FAILED) + "retries/1/result.json": record(
            INFRA_FAILED, error=ErrorType.INTERNAL_ERROR
        ),
        prefix(job, INFRA_FAILED) + "result.json": record(
            INFRA_FAILED, error=ErrorType.INTERNAL_ERROR, tries=2
        ),
        prefix(job, INFRA_FAILED) + "error.txt": b"internal_error: the node went away\n",
        prefix(job, INFRA_FAILED) + "logs/agent/out.txt": b"half way\n",
    }
    for key, body in files.items():
        store.put_bytes(key, body, "application/octet-stream")
    return files


async def finish_all(kube: Kube, pods: list[str]) -> None:
    for name in pods:
        await kube.wait_for(lambda name=name: kube.find(PODS, name), what=f"Pod {name}")
        await kube.run_pod(name)
        await kube.finish_pod(name, messages={"runner": runner_message(0.5)})


@pytest.fixture
def dataset(tmp_path: Path, s3_settings: S3Settings) -> dict[str, str]:
    return publish(s3_settings.store(), make_dataset(tmp_path / "set", TASKS))


async def test_a_resumed_job_runs_only_the_trials_without_a_record_it_keeps(
    kube: Kube, s3_settings: S3Settings, dataset: dict[str, str]
) -> None:
    store = s3_settings.store()
    before = earlier_run(store, "again")
    config = operator_config(s3_settings)
    manifest = job_manifest("again", [dataset], agents=[AGENT], n_concurrent=10, resume=True)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, manifest)
        rerun = [trial("again", INFRA_FAILED), trial("again", NEVER_RAN)]
        pods = [await kube.wait_for(lambda n=n: kube.find(PODS, n), what=n) for n in rerun]
        # Before the Pod: the earlier try's files moved under retries/2/ (retries/1/ was there).
        moved = prefix("again", INFRA_FAILED)
        assert store.get_bytes(moved + "retries/2/error.txt") == before[moved + "error.txt"]
        assert store.get_bytes(moved + "retries/2/logs/agent/out.txt") == b"half way\n"
        assert (
            store.get_bytes(moved + "retries/1/result.json")
            == before[moved + "retries/1/result.json"]
        )
        assert not [k for k in store.list_keys(moved) if not k.startswith(moved + "retries/")]
        assert [pod_env(p, TRY_ENV_VAR) for p in pods] == ["3", "1"]
        await finish_all(kube, rerun)
        done = await kube.wait_for(lambda: job_phase(kube, "again", "Completed"))

    made = {t["metadata"]["name"] for t in await kube.list(ROLLOUT_TRIALS, kube.namespace)}
    assert made == set(rerun)  # the kept trials get no RolloutTrial
    infra = await kube.get(ROLLOUT_TRIALS, trial("again", INFRA_FAILED))
    assert infra["spec"]["earlierTries"] == 2
    never = await kube.get(ROLLOUT_TRIALS, trial("again", NEVER_RAN))
    assert never["spec"].get("earlierTries", 0) == 0  # a real API server sets the default
    for task in (SCORED, AGENT_FAILED):  # byte for byte
        key = prefix("again", task) + "result.json"
        assert store.get_bytes(key) == before[key]
    status = done["status"]
    assert status["counts"]["total"] == 4
    assert status["counts"]["finished"] == 4
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert "resumed: 2 keep their earlier records" in valid["message"]
    result = JobResult.from_json(store.get_bytes(job_result_key("", "again")))
    assert (result.total_trials, result.completed_trials, result.failed_trials) == (4, 3, 1)
    assert result.mean_reward == pytest.approx((1.0 + 0.5 + 0.5) / 3)


async def test_retry_errors_runs_the_named_error_types_again_too(
    kube: Kube, s3_settings: S3Settings, dataset: dict[str, str]
) -> None:
    store = s3_settings.store()
    before = earlier_run(store, "named")
    config = operator_config(s3_settings)
    manifest = job_manifest(
        "named",
        [dataset],
        agents=[AGENT],
        n_concurrent=10,
        resume=True,
        retryErrors=["agent_execution_failed"],
    )
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, manifest)
        rerun = [trial("named", t) for t in (AGENT_FAILED, INFRA_FAILED, NEVER_RAN)]
        await finish_all(kube, rerun)
        await kube.wait_for(lambda: job_phase(kube, "named", "Completed"))
    made = {t["metadata"]["name"] for t in await kube.list(ROLLOUT_TRIALS, kube.namespace)}
    assert made == set(rerun)
    kept = prefix("named", AGENT_FAILED) + "retries/1/result.json"
    assert store.get_bytes(kept) == before[prefix("named", AGENT_FAILED) + "result.json"]
    result = JobResult.from_json(store.get_bytes(job_result_key("", "named")))
    assert (result.total_trials, result.completed_trials, result.failed_trials) == (4, 4, 0)


async def test_resume_without_an_earlier_run_runs_every_trial(
    kube: Kube, s3_settings: S3Settings, dataset: dict[str, str]
) -> None:
    config = operator_config(s3_settings)
    manifest = job_manifest("fresh", [dataset], agents=[AGENT], n_concurrent=10, resume=True)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, manifest)
        await finish_all(kube, [trial("fresh", t) for t in TASKS])
        done = await kube.wait_for(lambda: job_phase(kube, "fresh", "Completed"))
    assert done["status"]["counts"]["completed"] == 4


async def test_retry_errors_without_resume_is_refused_by_name(
    kube: Kube, s3_settings: S3Settings, dataset: dict[str, str]
) -> None:
    config = operator_config(s3_settings)
    manifest = job_manifest("unsure", [dataset], retryErrors=["agent_execution_timeout"])
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, manifest)
        failed = await kube.wait_for(lambda: job_phase(kube, "unsure", "Failed"))
    valid = next(c for c in failed["status"]["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False"
    assert "spec.retryErrors: is only read with resume: true" in valid["message"]


async def test_a_trial_of_the_earlier_job_still_being_deleted_is_not_taken_for_this_runs(
    kube: Kube, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """The job applied again while a trial of its deleted namesake lingers (a finalizer holds
    it): the new job makes that trial only once the old one is gone, and never counts it."""
    dataset = publish(s3_settings.store(), make_dataset(tmp_path / "set", ["a", "b"]))
    config = operator_config(s3_settings)
    held, other = trial("twice", "a"), trial("twice", "b")
    manifest = job_manifest("twice", [dataset], agents=[AGENT], n_concurrent=10, resume=True)
    async with kube.operator(memo=operator_memo(kube, config)):
        await kube.create(ROLLOUT_JOBS, manifest)
        await finish_all(kube, [held, other])
        await kube.wait_for(lambda: job_phase(kube, "twice", "Completed"))
        old_uid = (await kube.get(ROLLOUT_TRIALS, held))["metadata"]["uid"]
        await kube.patch(
            ROLLOUT_TRIALS, held, {"metadata": {"finalizers": ["test.rollout.dev/hold"]}}
        )
        await kube.delete(ROLLOUT_JOBS, "twice", kube.namespace)
        await kube.wait_for(lambda: kube.gone(ROLLOUT_JOBS, "twice"), what="the old job gone")
        for name in (held, other):  # as a garbage collector would; the operator may be first
            await kube.delete_if_present(ROLLOUT_TRIALS, name, kube.namespace)
        await kube.wait_for(lambda: kube.gone(ROLLOUT_TRIALS, other), what="the other trial gone")

        await kube.create(ROLLOUT_JOBS, manifest)
        new_uid = (await kube.get(ROLLOUT_JOBS, "twice"))["metadata"]["uid"]
        await finish_all(kube, [other])
        await kube.settle(quiet=0.5)
        lingering = await kube.get(ROLLOUT_TRIALS, held)
        assert lingering["metadata"]["uid"] == old_uid  # not replaced, not taken over
        assert await kube.find(PODS, held) is None
        job = await kube.get(ROLLOUT_JOBS, "twice")
        assert job["status"]["counts"]["finished"] == 1  # the lingering trial is not counted

        await kube.patch(ROLLOUT_TRIALS, held, {"metadata": {"finalizers": []}})
        await finish_all(kube, [held])
        done = await kube.wait_for(lambda: job_phase(kube, "twice", "Completed"))
    made = await kube.get(ROLLOUT_TRIALS, held)
    assert made["metadata"]["ownerReferences"][0]["uid"] == new_uid
    assert done["status"]["counts"]["finished"] == 2
