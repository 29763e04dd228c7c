"""The bridge's pure parts: which trials are a bridge's, the claim steps, its settings, and what
`environment.docker_host` means in job.yaml, a RolloutJob and a RolloutTrial."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from rollout.api.environment import EnvironmentSettings, EnvironmentType
from rollout.api.errors import InvalidInput
from rollout.api.resources import RolloutTrialStatus
from rollout.bridge.claim import Step, claimant, decide, for_bridge
from rollout.bridge.kube import ANNOTATION_BRIDGE, transient
from rollout.bridge.providers.base import OwnedSandbox, sandbox_labels
from rollout.bridge.settings import DEFAULT_LIMIT, from_args, from_env
from rollout.controller.trial_status import claimed_status

ME = "rollout-bridge"


def trial(
    *,
    kind: str = "docker",
    owner: str | None = None,
    phase: str | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "t", "namespace": "ns", "resourceVersion": "7"}
    if owner is not None:
        metadata["annotations"] = {ANNOTATION_BRIDGE: owner}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: dict[str, Any] = {"metadata": metadata, "spec": {"environmentType": kind}}
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


@pytest.mark.parametrize(
    ("kind", "bridge"),
    [
        *[("docker", True), ("modal", True), ("daytona", True), ("e2b", True)],
        *[("kubernetes", False), ("local", False), ("unknown", False), (None, False)],
    ],
)
def test_a_trial_is_a_bridges_unless_it_runs_as_a_pod(kind: str | None, bridge: bool) -> None:
    body = trial()
    body["spec"]["environmentType"] = kind
    assert for_bridge(body) is bridge


@pytest.mark.parametrize(
    ("owner", "phase", "running_here", "step"),
    [
        (None, None, False, Step.CLAIM),
        (None, "Pending", False, Step.CLAIM),
        (ME, "Pending", False, Step.START),  # claimed, then the bridge stopped before it ran
        (ME, None, False, Step.START),
        (ME, "Running", False, Step.RETRY),  # started by this bridge's previous process
        (ME, "Running", True, Step.IGNORE),  # running in this process
        ("another", None, False, Step.IGNORE),
        ("another", "Running", False, Step.IGNORE),
        (None, "Succeeded", False, Step.IGNORE),
        (ME, "Failed", False, Step.IGNORE),
    ],
)
def test_the_step_for_each_state_of_a_trial(
    owner: str | None, phase: str | None, running_here: bool, step: Step
) -> None:
    assert decide(trial(owner=owner, phase=phase), ME, running_here=running_here) is step


def test_a_deleted_trial_stops_only_a_run_of_this_process() -> None:
    body = trial(owner=ME, phase="Running", deleting=True)
    assert decide(body, ME, running_here=True) is Step.STOP
    assert decide(body, ME, running_here=False) is Step.IGNORE
    assert decide(trial(deleting=True), ME, running_here=False) is Step.IGNORE


def test_a_pod_trial_is_never_claimed() -> None:
    assert decide(trial(kind="kubernetes"), ME, running_here=False) is Step.IGNORE


def test_the_claimant_is_the_annotation() -> None:
    assert claimant(trial(owner="b-1")) == "b-1"
    assert claimant(trial()) is None


def test_the_claimed_status_is_running_with_a_claimed_condition() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
    status = claimed_status(ME, "the Docker engine at tcp://h:2376", now)
    parsed = RolloutTrialStatus.model_validate(status)
    assert parsed.phase == "Running"
    (condition,) = parsed.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "Claimed",
        "True",
        "BridgeClaimed",
    )
    assert condition.message == f"Bridge {ME} runs the trial on the Docker engine at tcp://h:2376."
    assert "infraRetries" not in status  # a first try leaves the count alone
    assert status["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"

    retried = claimed_status(ME, "x", now, retry=2, reason="The bridge stopped.")
    assert retried["infraRetries"] == 2
    assert retried["conditions"][0]["message"].startswith("The bridge stopped. Retry 2: ")


# --- settings


def test_the_settings_read_from_the_charts_variables() -> None:
    settings = from_env(
        {
            "ROLLOUT_BRIDGE_IDENTITY": "rel-bridge",
            "ROLLOUT_NAMESPACES": "a, b",
            "ROLLOUT_BRIDGE_LIMITS": "docker=3",
            "ROLLOUT_HEALTH_PORT": "8081",
            "ROLLOUT_STORAGE_BUCKET": "results",
            "ROLLOUT_STORAGE_ENDPOINT": "http://minio:9000",
            "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "secret-example",
        }
    )
    assert settings.identity == "rel-bridge"
    assert settings.namespaces == ["a", "b"]
    assert settings.limit("docker") == 3
    assert settings.limit("modal") == DEFAULT_LIMIT
    assert settings.health_port == 8081
    assert settings.storage is not None
    assert settings.storage.bucket == "results"
    assert settings.storage_credentials is not None


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ("docker", "is not PROVIDER=N"),
        ("kubernetes=3", "is not PROVIDER=N"),
        ("docker=many", "is not a whole number"),
        ("docker=0", "a limit is 1 or more"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_variable(limits: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        from_env({"ROLLOUT_BRIDGE_IDENTITY": "b", "ROLLOUT_BRIDGE_LIMITS": limits})
    text = str(caught.value)
    assert "ROLLOUT_BRIDGE_LIMITS" in text or "limits" in text
    assert says in text


def test_a_flag_wins_over_its_variable() -> None:
    import argparse

    from rollout.bridge.settings import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--identity", "from-flag", "--limit", "docker=2"])
    settings = from_args(args, {"ROLLOUT_BRIDGE_IDENTITY": "from-env"})
    assert (settings.identity, settings.limit("docker")) == ("from-flag", 2)


# --- environment.docker_host


def test_docker_with_a_docker_host_stays_docker_on_a_cluster_for_the_bridge() -> None:
    remote = EnvironmentSettings.model_validate(
        {"type": "docker", "docker_host": "tcp://10.0.0.5:2376"}
    )
    assert remote.cluster_type is EnvironmentType.DOCKER
    assert remote.runs_on_bridge
    assert remote.refusal_on_cluster() is None
    assert remote.on_cluster().type is EnvironmentType.DOCKER
    refusal = remote.refusal_locally()
    assert refusal is not None
    assert refusal.startswith("a remote Docker engine, which a cluster's bridge controller")
    assert remote.refused_field(local=True) == "environment.docker_host"
    assert remote.refused_field(local=False) == "environment.type"

    pods = EnvironmentSettings.model_validate({"type": "docker"})
    assert pods.cluster_type is EnvironmentType.KUBERNETES
    assert not pods.runs_on_bridge


@pytest.mark.parametrize(
    "address",
    ["tcp://docker.internal:2376", "tcp://10.0.0.5:2375", "ssh://ops@build-host", "ssh://h:22"],
)
def test_a_remote_engine_address_is_taken(address: str) -> None:
    settings = EnvironmentSettings.model_validate({"type": "docker", "docker_host": address})
    assert settings.docker_host == address


@pytest.mark.parametrize(
    "address",
    ["unix:///var/run/docker.sock", "docker.internal:2376", "http://h:2375", "tcp://", ""],
)
def test_a_docker_host_that_is_not_a_remote_engine_is_refused(address: str) -> None:
    with pytest.raises(ValidationError, match="tcp://HOST:PORT or ssh://USER@HOST"):
        EnvironmentSettings.model_validate({"type": "docker", "docker_host": address})


def test_a_docker_host_with_another_type_is_refused() -> None:
    with pytest.raises(ValidationError, match="applies to type 'docker' only, not 'kubernetes'"):
        EnvironmentSettings.model_validate({"type": "kubernetes", "docker_host": "tcp://h:1"})


def test_engines_to_sweep_are_remote_engine_addresses() -> None:
    settings = from_env(
        {"ROLLOUT_BRIDGE_IDENTITY": "b", "ROLLOUT_BRIDGE_DOCKER_HOSTS": "tcp://a:2376,ssh://u@b"}
    )
    assert settings.docker_hosts == ["tcp://a:2376", "ssh://u@b"]
    with pytest.raises(InvalidInput, match=r"ROLLOUT_BRIDGE_DOCKER_HOSTS.*'unix:///x' is not"):
        from_env({"ROLLOUT_BRIDGE_IDENTITY": "b", "ROLLOUT_BRIDGE_DOCKER_HOSTS": "unix:///x"})


def test_a_sandbox_is_matched_to_its_trial_by_label_values() -> None:
    # A name that is no label value (too long) is labelled by a sanitised, hashed form.
    long_name = "t" * 70
    labels = sandbox_labels("ns", long_name, "job", ME)
    assert labels["rollout.dev/trial"] != long_name
    owned = OwnedSandbox("id", labels["rollout.dev/namespace"], labels["rollout.dev/trial"])
    assert owned.of_trial("ns", long_name)
    assert not owned.of_trial("ns", "t" * 69)
    assert not owned.of_trial("other", long_name)
    assert "rollout.dev/preserved" not in labels
    kept = sandbox_labels("ns", "t", "job", ME, preserved=True)
    assert kept["rollout.dev/preserved"] == "true"


@pytest.mark.parametrize(
    ("error", "again"),
    [
        (ApiException(status=500), True),
        (ApiException(status=503), True),
        (ApiException(status=429), True),
        (ApiException(status=0), False),
        (ApiException(status=404), False),
        (ApiException(status=409), False),
        (ApiException(status=422), False),
        (ConnectionRefusedError(), True),
        (TimeoutError(), True),
        (urllib3.exceptions.ProtocolError("cut"), True),
        (ValueError("a bug"), False),
    ],
)
def test_only_transient_api_failures_are_tried_again(error: BaseException, again: bool) -> None:
    assert transient(error) is again


def test_a_provider_secret_names_a_secret_of_a_cloud_type_only() -> None:
    cloud = EnvironmentSettings.model_validate({"type": "e2b", "provider_secret": "team-e2b"})
    assert cloud.provider_secret == "team-e2b"
    assert cloud.runs_on_bridge
    with pytest.raises(ValidationError, match="applies to types 'modal', 'daytona', 'e2b' only"):
        EnvironmentSettings.model_validate({"type": "docker", "provider_secret": "keys"})
    with pytest.raises(ValidationError, match="is not a Secret's name"):
        EnvironmentSettings.model_validate({"type": "modal", "provider_secret": "Team Keys"})
