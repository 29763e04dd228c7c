"""Carrying out a job reconciler's actions (`jobexec.JobExecutor`): which API calls each makes,
in what order, what it remembers of them, and what it reports back for the next look. The API is
a fake that records calls; storage is the test's S3 bucket (the records the operator writes for
trials, a lost try's files)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry
from s3_kit import S3Settings

from rollout.api.errors import ErrorType
from rollout.api.failures import BUILD_NOT_RUN
from rollout.api.plan import PlannedTrial, ResolvedDataset, ResolvedTask
from rollout.api.resources import (
    DatasetRef,
    JobConditionReason,
    RolloutJob,
    RolloutJobStatus,
    StorageSpec,
)
from rollout.api.results import TrialResult
from rollout.api.task import parse_task_config
from rollout.api.trials import TrialKey
from rollout.controller.config import OperatorConfig
from rollout.controller.datasets import DatasetProblem
from rollout.controller.index import TrialEntry
from rollout.controller.jobdecide import (
    CreateTrial,
    DeleteJob,
    NewTrials,
    PatchJobStatus,
    ResolveDatasets,
    TrialStep,
    Warn,
)
from rollout.controller.jobexec import JobExecutor
from rollout.controller.jobs import JobReconciler
from rollout.controller.jobspec import Invalid, Planned, StorageUnavailable
from rollout.controller.metrics import OperatorMetrics
from rollout.controller.ownwrites import OwnWrites
from rollout.controller.records import TrialPlace
from rollout.controller.runtime import Runtime
from rollout.controller.trials import (
    CreatePod,
    DeletePod,
    KeepTry,
    PatchStatus,
    RetryPod,
    fail_trial,
)
from rollout.storage import StorageError

NOW = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
STORAGE = StorageSpec(bucket="b", prefix="p")
PLACE = TrialPlace(STORAGE, "job")


class FakeApi:
    """`KubeApi`'s methods the executor calls, recorded; trials exist once created.

    `witness`, when given, is asked at each trial status patch what storage holds then (what
    must be in storage before the API is told about it)."""

    def __init__(
        self,
        *,
        existing: Sequence[str] = (),
        gone: Sequence[str] = (),
        witness: Callable[[], Any] | None = None,
    ) -> None:
        self.calls: list[tuple[str, str]] = []
        self.trials: dict[str, dict[str, Any]] = {}
        self.existing = set(existing)
        self.gone = set(gone)
        self.rv = 10
        self.witness = witness
        self.witnessed: list[Any] = []

    def _body(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.rv += 1
        metadata = {**body["metadata"], "uid": "uid-" + body["metadata"]["name"]}
        return {**body, "metadata": {**metadata, "resourceVersion": str(self.rv)}}

    async def create_trial(
        self, namespace: str, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        name = body["metadata"]["name"]
        self.calls.append(("create_trial", name))
        self.trials[name] = self._body(body)
        return self.trials[name], name not in self.existing

    async def get_trial(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.trials.get(name)

    async def patch_trial_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        self.calls.append(("patch_trial_status", name))
        if self.witness is not None:
            self.witnessed.append(self.witness())
        if name in self.gone:
            return None
        trial = self.trials.get(name) or {"metadata": {"name": name, "namespace": namespace}}
        self.trials[name] = self._body({**trial, "status": dict(status)})
        return self.trials[name]

    async def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        self.calls.append(("create_pod", body["metadata"]["name"]))
        return True

    async def delete_pod(self, namespace: str, name: str) -> bool:
        self.calls.append(("delete_pod", name))
        return True

    async def patch_job_status(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        self.calls.append(("patch_job_status", name))
        return {"metadata": {"resourceVersion": "99"}, **patch}

    async def delete_job(self, namespace: str, name: str) -> bool:
        self.calls.append(("delete_job", name))
        return True

    def close(self) -> None:
        pass


class FakeDatasets:
    """The dataset resolver: answers with `answer`, or raises it."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def resolve(self, refs: Sequence[DatasetRef], store: Any) -> list[ResolvedDataset]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return list(self.answer)


def executor(
    api: FakeApi,
    *,
    leaving: bool = False,
    datasets: Any = (),
    storage: bool = True,
    s3: S3Settings | None = None,
    registry: CollectorRegistry | None = None,
) -> tuple[JobExecutor, OwnWrites, list[tuple[str, str]]]:
    """An executor for job `job`; with `s3`, its storage is that bucket."""
    registry = registry or CollectorRegistry()
    config = OperatorConfig(
        runner_image="runner:1",
        storage=s3.location if s3 else STORAGE if storage else None,
        storage_credentials=s3.credentials if s3 else None,
    )
    runtime = Runtime(
        config,
        api=api,  # type: ignore[arg-type]
        metrics=OperatorMetrics(registry),
        datasets=FakeDatasets(datasets),  # type: ignore[arg-type]
    )
    writes = OwnWrites()
    warnings: list[tuple[str, str]] = []
    run = JobExecutor(
        runtime,
        namespace="ns",
        name="job",
        uid="job-uid",
        writes=writes,
        post_warning=lambda reason, message: warnings.append((reason, message)),
        leaving=lambda: leaving,
    )
    return run, writes, warnings


def rollout_job(**spec: Any) -> RolloutJob:
    return RolloutJob.model_validate(
        {
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": {
                "agents": [{"name": "oracle"}],
                "datasets": [{"name": "d", "digest": "a" * 64}],
                **spec,
            },
        }
    )


TASK = ResolvedTask("t", "c" * 64, parse_task_config({"environment": {"docker_image": "img:1"}}))


KEY = TrialKey("oracle", "d", "t", 1)


def create(
    name: str,
    failed: PatchStatus | None = None,
    storage: StorageSpec = STORAGE,
    **spec: Any,
) -> CreateTrial:
    planned = PlannedTrial(KEY, name, TASK)
    new = NewTrials(rollout_job(**spec), storage, "ns", "job-uid", "runner:1")
    return CreateTrial(planned, new, failed=failed)


def trial_prefix(s3: S3Settings) -> str:
    """The trial's prefix in the test's bucket (job `job`: its spec names no jobName)."""
    return TrialPlace(s3.location, "job").prefix(KEY)


async def test_a_new_trial_gets_its_pod_at_once() -> None:
    api = FakeApi()
    run, writes, _ = executor(api)
    done = await run.run([create("t1")], now=NOW)
    assert api.calls == [("create_trial", "t1"), ("create_pod", "t1")]
    assert done.trials_written
    assert "t1" in writes.trials([])  # remembered until the index has it
    assert "t1" in writes.pods_created


async def test_an_existing_trial_gets_no_pod_here() -> None:
    api = FakeApi(existing=["t1"])
    run, _, _ = executor(api)
    await run.run([create("t1")], now=NOW)
    assert api.calls == [("create_trial", "t1")]  # it is driven like any other


async def test_a_trial_whose_image_needs_a_build_fails_with_its_record_and_no_pod(
    s3_settings: S3Settings,
) -> None:
    store = s3_settings.store()
    prefix = trial_prefix(s3_settings)
    api = FakeApi(witness=lambda: sorted(store.list_keys(prefix)))
    registry = CollectorRegistry()
    run, writes, _ = executor(api, s3=s3_settings, registry=registry)
    place = TrialPlace(s3_settings.location, "job")
    failed = fail_trial(
        KEY,
        place,
        ErrorType.ENVIRONMENT_BUILD_FAILED,
        "no builder",
        NOW,
        cost=None,
        class_override=BUILD_NOT_RUN,
    )
    await run.run([create("t1", failed=failed, storage=s3_settings.location)], now=NOW)
    assert api.calls == [("create_trial", "t1"), ("patch_trial_status", "t1")]
    assert writes.trials([])["t1"].finished
    # The record was in storage before the status said the trial failed.
    assert api.witnessed == [[prefix + "error.txt", prefix + "result.json"]]
    result = TrialResult.from_json(store.get_bytes(prefix + "result.json"))
    assert result.error is not None
    assert result.error.message == "no builder"
    assert api.trials["t1"]["status"]["resultUri"] == store.uri(prefix + "result.json")
    build = {"error_type": "environment_build_failed", "failure_class": "infrastructure"}
    counted = {"phase": "Failed", **build}
    assert registry.get_sample_value("rollout_trials_finished_total", counted) == 1


async def test_no_trial_is_created_for_a_job_on_its_way_out() -> None:
    api = FakeApi()
    run, _, _ = executor(api, leaving=True)
    done = await run.run([create("t1"), create("t2")], now=NOW)
    assert api.calls == []
    assert not done.changed


def entry(name: str) -> TrialEntry:
    return TrialEntry("ns", name, f"uid-{name}", "1", "oracle", "d", "t", 1)


async def test_a_retry_is_recorded_and_the_lost_pod_deleted() -> None:
    api = FakeApi()
    await api.create_trial("ns", create("t1").manifest())
    api.calls.clear()
    run, writes, _ = executor(api)
    retry = RetryPod({"phase": "Pending", "infraRetries": 1, "podName": "t1-r1"}, "t1", retry=1)
    done = await run.run([TrialStep(entry("t1"), retry, PLACE)], now=NOW)
    # The new Pod waits for a later look (until the lost one's runner can no longer upload).
    assert api.calls == [("patch_trial_status", "t1"), ("delete_pod", "t1")]
    assert done.trials_written
    assert "t1" in writes.pods_deleted


async def test_a_retrys_pod_comes_after_the_lost_trys_files_are_kept(
    s3_settings: S3Settings,
) -> None:
    store = s3_settings.store()
    prefix = trial_prefix(s3_settings)
    # The second try's runner wrote some files before its Pod was lost; the first try's are
    # kept already.
    for key in ("result.json", "logs/agent/out.txt", "retries/1/result.json"):
        store.put_bytes(prefix + key, key.encode())
    moved = [prefix + k for k in ("retries/1/result.json", "retries/2/logs/agent/out.txt",
                                  "retries/2/result.json")]  # fmt: skip
    api = FakeApi()
    await api.create_trial("ns", create("t1", storage=s3_settings.location).manifest())
    api.calls.clear()
    run, writes, _ = executor(api, s3=s3_settings)
    place = TrialPlace(s3_settings.location, "job")
    keep = KeepTry(s3_settings.location, prefix, 2)
    await run.run([TrialStep(entry("t1"), CreatePod("t1-r2", 2, keep), place)], now=NOW)
    assert api.calls == [("create_pod", "t1-r2")]
    assert sorted(store.list_keys(prefix)) == moved
    assert store.get_bytes(prefix + "retries/2/logs/agent/out.txt") == b"logs/agent/out.txt"
    assert "t1-r2" in writes.pods_created
    # Again (a restart before the Pod was seen): nothing is left to move, nothing is lost.
    await run.run([TrialStep(entry("t1"), CreatePod("t1-r2", 2, keep), place)], now=NOW)
    assert sorted(store.list_keys(prefix)) == moved


async def test_a_final_status_removes_the_pod_and_counts_the_trial() -> None:
    api = FakeApi()
    registry = CollectorRegistry()
    run, writes, _ = executor(api, registry=registry)
    final = PatchStatus({"phase": "Succeeded", "reward": 1.0}, delete_pod="t1", final=True)
    steps = [TrialStep(entry("t1"), final, PLACE), TrialStep(entry("t2"), DeletePod("t2"), PLACE)]
    await run.run(steps, now=NOW)
    assert api.calls == [("patch_trial_status", "t1"), ("delete_pod", "t1"), ("delete_pod", "t2")]
    labels = {"phase": "Succeeded", "error_type": "", "failure_class": ""}
    assert registry.get_sample_value("rollout_trials_finished_total", labels) == 1
    assert "t1" in writes.pods_deleted
    assert "t2" in writes.pods_deleted


async def test_a_gone_trial_is_left_alone() -> None:
    api = FakeApi(gone=["t1"])
    run, _, _ = executor(api)
    final = PatchStatus({"phase": "Failed"}, delete_pod="t1", final=True)
    done = await run.run([TrialStep(entry("t1"), final, PLACE)], now=NOW)
    assert api.calls == [("patch_trial_status", "t1")]
    assert not done.changed


async def test_a_pod_that_cannot_be_made_fails_its_trial_with_a_record(
    s3_settings: S3Settings,
) -> None:
    store = s3_settings.store()
    prefix = trial_prefix(s3_settings)
    api = FakeApi(witness=lambda: store.exists(prefix + "result.json"))
    # No Pod for that type (local mode's host sandbox: a job of it is refused before its trials).
    broken = create("t1", storage=s3_settings.location, environment={"type": "local"})
    run, writes, _ = executor(api, s3=s3_settings)
    await run.run([broken], now=NOW)
    assert api.calls == [("create_trial", "t1"), ("patch_trial_status", "t1")]
    assert writes.trials([])["t1"].error_type is not None
    assert api.witnessed == [True]
    error = store.get_bytes(prefix + "error.txt").decode()
    assert error.startswith("internal_error: The trial's Pod cannot be made:")


async def test_the_jobs_own_status_is_remembered_and_warnings_posted() -> None:
    api = FakeApi()
    run, writes, warnings = executor(api)
    status = RolloutJobStatus.model_validate({"phase": "Failed"})
    await run.run([Warn("InvalidSpec", "bad"), PatchJobStatus(status), DeleteJob(0)], now=NOW)
    assert warnings == [("InvalidSpec", "bad")]
    assert api.calls == [("patch_job_status", "job"), ("delete_job", "job")]
    old_body = {"metadata": {"resourceVersion": "98"}, "status": {}}
    assert writes.job_status(old_body).phase == "Failed"


async def test_reading_the_datasets_plans_the_trials_or_says_why_not() -> None:
    api = FakeApi()
    job = rollout_job()
    run, _, _ = executor(api, datasets=[ResolvedDataset("d", "a" * 64, (TASK,))])
    done = await run.run([ResolveDatasets(job)], now=NOW)
    assert isinstance(done.spec, Planned)
    assert len(done.spec.plan) == 1
    assert done.changed

    missing, _, _ = executor(api, datasets=DatasetProblem("spec.datasets[0] does not exist"))
    spec = (await missing.run([ResolveDatasets(job)], now=NOW)).spec
    assert isinstance(spec, Invalid)
    assert spec.reason == JobConditionReason.DATASET_NOT_FOUND

    error = StorageError(
        "timed out", operation="get", key="k", endpoint="e", attempts=4, transient=True
    )
    away, _, _ = executor(api, datasets=error)
    spec = (await away.run([ResolveDatasets(job)], now=NOW)).spec
    assert isinstance(spec, StorageUnavailable)
    assert "retrying" in spec.message

    nowhere, _, _ = executor(api, storage=False)
    spec = (await nowhere.run([ResolveDatasets(job)], now=NOW)).spec
    assert isinstance(spec, Invalid)
    assert spec.reason == JobConditionReason.INVALID_SPEC


async def test_a_job_deleted_for_its_ttl_is_asked_for_once() -> None:
    """The status patch that completed the job wakes its reconciler again; until the watch
    shows the deletion, the job still looks due for it: it is not asked for twice."""
    api = FakeApi()
    run, _, _ = executor(api)
    body = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "job", "namespace": "ns", "uid": "job-uid", "generation": 1},
        "spec": {**rollout_job().manifest()["spec"], "ttlSecondsAfterFinished": 0},
        "status": {"phase": "Completed", "endedAt": "2025-01-15T10:30:00Z"},
    }
    reconciler = JobReconciler(
        run.runtime, body, trials={}, pods={}, post_warning=lambda reason, message: None
    )
    await reconciler.step()
    await reconciler.step()  # woken by an event of a moment before: the body has no deletion
    assert api.calls == [("delete_job", "job")]
