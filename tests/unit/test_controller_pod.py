"""The trial Pod: valid for Kubernetes, no token, the task's resources, the runner's inputs."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import kubernetes_validate
import pytest

from kubeharness.kubelet import container_argv, container_env
from rollout.api.errors import InvalidInput
from rollout.api.resources import RolloutTrialSpec
from rollout.api.trials import is_label_value, label_value, trial_resource_name
from rollout.api.wire.shim import CONTROL_DIR, shim_command
from rollout.controller.config import OperatorConfig
from rollout.controller.pod import (
    STORAGE_CREDENTIALS_DIR,
    TASK_DIR,
    render_trial_pod,
)
from rollout.storage import storage_from_env
from rollout_runner.main import build_parser
from rollout_runner.spec import load_pod_created_at, load_spec, load_try, resolve_agent_env

KUBERNETES_VERSIONS = ("1.25", "1.28", "1.33")
"""The oldest schema kubernetes-validate ships (1.24 is not among them), the first with native
sidecars, and a recent one."""
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"  # kubectl's own annotation

TRIAL_NAME = trial_resource_name("nightly-evals", "claude-code", "terminal-bench", "hello-world", 2)
SECRET_VALUE = "sk-ant-api03-this-never-appears-in-a-pod"
CREATED = datetime(2025, 1, 15, 10, 30, 0, 125000, tzinfo=UTC)
"""When the operator creates the Pod (it passes the time it renders the Pod at)."""

SPEC: dict[str, Any] = {
    "jobName": "nightly-evals",
    "agent": {
        "name": "claude-code",
        "install": "npm install -g @anthropic-ai/claude-code",
        "execute": 'claude -p "$(cat /tmp/instruction.md)"',
        "env": [
            {"name": "MODEL", "value": "claude-sonnet-4-5"},
            {
                "name": "ANTHROPIC_API_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": "nightly-evals-agent-env", "key": "ANTHROPIC_API_KEY"}
                },
            },
            {
                "name": "OPTIONAL_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "extra", "key": "token", "optional": True}},
            },
        ],
    },
    "datasetName": "terminal-bench",
    "taskName": "hello-world",
    "attempt": 2,
    "taskContentHash": "0123456789abcdef" * 4,
    "image": "ghcr.io/laude-institute/t-bench/hello-world:latest",
    "resources": {"cpus": "2", "memory": "4G", "storage": "20G"},
    "timeouts": {"agentInstallSec": 300, "agentSec": 900, "verifierSec": 300, "buildSec": 600},
    "storage": {
        "bucket": "evals",
        "prefix": "team-a",
        "endpoint": "http://minio.rollout-system:9000",
        "pathStyle": True,
    },
    "runnerImage": "registry.example.com/rollout-runner:0.1.0",
}


def make_trial(**spec_changes: Any) -> dict[str, Any]:
    """A RolloutTrial as the API returns it (what kopf hands a handler as `body`)."""
    spec = copy.deepcopy(SPEC)
    spec.update(spec_changes)
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutTrial",
        "metadata": {
            "name": TRIAL_NAME,
            "namespace": "evals",
            "uid": "6f1c6a2e-5a1b-4c47-9a7e-0d9d3f1c2b3a",
            "resourceVersion": "12345",
            "generation": 1,
            "creationTimestamp": "2024-05-01T12:00:00Z",
            "labels": {
                "rollout.dev/job": "nightly-evals",
                "rollout.dev/trial": TRIAL_NAME,
                "rollout.dev/agent": "claude-code",
                "rollout.dev/dataset": "terminal-bench",
                "rollout.dev/task": "hello-world",
            },
        },
        "spec": spec,
    }


def make_config(**changes: Any) -> OperatorConfig:
    values: dict[str, Any] = {"runner_image": "registry.example.com/rollout-runner:default"}
    values.update(changes)
    return OperatorConfig(**values)


def render(trial: dict[str, Any] | None = None, **config: Any) -> dict[str, Any]:
    return render_trial_pod(
        trial or make_trial(),
        config=make_config(**config),
        pod_name="trial-pod-r0",
        created_at=CREATED,
    )


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in pod["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1
    return found[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def literal_env(c: dict[str, Any]) -> dict[str, str]:
    """The container's literal env values as the process sees them (after the kubelet)."""
    expanded = container_env({"env": [e for e in c.get("env", []) if "value" in e]})
    return {e["name"]: expanded[e["name"]] for e in c.get("env", []) if "value" in e}


def argv(c: dict[str, Any]) -> list[str]:
    """The container's command and args as the process gets them (after the kubelet)."""
    return container_argv(c, literal_env(c))


def variants() -> list[dict[str, Any]]:
    """Pods for the shapes a trial takes: minimal, GPUs, overrides, workdir, users, Secrets."""
    minimal = make_trial(
        agent={"name": "oracle"}, storage={"bucket": "results"}, resources=SPEC["resources"]
    )
    full = make_trial(
        resources={"cpus": "500m", "memory": "2048Mi", "storage": "10Gi", "gpus": 2},
        workdir="/app",
        agentUser="agent",
        verifierUser=0,
        preserveEnv=True,
        pod={
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                },
            ],
            "runtimeClassName": "gvisor",
            "priorityClassName": "evals-low",
            "imagePullSecrets": [{"name": "regcred"}],
        },
        storage={**SPEC["storage"], "credentialsSecret": "team-a-storage", "region": "eu-west-1"},
    )
    return [
        render(minimal),
        render(),
        render(
            full,
            trial_service_account="rollout-trial",
            storage_credentials_secret="rollout-storage",
            runner_image_pull_policy="Always",
            pod_termination_grace_sec=0,
        ),
    ]


# --- the manifest as a whole ----------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_pod_is_a_valid_kubernetes_pod(version: str) -> None:
    for pod in variants():
        # Raises kubernetes_validate.ValidationError on an unknown field or a wrong type.
        assert kubernetes_validate.validate(pod, version, strict=True) == version


def test_no_service_account_token_reaches_either_container() -> None:
    for pod in variants():
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        for volume in spec["volumes"]:
            assert set(volume) & {"projected", "serviceAccountToken"} == set()
        for c in spec["containers"]:
            for mount in c["volumeMounts"]:
                assert not mount["mountPath"].startswith("/var/run/secrets/kubernetes.io")
            assert "envFrom" not in c
            for entry in c.get("env", []):
                assert "fieldRef" not in entry.get("valueFrom", {})
        assert "kube-api-access" not in json.dumps(pod)


def test_the_service_account_is_the_configured_one_or_none() -> None:
    assert "serviceAccountName" not in render()["spec"]
    assert render(trial_service_account="rollout-trial")["spec"]["serviceAccountName"] == (
        "rollout-trial"
    )


def test_pod_level_settings() -> None:
    pod = render(pod_termination_grace_sec=25)
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "trial-pod-r0"
    assert pod["metadata"]["namespace"] == "evals"
    assert spec["restartPolicy"] == "Never"
    assert spec["shareProcessNamespace"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["terminationGracePeriodSeconds"] == 25
    assert "initContainers" not in spec
    assert "hostNetwork" not in spec
    assert "hostPID" not in spec


def test_the_runner_starts_first_and_kubectl_goes_to_the_environment() -> None:
    # The kubelet starts containers in order, each pulled, created and started before the next:
    # the runner's start-up runs while the environment's image is pulled and started.
    pod = render()
    assert [c["name"] for c in pod["spec"]["containers"]] == ["runner", "environment"]
    # kubectl exec and logs without -c still reach the task's environment.
    assert pod["metadata"]["annotations"][DEFAULT_CONTAINER] == "environment"


def test_the_pod_is_owned_by_its_trial() -> None:
    trial = make_trial()
    pod = render(trial)
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "RolloutTrial",
            "name": trial["metadata"]["name"],
            "uid": "6f1c6a2e-5a1b-4c47-9a7e-0d9d3f1c2b3a",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_a_retry_is_recorded_on_the_pod() -> None:
    pod = render_trial_pod(
        make_trial(), config=make_config(), pod_name="t-r3", retry=3, created_at=CREATED
    )
    assert pod["metadata"]["annotations"] == {
        "rollout.dev/retry": "3",
        DEFAULT_CONTAINER: "environment",
    }
    assert pod["metadata"]["name"] == "t-r3"


def test_labels_are_the_trials_and_valid() -> None:
    trial = make_trial()
    pod = render(trial)
    labels = pod["metadata"]["labels"]
    assert labels == {**trial["metadata"]["labels"], "rollout.dev/component": "trial-pod"}


def test_a_restricted_trials_pod_carries_the_label_its_jobs_network_policies_select() -> None:
    no_internet = render(make_trial(egress={"restricted": True}))
    assert no_internet["metadata"]["labels"]["rollout.dev/egress"] == "restricted"
    allowlist = render(make_trial(egress={"restricted": True, "allowedHosts": ["pypi.org"]}))
    assert allowlist["metadata"]["labels"]["rollout.dev/egress"].startswith("hosts-")
    assert is_label_value(allowlist["metadata"]["labels"]["rollout.dev/egress"])
    for public in (make_trial(), make_trial(egress={"restricted": False})):
        assert "rollout.dev/egress" not in render(public)["metadata"]["labels"]


def test_labels_are_computed_from_the_spec_when_the_trial_has_none() -> None:
    trial = make_trial(
        agent={"name": "Claude Code (Sonnet 4.5)", "execute": "claude"},
        taskName="task:with odd chars " + "x" * 80,
        jobName="2024-05-01__12-00-00",
    )
    trial["metadata"]["labels"] = {}
    labels = render(trial)["metadata"]["labels"]
    assert set(labels) == {
        "rollout.dev/job",
        "rollout.dev/trial",
        "rollout.dev/agent",
        "rollout.dev/dataset",
        "rollout.dev/task",
        "rollout.dev/component",
    }
    assert all(is_label_value(value) for value in labels.values())
    assert labels["rollout.dev/agent"] == label_value("Claude Code (Sonnet 4.5)")
    assert labels["rollout.dev/agent"] != "Claude Code (Sonnet 4.5)"
    assert labels["rollout.dev/job"] == "2024-05-01__12-00-00"
    assert labels["rollout.dev/trial"] == trial["metadata"]["name"]
    assert labels["rollout.dev/task"] == label_value("task:with odd chars " + "x" * 80)


# --- the environment container --------------------------------------------------------------------


def test_the_environment_runs_the_shim_and_nothing_else() -> None:
    pod = render(runner_image_pull_policy="Always")
    env = container(pod, "environment")
    assert argv(env) == shim_command()
    assert "args" not in env
    assert env["image"] == SPEC["image"]
    assert env["imagePullPolicy"] == "IfNotPresent"
    assert "env" not in env
    assert "envFrom" not in env
    assert "securityContext" not in env  # the task's image decides its user, as with docker run
    assert {m["name"]: m["mountPath"] for m in env["volumeMounts"]} == {
        "control": CONTROL_DIR,
        "logs": "/logs",
    }
    assert "workingDir" not in env
    assert env["terminationMessagePolicy"] == "File"


def test_the_environment_works_in_the_tasks_workdir_when_it_names_one() -> None:
    env = container(render(make_trial(workdir="/app")), "environment")
    assert env["workingDir"] == "/app"


def test_the_environment_gets_the_tasks_resources_as_requests_and_limits() -> None:
    env = container(render(), "environment")
    assert env["resources"]["requests"] == env["resources"]["limits"]
    assert env["resources"]["limits"] == {"cpu": "2", "memory": "4G", "ephemeral-storage": "20G"}


def test_gpus_are_requested_only_when_the_task_wants_them() -> None:
    resources = {"cpus": "8", "memory": "32Gi", "storage": "100Gi", "gpus": 1}
    env = container(render(make_trial(resources=resources)), "environment")
    assert env["resources"]["requests"] == env["resources"]["limits"]
    assert env["resources"]["limits"] == {
        "cpu": "8",
        "memory": "32Gi",
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": "1",
    }
    none = container(render(make_trial(resources={**resources, "gpus": 0})), "environment")
    assert "nvidia.com/gpu" not in none["resources"]["limits"]


# --- the runner container -------------------------------------------------------------------------


def test_the_runner_reads_back_the_trial_spec_the_pod_gives_it() -> None:
    trial = make_trial()
    runner = container(render(trial), "runner")
    environ = literal_env(runner)
    spec = load_spec(None, environ)
    assert spec == RolloutTrialSpec.model_validate(trial["spec"])
    assert environ["ROLLOUT_TRIAL_NAME"] == trial["metadata"]["name"]
    text = environ["ROLLOUT_TRIAL_SPEC"]
    assert text == json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)
    assert '"taskContentHash"' in text  # camelCase, as in the resource


def test_the_runner_reads_back_the_storage_settings() -> None:
    runner = container(render(), "runner")
    location, credentials = storage_from_env(literal_env(runner))
    assert location.bucket == "evals"
    assert location.prefix == "team-a"
    assert location.endpoint == "http://minio.rollout-system:9000"
    assert location.path_style is True
    assert location.region == "us-east-1"
    assert "ROLLOUT_STORAGE_REGION" not in literal_env(runner)
    assert credentials is None  # nothing secret in the Pod's env


def test_the_runner_learns_when_its_pod_was_created() -> None:
    runner = container(render(), "runner")
    assert env_of(runner)["ROLLOUT_POD_CREATED_AT"] == {
        "name": "ROLLOUT_POD_CREATED_AT",
        "value": "2025-01-15T10:30:00.125000Z",
    }
    assert load_pod_created_at(literal_env(runner)) == CREATED  # through the kubelet
    assert "ROLLOUT_POD_CREATED_AT" not in env_of(container(render(), "environment"))


def test_the_runner_learns_which_try_its_pod_is() -> None:
    first = literal_env(container(render(), "runner"))
    assert load_try(first) == 1
    retried = render_trial_pod(
        make_trial(), config=make_config(), pod_name="p-r2", created_at=CREATED, retry=2
    )
    assert load_try(literal_env(container(retried, "runner"))) == 3
    assert "ROLLOUT_TRY" not in env_of(container(retried, "environment"))


def test_a_pod_creation_time_in_another_zone_is_written_in_utc() -> None:
    created = CREATED.astimezone(timezone(timedelta(hours=-5)))
    pod = render_trial_pod(make_trial(), config=make_config(), pod_name="p", created_at=created)
    environ = literal_env(container(pod, "runner"))
    assert environ["ROLLOUT_POD_CREATED_AT"] == "2025-01-15T10:30:00.125000Z"


def test_a_pod_creation_time_without_a_zone_is_refused() -> None:
    naive = CREATED.replace(tzinfo=None)
    with pytest.raises(ValueError, match="no timezone"):
        render_trial_pod(make_trial(), config=make_config(), pod_name="p", created_at=naive)


def test_a_storage_region_is_passed_on() -> None:
    trial = make_trial(storage={"bucket": "b", "region": "eu-central-1"})
    environ = literal_env(container(render(trial), "runner"))
    assert environ["ROLLOUT_STORAGE_REGION"] == "eu-central-1"
    assert environ["ROLLOUT_STORAGE_PATH_STYLE"] == "false"
    assert "ROLLOUT_STORAGE_ENDPOINT" not in environ
    assert "ROLLOUT_STORAGE_PREFIX" not in environ


def test_agent_env_from_secrets_becomes_runner_env_with_the_same_reference() -> None:
    trial = make_trial()
    runner = container(render(trial), "runner")
    env = env_of(runner)
    assert env["ROLLOUT_AGENT_ENV_ANTHROPIC_API_KEY"] == {
        "name": "ROLLOUT_AGENT_ENV_ANTHROPIC_API_KEY",
        "valueFrom": {
            "secretKeyRef": {"name": "nightly-evals-agent-env", "key": "ANTHROPIC_API_KEY"}
        },
    }
    assert env["ROLLOUT_AGENT_ENV_OPTIONAL_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "extra", "key": "token", "optional": True}
    }
    # A literal value travels in the spec only; it gets no variable of its own.
    assert "ROLLOUT_AGENT_ENV_MODEL" not in env
    # What the kubelet would do: resolve the reference; the runner then finds the value.
    environ = literal_env(runner)
    environ["ROLLOUT_AGENT_ENV_ANTHROPIC_API_KEY"] = SECRET_VALUE
    spec = load_spec(None, environ)
    agent_env = resolve_agent_env(spec.agent, environ)
    assert agent_env.values == {"MODEL": "claude-sonnet-4-5", "ANTHROPIC_API_KEY": SECRET_VALUE}


def test_no_secret_value_is_in_the_pod(tmp_path: Any) -> None:
    credentials = tmp_path / "creds"
    credentials.mkdir()
    (credentials / "AWS_ACCESS_KEY_ID").write_text("AKIAOPERATORKEY")
    (credentials / "AWS_SECRET_ACCESS_KEY").write_text("operator-secret-access-key")
    config = OperatorConfig.from_env(
        {
            "ROLLOUT_RUNNER_IMAGE": "runner:1",
            "ROLLOUT_STORAGE_BUCKET": "evals",
            "ROLLOUT_STORAGE_CREDENTIALS_DIR": str(credentials),
            "ROLLOUT_STORAGE_CREDENTIALS_SECRET": "rollout-storage",
        }
    )
    assert config.storage_credentials is not None
    assert config.storage_credentials.secrets()
    pod = render_trial_pod(make_trial(), config=config, pod_name="p", created_at=CREATED)
    text = json.dumps(pod)
    for secret in config.storage_credentials.secrets():
        assert secret not in text
    for c in pod["spec"]["containers"]:
        for entry in c.get("env", []):
            if entry["name"].startswith("ROLLOUT_AGENT_ENV_"):
                assert set(entry) == {"name", "valueFrom"}


def test_storage_credentials_come_from_the_trials_secret_else_the_operators() -> None:
    def mounted(pod: dict[str, Any]) -> tuple[str | None, str | None]:
        runner = container(pod, "runner")
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        mounts = {m["name"]: m for m in runner["volumeMounts"]}
        if "storage-credentials" not in volumes:
            assert "storage-credentials" not in mounts
            return None, literal_env(runner).get("ROLLOUT_STORAGE_CREDENTIALS_DIR")
        mount = mounts["storage-credentials"]
        assert mount == {
            "name": "storage-credentials",
            "mountPath": STORAGE_CREDENTIALS_DIR,
            "readOnly": True,
        }
        assert literal_env(runner)["ROLLOUT_STORAGE_CREDENTIALS_DIR"] == STORAGE_CREDENTIALS_DIR
        environment = container(pod, "environment")
        assert all(m["name"] != "storage-credentials" for m in environment["volumeMounts"])
        secret = volumes["storage-credentials"]["secret"]
        return secret["secretName"], STORAGE_CREDENTIALS_DIR

    own = make_trial(storage={"bucket": "b", "credentialsSecret": "team-secret"})
    assert mounted(render(own, storage_credentials_secret="operator-secret"))[0] == "team-secret"
    assert mounted(render(storage_credentials_secret="operator-secret"))[0] == "operator-secret"
    assert mounted(render()) == (None, None)


def test_the_runner_is_root_for_files_only() -> None:
    runner = container(render(), "runner")
    assert runner["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_the_runner_has_small_resources_and_writable_places_under_a_read_only_root() -> None:
    runner = container(render(), "runner")
    requests, limits = runner["resources"]["requests"], runner["resources"]["limits"]
    assert (requests["cpu"], requests["memory"]) == ("50m", "128Mi")
    assert (limits["cpu"], limits["memory"]) == ("1", "512Mi")
    assert {m["mountPath"] for m in runner["volumeMounts"]} >= {
        CONTROL_DIR,
        "/logs",
        TASK_DIR,
        "/tmp",
    }
    assert literal_env(runner)["HOME"] == "/tmp"
    assert runner["terminationMessagePath"] == "/dev/termination-log"
    assert runner["terminationMessagePolicy"] == "File"


def test_the_runner_image_and_pull_policy() -> None:
    runner = container(render(runner_image_pull_policy="Never"), "runner")
    assert runner["image"] == SPEC["runnerImage"]
    assert runner["imagePullPolicy"] == "Never"


def test_the_runners_arguments_are_what_rollout_runner_accepts() -> None:
    runner = container(render(), "runner")
    args = build_parser().parse_args(argv(runner))
    assert str(args.control_dir) == CONTROL_DIR
    assert str(args.logs_dir) == "/logs"
    assert str(args.work_dir) == TASK_DIR
    assert args.spec is None  # the spec comes from ROLLOUT_TRIAL_SPEC


def test_volumes_are_empty_dirs_each_mounted_where_it_belongs() -> None:
    pod = render(storage_credentials_secret="s")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert len(volumes) == len(pod["spec"]["volumes"])
    for name in ("control", "logs", "task", "tmp"):
        assert volumes[name] == {"name": name, "emptyDir": {}}
    mounted = {c["name"]: {m["name"] for m in c["volumeMounts"]} for c in pod["spec"]["containers"]}
    assert mounted["environment"] == {"control", "logs"}
    assert mounted["runner"] == {"control", "logs", "task", "tmp", "storage-credentials"}
    assert set(volumes) == mounted["environment"] | mounted["runner"]


# --- overrides ------------------------------------------------------------------------------------


def test_the_trials_overrides_win_field_by_field_over_the_operators_defaults() -> None:
    defaults = {
        "nodeSelector": {"pool": "default"},
        "tolerations": [{"key": "evals", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "evals-default",
        "imagePullSecrets": [{"name": "default-regcred"}],
    }
    trial = make_trial(pod={"nodeSelector": {"pool": "gpu"}, "runtimeClassName": "kata"})
    config = make_config(default_pod_overrides=defaults)
    spec = render_trial_pod(trial, config=config, pod_name="p", created_at=CREATED)["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert spec["runtimeClassName"] == "kata"
    assert spec["tolerations"] == defaults["tolerations"]
    assert spec["priorityClassName"] == "evals-default"
    assert spec["imagePullSecrets"] == [{"name": "default-regcred"}]


def test_no_overrides_leave_the_scheduling_fields_out() -> None:
    spec = render()["spec"]
    for key in (
        "nodeSelector",
        "tolerations",
        "runtimeClassName",
        "priorityClassName",
        "imagePullSecrets",
    ):
        assert key not in spec


# --- bad input ------------------------------------------------------------------------------------


def test_an_invalid_spec_names_the_trial_and_the_fields() -> None:
    trial = make_trial(attempt=0, resources={"cpus": "lots", "memory": "4G", "storage": "1G"})
    with pytest.raises(InvalidInput) as caught:
        render(trial)
    where = {(p.file, p.field) for p in caught.value.problems}
    file = f"RolloutTrial evals/{trial['metadata']['name']}"
    assert where == {(file, "spec.attempt"), (file, "spec.resources.cpus")}


def test_a_trial_for_another_provider_gets_no_pod() -> None:
    with pytest.raises(InvalidInput) as caught:
        render(make_trial(environmentType="modal"))
    (problem,) = caught.value.problems
    assert problem.field == "spec.environmentType"
    assert "bridge controller" in problem.message


def test_a_trial_without_a_uid_cannot_own_a_pod() -> None:
    trial = make_trial()
    del trial["metadata"]["uid"]
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        render(trial)


def test_a_spec_too_large_for_one_environment_variable_is_refused() -> None:
    script = "echo " + "x" * (130 * 1024)
    with pytest.raises(InvalidInput) as caught:
        render(make_trial(agent={"name": "big", "execute": script}))
    (problem,) = caught.value.problems
    assert problem.field == "spec"
    assert "shorten the agent's install and execute scripts" in problem.message
    # A large but possible one is fine.
    pod = render(make_trial(agent={"name": "big", "execute": "echo " + "x" * (100 * 1024)}))
    assert kubernetes_validate.validate(pod, "1.28", strict=True) == "1.28"


def test_the_runner_waits_for_the_environment_as_long_as_the_task_may_take_to_build() -> None:
    args = build_parser().parse_args(argv(container(render(), "runner")))
    assert args.ready_timeout_sec == 600  # the floor: buildSec is 600 here
    slow = make_trial(
        timeouts={"agentInstallSec": 300, "agentSec": 900, "verifierSec": 300, "buildSec": 2400}
    )
    args = build_parser().parse_args(argv(container(render(slow), "runner")))
    assert args.ready_timeout_sec == 2400
    assert args.upload_timeout_sec == 600


def test_the_pod_deadline_covers_every_phase_unless_the_environment_is_preserved() -> None:
    pod = render()
    # ready 600 + install 300 + agent 900 + verifier 300 + uploads 600 + margin 300
    assert pod["spec"]["activeDeadlineSeconds"] == 3000
    preserved = render(make_trial(preserveEnv=True))
    assert "activeDeadlineSeconds" not in preserved["spec"]


# --- shards of data rows ----------------------------------------------------------------------

ROWS = {
    "number": 1,
    "items": [{"id": "q1", "attempt": 1}, {"id": "q2", "attempt": 1}],
    "verifier": {"kind": "metric", "metric": "llm_judgement"},
    "evaluator": {
        "modelName": "judge",
        "baseUrl": "http://judge.example/v1",
        "apiKey": {"name": "nightly-evals-agent-env", "key": "evaluator-api-key"},
    },
}


def test_a_shard_of_the_oracles_rows_is_a_pod_of_the_runner_alone() -> None:
    trial = make_trial(taskName="shard-000001", attempt=1, agent={"name": "oracle"}, rows=ROWS)
    pod = render(trial)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["runner"]
    assert pod["metadata"]["annotations"][DEFAULT_CONTAINER] == "runner"
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)
    # The evaluator's key reaches the runner from the Secret, never as a literal.
    key = env_of(container(pod, "runner"))["ROLLOUT_EVALUATOR_API_KEY"]
    assert key == {
        "name": "ROLLOUT_EVALUATOR_API_KEY",
        "valueFrom": {
            "secretKeyRef": {"name": "nightly-evals-agent-env", "key": "evaluator-api-key"}
        },
    }


def test_a_shard_of_a_script_agents_rows_has_its_environment_and_time_for_every_row() -> None:
    single = render()
    shard = render(make_trial(taskName="shard-000001", attempt=1, rows=ROWS))
    assert [c["name"] for c in shard["spec"]["containers"]] == ["runner", "environment"]
    # Each row's agent and verifier budgets: two rows, one more than a task's trial.
    extra = shard["spec"]["activeDeadlineSeconds"] - single["spec"]["activeDeadlineSeconds"]
    assert extra >= 900 + 300
