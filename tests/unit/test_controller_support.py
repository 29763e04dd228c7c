"""The operator's supporting parts: kopf settings, storage, manifests, job files, metrics."""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import kopf
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from rollout.api.aggregate import TrialOutcome
from rollout.api.dataset import load_local_dataset
from rollout.api.manifest import canonical_json
from rollout.api.resources import RolloutJob, StorageSpec
from rollout.api.results import JobResult
from rollout.api.wire.termination import RunnerTimes
from rollout.controller.buckets import NoStorage, StoreCache, job_storage_spec, operator_location
from rollout.controller.config import OperatorConfig
from rollout.controller.datasets import DatasetProblem, parse_manifest
from rollout.controller.finish import job_result
from rollout.controller.jobconfig import config_json
from rollout.controller.metrics import OperatorMetrics
from rollout.controller.settings import FINALIZER, configure_settings
from rollout.datasets.bundle import build_manifest
from rollout.storage import StorageCredentials

# --- kopf settings --------------------------------------------------------------------------------


def test_the_settings_keep_kopf_to_its_own_domain_and_whole_second_timeouts() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(
        settings, OperatorConfig(runner_image="r", peering_name=None, worker_limit=7)
    )
    assert settings.persistence.finalizer == FINALIZER == "rollout.dev/finalizer"
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "rollout.dev"
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.posting.level == logging.WARNING
    assert settings.queueing.worker_limit == 7
    # What kopf sends as `timeoutSeconds`: the API server parses an integer and refuses "270.0".
    assert str(settings.watching.server_timeout) == "270"
    assert settings.watching.client_timeout == 300
    assert settings.networking.request_timeout == 60
    assert settings.queueing.idle_timeout == 0.5  # a worker slot is not held 5 s per object
    assert settings.peering.standalone


def test_peering_follows_the_configuration_and_faster_timeouts_are_kept() -> None:
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = 5
    config = OperatorConfig(runner_image="r", namespaces=["a"], peering_name="rollout-operator")
    configure_settings(settings, config)
    assert str(settings.watching.server_timeout) == "5"
    assert (settings.peering.name, settings.peering.standalone) == ("rollout-operator", False)
    assert settings.peering.mandatory
    assert not settings.peering.clusterwide  # namespaced operator, namespaced KopfPeering


@pytest.mark.parametrize(("given", "sent"), [(270.0, "270"), (2.5, "3"), (0.2, "1"), (9, "9")])
def test_the_watch_timeout_is_always_sent_as_whole_seconds(given: float, sent: str) -> None:
    settings = kopf.OperatorSettings()
    settings.watching.server_timeout = given
    configure_settings(settings, OperatorConfig(runner_image="r", peering_name=None))
    assert str(settings.watching.server_timeout) == sent


# --- storage --------------------------------------------------------------------------------------

# As the operator reads its default storage from the chart's variables (the region defaulted).
DEFAULT = StorageSpec(
    bucket="default",
    prefix="evals",
    endpoint="http://minio:9000",
    region="us-east-1",
    path_style=True,
)
CREDENTIALS = StorageCredentials(access_key_id=SecretStr("AK"), secret_access_key=SecretStr("SK"))


def test_a_job_without_storage_uses_the_operators_default() -> None:
    spec = job_storage_spec(None, DEFAULT)
    assert spec == StorageSpec(
        bucket="default", prefix="evals", endpoint="http://minio:9000", region="us-east-1",
        path_style=True,
    )  # fmt: skip
    with pytest.raises(NoStorage, match=r"spec\.storage is not set"):
        job_storage_spec(None, None)


def test_the_operator_reaches_a_jobs_own_bucket_with_its_own_credentials() -> None:
    own = StorageSpec(bucket="team", prefix="/a/b/", endpoint="http://s3.team:9000/", region="eu-1")
    store = StoreCache(DEFAULT, CREDENTIALS).for_spec(own)
    location = store.location
    assert (location.bucket, location.prefix, location.endpoint) == (
        "team", "a/b", "http://s3.team:9000"
    )  # fmt: skip
    assert location.region == "eu-1"
    assert store.secrets() == ["AK", "SK"]
    assert not location.path_style


def test_the_operator_reaches_its_default_bucket_its_own_way_whatever_pods_are_told() -> None:
    for_pods = StorageSpec(bucket="default", prefix="team", endpoint="http://minio.svc:9000")
    location = operator_location(for_pods, DEFAULT)
    assert (location.endpoint, location.path_style) == ("http://minio:9000", True)
    assert location.prefix == "team"


# --- dataset manifests ----------------------------------------------------------------------------


@pytest.fixture
def manifest_bytes(tmp_path: Path) -> bytes:
    task = tmp_path / "set" / "hello"
    (task / "tests").mkdir(parents=True)
    (task / "environment").mkdir()
    (task / "environment" / "Dockerfile").write_text("FROM busybox\n")
    (task / "instruction.md").write_text("Say hello.\n")
    (task / "tests" / "test.sh").write_text("#!/bin/sh\n")
    (task / "task.toml").write_text('[environment]\ndocker_image = "img"\ncpus = 2\n')
    return canonical_json(build_manifest(load_local_dataset(tmp_path / "set")))


def test_a_manifest_gives_the_tasks_with_their_configs(manifest_bytes: bytes) -> None:
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    (task,) = parse_manifest(manifest_bytes, digest=digest, where="m").tasks
    assert task.name == "hello"
    assert task.config.environment.docker_image == "img"
    assert task.config.environment.cpus == "2"


def test_a_manifest_that_is_not_what_its_digest_says_is_refused(manifest_bytes: bytes) -> None:
    with pytest.raises(DatasetProblem, match="manifest m does not match its digest"):
        parse_manifest(manifest_bytes, digest="0" * 64, where="manifest m")
    garbage = b'{"name": "x"}'
    with pytest.raises(DatasetProblem, match="is not a dataset manifest: tasks"):
        parse_manifest(garbage, digest=hashlib.sha256(garbage).hexdigest(), where="m")


# --- the job's files ------------------------------------------------------------------------------


def rollout_job(**dataset: object) -> RolloutJob:
    return RolloutJob.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns"},
            "spec": {
                "jobName": "my-eval",
                "nAttempts": 2,
                "agents": [{"name": "oracle"}],
                "datasets": [{"name": "d", "digest": "a" * 64, **dataset}],
                "metrics": [{"type": "sum"}],
            },
        }
    )


def test_config_json_is_the_jobs_job_yaml_when_it_has_one() -> None:
    config = config_json(rollout_job(source={"path": "/data/d"}))
    assert config["name"] == "my-eval"
    assert config["n_attempts"] == 2
    assert config["datasets"] == [{"path": "/data/d"}]
    assert config["environment"]["type"] == "kubernetes"


def test_config_json_of_a_hand_written_job_holds_its_spec() -> None:
    config = config_json(rollout_job())  # a dataset without source has no job.yaml form
    assert list(config) == ["rollout_job_spec"]
    assert config["rollout_job_spec"]["datasets"] == [{"name": "d", "digest": "a" * 64}]


def test_the_job_result_lists_trials_in_order_with_the_jobs_metrics() -> None:
    trials = [
        TrialOutcome("t2", "d", "oracle", 1, reward=1.0),
        TrialOutcome("t1", "d", "oracle", 1, reward=0.5),
        TrialOutcome("t1", "d", "oracle", 2),
    ]
    result = job_result(rollout_job(), trials, started_at=None, ended_at=None)
    again = JobResult.from_json(result.to_json())
    assert again.job_name == "my-eval"
    assert [(r.task_name, r.attempt) for r in again.results] == [("t2", 1), ("t1", 1), ("t1", 2)]
    assert again.metrics is not None
    assert again.metrics[0].value == 1.5
    assert json.loads(result.to_json())["total_duration_sec"] is None


# --- metrics --------------------------------------------------------------------------------------


def test_metrics_sum_the_jobs_and_count_finished_trials() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    metrics.jobs.report("a", {"Running": 2, "Pending": 1}, active=2)
    metrics.jobs.report("b", {"Running": 1}, active=1)
    durations = {"total_sec": 30.0, "verifier_sec": None}
    metrics.trial_finished("Failed", "verifier_timeout", durations, "agent")
    assert registry.get_sample_value("rollout_trials", {"phase": "Running"}) == 3
    assert registry.get_sample_value("rollout_active_trials") == 3
    metrics.jobs.forget("a")
    assert registry.get_sample_value("rollout_active_trials") == 1
    labels = {"phase": "Failed", "error_type": "verifier_timeout", "failure_class": "agent"}
    assert registry.get_sample_value("rollout_trials_finished_total", labels) == 1
    total = {"phase": "total"}
    assert registry.get_sample_value("rollout_trial_phase_duration_seconds_sum", total) == 30
    verifier = {"phase": "verifier"}
    assert registry.get_sample_value("rollout_trial_phase_duration_seconds_count", verifier) is None
    # No runner times (an older runner, a Pod that failed to start): no runner figures.
    assert registry.get_sample_value("rollout_runner_startup_seconds_count") == 0


def _times(started: float, trial: float, ready: float | None) -> RunnerTimes:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return RunnerTimes(
        started_at=at + timedelta(seconds=started),
        trial_started_at=at + timedelta(seconds=trial),
        environment_ready_at=at + timedelta(seconds=ready) if ready is not None else None,
        ended_at=at + timedelta(seconds=trial + 1),
    )


def test_the_runners_start_up_and_what_the_trial_waited_of_it_are_observed() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)
    # Ready 0.1 s before the runner's start-up ended: 0.1 s of its 0.4 s exposed.
    metrics.trial_finished("Succeeded", None, {}, None, _times(0.0, 0.4, 0.3))
    # The environment ready after the runner: nothing exposed.
    metrics.trial_finished("Succeeded", None, {}, None, _times(0.0, 0.3, 0.5))
    # No environment (a data-row shard with none): its start-up only.
    metrics.trial_finished("Succeeded", None, {}, None, _times(0.0, 0.2, None))

    def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
        return registry.get_sample_value(name, labels or {})

    assert sample("rollout_runner_startup_seconds_count") == 3
    assert sample("rollout_runner_startup_seconds_sum") == pytest.approx(0.9)
    assert sample("rollout_runner_startup_seconds_bucket", {"le": "0.3"}) == 2
    assert sample("rollout_runner_startup_exposed_seconds_count") == 2
    assert sample("rollout_runner_startup_exposed_seconds_sum") == pytest.approx(0.1)
    assert sample("rollout_runner_startup_exposed_seconds_bucket", {"le": "0.05"}) == 1
