"""The Pod of a RolloutTrial: the task's `environment` container and the `runner` sidecar.

A pure builder: it takes the RolloutTrial object and the operator's settings and returns the Pod
manifest as a dict, so that it is tested without a cluster. Layout (DESIGN.md, "RolloutTrial and
its Pod"):

- `environment`: the task's image running the shim (`rollout.api.wire.shim.shim_command`), with
  the task's resources as requests and limits, the shim's control directory and /logs mounted,
  and nothing else: no env, no token, no credentials. Agents run arbitrary code here.
- `runner`: the sidecar, which gets the trial spec as JSON, the moment the operator created the
  Pod (where the trial's environment setup starts: the runner cannot see it otherwise), the
  storage settings (never a secret value: credentials come from a mounted Secret) and the agent's
  Secret-sourced env vars as `valueFrom` references that the kubelet resolves (the operator reads
  no Secret).

restartPolicy Never: a trial runs once per Pod; an infrastructure retry is a new Pod.

Every string in a container's `command`, `args` and `env[].value` is written as a kubelet
literal (`rollout.controller.kubelet_text`): the kubelet rewrites `$(NAME)` and `$$` there, and
the shim, the trial spec (with the agent's scripts) and the storage settings must reach the
container byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from rollout.api.environment import EnvironmentType
from rollout.api.errors import InvalidInput, Problem
from rollout.api.names import LABEL_COMPONENT, controller_reference
from rollout.api.network import EGRESS_LABEL
from rollout.api.problems import problems_from_validation_error
from rollout.api.resources import (
    GROUP,
    LABEL_AGENT,
    LABEL_DATASET,
    LABEL_JOB,
    LABEL_TASK,
    LABEL_TRIAL,
    LocalObjectReference,
    PodOverrides,
    RolloutTrial,
    RolloutTrialSpec,
)
from rollout.api.rowrun import EVALUATOR_API_KEY_ENV
from rollout.api.trials import TrialKey, trial_labels
from rollout.api.wire import termination
from rollout.api.wire.shim import CONTROL_DIR, MAX_ARGUMENT_BYTES, shim_command
from rollout.api.wire.spec import (
    POD_CREATED_ENV_VAR,
    SPEC_ENV_VAR,
    TRY_ENV_VAR,
    agent_secret_carriers,
    pod_created_at_text,
    trial_spec_json,
    try_text,
)
from rollout.controller.config import OperatorConfig
from rollout.controller.kubelet_text import as_kubelet_literals
from rollout.storage import ENV_CREDENTIALS_DIR, location_env

ENVIRONMENT_CONTAINER = "environment"
RUNNER_CONTAINER = "runner"

TRIAL_POD_COMPONENT = "trial-pod"
ANNOTATION_RETRY = f"{GROUP}/retry"
"""How many times the trial's Pod was replaced after an infrastructure loss (0 for the first)."""
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
"""The container kubectl's exec, logs and attach take when not told one (kubectl 1.21 and newer;
older ones take the first)."""

TRIAL_LABELS = (LABEL_JOB, LABEL_TRIAL, LABEL_AGENT, LABEL_DATASET, LABEL_TASK)

CONTROL_VOLUME = "control"
LOGS_VOLUME = "logs"
TASK_VOLUME = "task"
TMP_VOLUME = "tmp"
STORAGE_CREDENTIALS_VOLUME = "storage-credentials"

LOGS_DIR = "/logs"
TASK_DIR = "/var/run/rollout/task"
"""The runner's private directory for the task's files; the environment cannot see it."""
TMP_DIR = "/tmp"
STORAGE_CREDENTIALS_DIR = "/var/run/secrets/rollout/storage"

TRIAL_NAME_ENV_VAR = "ROLLOUT_TRIAL_NAME"
GPU_RESOURCE = "nvidia.com/gpu"

RUNNER_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "50m", "memory": "128Mi", "ephemeral-storage": "64Mi"},
    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"},
}
"""The runner mostly waits; it needs a core and some memory only to unpack and upload. Its
ephemeral-storage limit adds headroom to the Pod's total, which the kubelet enforces on the
emptyDirs too, so that the runner's copy of the task does not eat into the task's own storage."""

RUNNER_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER"]

MIN_READY_TIMEOUT_SEC = 600.0
"""Least time the runner waits for the environment: it includes pulling the task's image."""
UPLOAD_TIMEOUT_SEC = 600.0
"""The runner's deadline for uploading a trial's files (its own default, made explicit)."""
DEADLINE_MARGIN_SEC = 300.0
"""Slack on top of every phase's budget before the kubelet ends a Pod that never finished."""
"""Why the runner runs as uid 0 with these and no others: the shim runs as the task image's user
(root in most task images) and the agent and verifier as users of their own, so the files in the
shared volumes (/rollout, /logs) belong to whoever made them, often with modes that shut others
out. DAC_OVERRIDE lets the runner read agent and verifier logs and the shim's outputs and remove
the request directories, whatever their owner and mode; FOWNER lets it change the mode of files
it does not own (clearing /logs/verifier, handing /logs/agent over); CHOWN lets it give the files
it places to the agent's or verifier's user. Everything else is dropped, privilege escalation is
off and the root filesystem is read-only, so uid 0 here is a file-access identity, not a way out
of the container."""


def render_trial_pod(
    trial: Mapping[str, Any],
    *,
    config: OperatorConfig,
    pod_name: str,
    created_at: datetime,
    retry: int = 0,
    image: str | None = None,
) -> dict[str, Any]:
    """The Pod manifest that runs `trial` (a RolloutTrial object: metadata and spec).

    `created_at` (timezone-aware) is when the operator creates the Pod, or when the trial began
    waiting for its image to be built; the runner times the trial's environment setup from it
    (`rollout.api.wire.spec.POD_CREATED_ENV_VAR`). `image`: the environment's image, where it is
    not spec.image (an image built in the cluster, pinned to its digest).

    Raises InvalidInput naming the RolloutTrial and the field when its spec is not valid or the
    trial is not meant to run in a Pod (another environment type), and ValueError when its
    metadata lacks the name, namespace or uid that the Pod's owner reference needs, or
    `created_at` has no timezone.
    """
    metadata = trial.get("metadata") or {}
    name, namespace, uid = (metadata.get(key) for key in ("name", "namespace", "uid"))
    if not (name and namespace and uid):
        raise ValueError("a RolloutTrial needs metadata.name, metadata.namespace and metadata.uid")
    spec = parse_trial_spec(trial)
    where = trial_file(trial)
    if spec.environment_type != EnvironmentType.KUBERNETES:
        raise InvalidInput.one(
            where,
            "spec.environmentType",
            f"is {spec.environment_type.value!r}: the bridge controller runs this trial, not a Pod",
        )
    if image is not None:
        spec = spec.model_copy(update={"image": image})
    overrides = effective_pod_overrides(spec.pod, config.default_pod_overrides)
    if spec.image_build is not None and config.image_pull_secret:
        # A built image is pulled from the operator's registry, with its pull Secret.
        pull = LocalObjectReference(name=config.image_pull_secret)
        if pull not in overrides.image_pull_secrets:
            overrides = overrides.model_copy(
                update={"image_pull_secrets": [*overrides.image_pull_secrets, pull]}
            )
    credentials_secret = spec.storage.credentials_secret or config.storage_credentials_secret
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # No token anywhere: agents run arbitrary code and must not reach the Kubernetes API.
        "automountServiceAccountToken": False,
        # The shim's kill-all kills every process it can see; it must not see the runner.
        "shareProcessNamespace": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": config.pod_termination_grace_sec,
        # The runner first: the kubelet starts a Pod's containers one after the other, each
        # image pulled, created and started before the next, so the runner's start-up (Python,
        # its imports, its S3 client) and its download of the task run while the environment's
        # image is pulled and started, instead of after. The oracle's data rows need no
        # environment: the Pod holds the runner alone.
        "containers": [
            runner_container(
                spec,
                trial_name=name,
                created_at=created_at,
                try_number=spec.earlier_tries + retry + 1,
                config=config,
                credentials_secret=credentials_secret,
                where=where,
            ),
            *([environment_container(spec)] if spec.needs_environment else []),
        ],
        "volumes": _volumes(credentials_secret),
    }
    if not spec.preserve_env:
        # A safety net, not a timeout of the trial: a Pod that cannot start at all (a missing
        # Secret keeps it in ContainerCreating) or whose runner hangs still ends, and the trial
        # with it. A preserved environment is kept for inspection, so it gets none.
        pod_spec["activeDeadlineSeconds"] = pod_deadline_sec(spec)
    if config.trial_service_account:
        pod_spec["serviceAccountName"] = config.trial_service_account
    pod_spec.update(_scheduling(overrides))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": namespace,
            "labels": pod_labels(trial, spec),
            "annotations": {
                ANNOTATION_RETRY: str(retry),
                # `kubectl exec` and `kubectl logs` without -c go to the task's environment, as
                # when it was the first container (a preserved environment is for exec).
                DEFAULT_CONTAINER_ANNOTATION: (
                    ENVIRONMENT_CONTAINER if spec.needs_environment else RUNNER_CONTAINER
                ),
            },
            "ownerReferences": [controller_reference(RolloutTrial.resource.kind, name, uid)],
        },
        "spec": pod_spec,
    }


def trial_file(trial: Mapping[str, Any]) -> str:
    """How problems name a RolloutTrial: `RolloutTrial <namespace>/<name>`."""
    metadata = trial.get("metadata") or {}
    return f"RolloutTrial {metadata.get('namespace') or '?'}/{metadata.get('name') or '?'}"


def parse_trial_spec(trial: Mapping[str, Any]) -> RolloutTrialSpec:
    """The trial's spec as the model; InvalidInput names the trial and each `spec.` field."""
    where = trial_file(trial)
    try:
        return RolloutTrialSpec.model_validate(trial.get("spec"))
    except ValidationError as err:
        problems = [
            Problem(p.file, f"spec.{p.field}" if p.field else "spec", p.message)
            for p in problems_from_validation_error(err, where)
        ]
        raise InvalidInput(problems) from None


def pod_labels(trial: Mapping[str, Any], spec: RolloutTrialSpec) -> dict[str, str]:
    """The trial's labels (job, trial, agent, dataset, task), the Pod's component and, when its
    egress is restricted, the label the job's NetworkPolicies select it by.

    The trial's own values of those labels are kept when it has them, so that one selector finds
    a trial and its Pod; missing ones are computed from the spec the same way.
    """
    metadata = trial.get("metadata") or {}
    key = TrialKey(spec.agent.name, spec.dataset_name, spec.task_name, spec.attempt)
    labels = trial_labels(spec.job_name, key, str(metadata.get("name")))
    own = metadata.get("labels") or {}
    labels.update({k: own[k] for k in TRIAL_LABELS if isinstance(own.get(k), str)})
    labels[LABEL_COMPONENT] = TRIAL_POD_COMPONENT
    egress = spec.egress.label_value if spec.egress is not None else None
    if egress is not None:
        labels[EGRESS_LABEL] = egress  # the job's NetworkPolicies select it (`netpolicy`)
    return labels


def effective_pod_overrides(
    trial_overrides: PodOverrides, defaults: PodOverrides | None
) -> PodOverrides:
    """The trial's overrides, each field that it leaves empty taken from the operator's defaults."""
    if defaults is None:
        return trial_overrides
    merged = {
        field: getattr(trial_overrides, field) or getattr(defaults, field)
        for field in PodOverrides.model_fields
    }
    return PodOverrides(**merged)


def _scheduling(overrides: PodOverrides) -> dict[str, Any]:
    """The Pod spec fields of the overrides that are set."""
    dumped = overrides.model_dump(mode="json", exclude_none=True)
    return {key: value for key, value in dumped.items() if value not in ({}, [])}


def _resources(spec: RolloutTrialSpec) -> dict[str, dict[str, str]]:
    """The task's resources as both requests and limits: what it asks for is what it gets,
    so trials measure the same on a busy node as on an idle one."""
    amounts = {
        "cpu": spec.resources.cpus,
        "memory": spec.resources.memory,
        "ephemeral-storage": spec.resources.storage,
    }
    if spec.resources.gpus > 0:
        amounts[GPU_RESOURCE] = str(spec.resources.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def environment_container(spec: RolloutTrialSpec) -> dict[str, Any]:
    """The task's container: the shim in the task's image, and only the shared volumes."""
    container: dict[str, Any] = {
        "name": ENVIRONMENT_CONTAINER,
        "image": spec.image,
        # Never force a pull: a task image shared by many trials is pulled once per node.
        "imagePullPolicy": "IfNotPresent",
        "command": shim_command(),
        "resources": _resources(spec),
        "volumeMounts": [
            {"name": CONTROL_VOLUME, "mountPath": CONTROL_DIR},
            {"name": LOGS_VOLUME, "mountPath": LOGS_DIR},
        ],
        "terminationMessagePolicy": "File",
    }
    if spec.workdir:
        container["workingDir"] = spec.workdir
    return as_kubelet_literals(container)


def runner_container(
    spec: RolloutTrialSpec,
    *,
    trial_name: str,
    created_at: datetime,
    try_number: int,
    config: OperatorConfig,
    credentials_secret: str | None,
    where: str = "RolloutTrial",
) -> dict[str, Any]:
    """The runner sidecar: the trial spec, the Pod's creation time and try, storage settings and
    Secret references in its env."""
    spec_json = trial_spec_json(spec)
    size = len(f"{SPEC_ENV_VAR}={spec_json}".encode())
    if size > MAX_ARGUMENT_BYTES:
        # Linux refuses to start a process with a longer environment string (MAX_ARG_STRLEN).
        raise InvalidInput.one(
            where,
            "spec",
            f"is {size} bytes as JSON, more than the {MAX_ARGUMENT_BYTES} bytes one environment "
            "variable of the runner can hold: shorten the agent's install and execute scripts",
        )
    env: list[dict[str, Any]] = [
        {"name": TRIAL_NAME_ENV_VAR, "value": trial_name},
        {"name": SPEC_ENV_VAR, "value": spec_json},
        {"name": POD_CREATED_ENV_VAR, "value": pod_created_at_text(created_at)},
        {"name": TRY_ENV_VAR, "value": try_text(try_number)},
    ]
    env += [{"name": key, "value": value} for key, value in location_env(spec.storage).items()]
    mounts: list[dict[str, Any]] = [
        {"name": CONTROL_VOLUME, "mountPath": CONTROL_DIR},
        {"name": LOGS_VOLUME, "mountPath": LOGS_DIR},
        {"name": TASK_VOLUME, "mountPath": TASK_DIR},
        {"name": TMP_VOLUME, "mountPath": TMP_DIR},
    ]
    if credentials_secret:
        env.append({"name": ENV_CREDENTIALS_DIR, "value": STORAGE_CREDENTIALS_DIR})
        mounts.append(
            {
                "name": STORAGE_CREDENTIALS_VOLUME,
                "mountPath": STORAGE_CREDENTIALS_DIR,
                "readOnly": True,
            }
        )
    # The root filesystem is read-only: anything that looks in $HOME finds a writable place.
    env.append({"name": "HOME", "value": TMP_DIR})
    env += agent_secret_env(spec)
    return as_kubelet_literals(
        {
            "name": RUNNER_CONTAINER,
            "image": spec.runner_image or config.runner_image,
            "imagePullPolicy": config.runner_image_pull_policy,
            # The image's entrypoint is rollout-runner; the paths are given, not left to defaults.
            "args": [
                "--control-dir",
                CONTROL_DIR,
                "--logs-dir",
                LOGS_DIR,
                "--work-dir",
                TASK_DIR,
                "--ready-timeout-sec",
                f"{ready_timeout_sec(spec):g}",
                "--upload-timeout-sec",
                f"{UPLOAD_TIMEOUT_SEC:g}",
            ],
            "env": env,
            "resources": {kind: dict(amounts) for kind, amounts in RUNNER_RESOURCES.items()},
            "securityContext": {
                "runAsUser": 0,
                "runAsGroup": 0,
                "runAsNonRoot": False,
                "privileged": False,
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"], "add": list(RUNNER_CAPABILITIES)},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumeMounts": mounts,
            "terminationMessagePath": str(termination.DEFAULT_PATH),
            "terminationMessagePolicy": "File",
        }
    )


def ready_timeout_sec(spec: RolloutTrialSpec) -> float:
    """How long the runner waits for the environment container's shim to be ready.

    Getting the environment ready includes pulling its image, which for multi-GB benchmark images
    can take longer than any fixed default: the task's effective build timeout (after the job's
    multiplier) is its budget, and never less than MIN_READY_TIMEOUT_SEC.
    """
    return max(MIN_READY_TIMEOUT_SEC, spec.timeouts.build_sec)


def pod_deadline_sec(spec: RolloutTrialSpec) -> int:
    """activeDeadlineSeconds of a trial Pod: every phase's budget, the uploads and a margin; a
    shard's Pod has its rows' agent, verifier and upload budgets once per row."""
    timeouts = spec.timeouts
    rows = len(spec.rows.items) if spec.rows is not None else 1
    budget = (
        ready_timeout_sec(spec)
        + timeouts.agent_install_sec
        + rows * (timeouts.agent_sec + timeouts.verifier_sec + UPLOAD_TIMEOUT_SEC)
        + DEADLINE_MARGIN_SEC
    )
    return math.ceil(budget)


def agent_secret_env(spec: RolloutTrialSpec) -> list[dict[str, Any]]:
    """For each Secret-backed value of the agent (env, endpoint headers, the model's key), a
    runner variable with the same `secretKeyRef` (`agent_secret_carriers`); and
    a shard's llm_judgement evaluator key (`rollout.api.rowrun.EVALUATOR_API_KEY_ENV`)."""
    env = [
        {
            "name": carrier.variable,
            "valueFrom": {
                "secretKeyRef": carrier.selector.model_dump(
                    mode="json", by_alias=True, exclude_none=True
                )
            },
        }
        for carrier in agent_secret_carriers(spec.agent)
    ]
    evaluator = spec.rows.evaluator if spec.rows is not None else None
    if evaluator is not None and evaluator.api_key is not None:
        selector = evaluator.api_key.model_dump(mode="json", by_alias=True, exclude_none=True)
        env.append({"name": EVALUATOR_API_KEY_ENV, "valueFrom": {"secretKeyRef": selector}})
    return env


def _volumes(credentials_secret: str | None) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": CONTROL_VOLUME, "emptyDir": {}},
        {"name": LOGS_VOLUME, "emptyDir": {}},
        {"name": TASK_VOLUME, "emptyDir": {}},
        {"name": TMP_VOLUME, "emptyDir": {}},
    ]
    if credentials_secret:
        volumes.append(
            {
                "name": STORAGE_CREDENTIALS_VOLUME,
                # Readable by its owner (root, the runner) only.
                "secret": {"secretName": credentials_secret, "defaultMode": 0o400},
            }
        )
    return volumes
