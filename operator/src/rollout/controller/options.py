"""The operator's settings as users give them: one `Setting` per variable and flag.

The variables are the contract with the Helm chart (charts/rollout-operator sets them; the
README's "Chart values" lists them); each flag has the meaning of its variable. The storage
settings are declared with the rest of storage (`rollout.storage.settings`); the help texts
below say what they mean to the operator.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import ValidationError

from rollout.api.job_settings import LogLevel
from rollout.api.resources import BuilderType, PodOverrides
from rollout.controller.prices import parse_unit_prices
from rollout.settings import RUNNER_IMAGE, Setting, boolean, comma_list, seconds, whole_number
from rollout.storage.settings import (
    BUCKET,
    CREDENTIALS_DIR,
    CREDENTIALS_SECRET,
    ENDPOINT,
    PATH_STYLE,
    PREFIX,
    REGION,
)

DEFAULT_PEERING = "rollout-operator"

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
PULL_POLICIES: tuple[PullPolicy, ...] = ("Always", "IfNotPresent", "Never")


def _pull_policy(text: str) -> str:
    for policy in PULL_POLICIES:
        if text.lower() == policy.lower():
            return policy
    raise ValueError(f"{text!r} is not one of {', '.join(PULL_POLICIES)}")


def _log_level(text: str) -> LogLevel:
    try:
        return LogLevel(text.lower())
    except ValueError:
        names = ", ".join(level.value for level in LogLevel)
        raise ValueError(f"{text!r} is not one of {names}") from None


def _builder(text: str) -> BuilderType:
    try:
        return BuilderType(text.lower())
    except ValueError:
        names = ", ".join(builder.value for builder in BuilderType)
        raise ValueError(f"{text!r} is not one of {names}") from None


def _peering(text: str) -> str | None:
    return text or None


def _pod_overrides(text: str) -> PodOverrides | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError("must be a JSON object with the fields of a RolloutJob's spec.pod")
    try:
        overrides = PodOverrides.model_validate(data)
    except ValidationError as err:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
            for e in err.errors(include_url=False)
        )
        raise ValueError(f"is not a valid spec.pod ({details})") from None
    return None if overrides == PodOverrides() else overrides


NAMESPACES = Setting(
    "namespaces",
    "ROLLOUT_NAMESPACES",
    "--namespace",
    "namespace to watch (repeat, or separate with commas); none: the whole cluster",
    comma_list,
    "NAMESPACE",
    repeatable=True,
)
OPERATOR_RUNNER_IMAGE = RUNNER_IMAGE.but(
    help="runner image for RolloutJobs without spec.runnerImage (required)"
)
PEERING = Setting(
    "peering_name",
    "ROLLOUT_PEERING",
    "--peering",
    f'kopf peering name; "" for standalone (default: {DEFAULT_PEERING})',
    _peering,
    "NAME",
    empty_is_a_value=True,
)

OPERATOR_SETTINGS: tuple[Setting, ...] = (
    NAMESPACES,
    OPERATOR_RUNNER_IMAGE,
    Setting(
        "runner_image_pull_policy",
        "ROLLOUT_RUNNER_IMAGE_PULL_POLICY",
        "--runner-image-pull-policy",
        "imagePullPolicy of the runner container (default: IfNotPresent)",
        _pull_policy,
        "POLICY",
    ),
    Setting(
        "rows_image",
        "ROLLOUT_ROWS_IMAGE",
        "--rows-image",
        "environment image of data rows whose dataset declares none (default: the runner image)",
        metavar="IMAGE",
    ),
    CREDENTIALS_SECRET.but(
        name="storage_credentials_secret",
        help="Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY that trial Pods mount",
        metavar="SECRET",
    ),
    Setting(
        "trial_service_account",
        "ROLLOUT_TRIAL_SERVICE_ACCOUNT",
        "--trial-service-account",
        "serviceAccountName of trial Pods (default: the namespace's default)",
        metavar="NAME",
    ),
    PEERING,
    Setting(
        "clusterwide_peering",
        "ROLLOUT_CLUSTERWIDE_PEERING",
        "--clusterwide-peering",
        "true: ClusterKopfPeering; false: namespaced KopfPeering (default: true when watching "
        "the whole cluster)",
        boolean,
        "BOOL",
    ),
    Setting(
        "metrics_port",
        "ROLLOUT_METRICS_PORT",
        "--metrics-port",
        "Prometheus metrics port, path /metrics (default: 9090)",
        whole_number,
        "PORT",
    ),
    Setting(
        "health_port",
        "ROLLOUT_HEALTH_PORT",
        "--health-port",
        "liveness/readiness port, path /healthz (default: 8080)",
        whole_number,
        "PORT",
    ),
    Setting(
        "worker_limit",
        "ROLLOUT_WORKER_LIMIT",
        "--worker-limit",
        "kopf worker limit: handlers running at once (default: 50)",
        whole_number,
        "N",
    ),
    Setting(
        "log_level",
        "ROLLOUT_LOG_LEVEL",
        "--log-level",
        "debug, info, warning or error (default: info)",
        _log_level,
        "LEVEL",
    ),
    Setting(
        "default_pod_overrides",
        "ROLLOUT_DEFAULT_POD_OVERRIDES",
        "--default-pod-overrides",
        "JSON of default trial Pod overrides (nodeSelector, tolerations, runtimeClassName, "
        "priorityClassName, imagePullSecrets); a RolloutJob's spec.pod wins field by field",
        _pod_overrides,
        "JSON",
    ),
    Setting(
        "unschedulable_grace_sec",
        "ROLLOUT_UNSCHEDULABLE_GRACE_SEC",
        "--unschedulable-grace-sec",
        "how long a trial Pod may be Unschedulable before the trial fails (default: 600)",
        seconds,
        "SECONDS",
    ),
    Setting(
        "image_pull_grace_sec",
        "ROLLOUT_IMAGE_PULL_GRACE_SEC",
        "--image-pull-grace-sec",
        "how long an image may fail to pull before the trial fails (default: 120)",
        seconds,
        "SECONDS",
    ),
    Setting(
        "running_status_after_sec",
        "ROLLOUT_RUNNING_STATUS_AFTER_SEC",
        "--running-status-after-sec",
        "how long a trial's runner runs before its RolloutTrial says Running; one API write "
        "fewer for a trial that ends sooner (default: 10; 0: at once)",
        seconds,
        "SECONDS",
    ),
    Setting(
        "status_interval_sec",
        "ROLLOUT_STATUS_INTERVAL_SEC",
        "--status-interval-sec",
        "least seconds between two status patches of one RolloutJob (default: 2)",
        seconds,
        "SECONDS",
    ),
    Setting(
        "pod_termination_grace_sec",
        "ROLLOUT_POD_TERMINATION_GRACE_SEC",
        "--pod-termination-grace-sec",
        "terminationGracePeriodSeconds of trial Pods (default: 10)",
        whole_number,
        "SECONDS",
    ),
    Setting(
        "unit_prices",
        "ROLLOUT_UNIT_PRICES",
        "--unit-prices",
        "JSON object of the price of one unit of a resource for one hour, by resource name: "
        "cpu per core, memory and ephemeral-storage per GiB, others (nvidia.com/gpu) per device, "
        'e.g. \'{"cpu": 0.031, "memory": 0.004}\'; trials then have a cost (default: none, '
        "cost null)",
        parse_unit_prices,
        "JSON",
    ),
)
"""The settings of `OperatorConfig`'s own fields, each named as its field."""

BUILD_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "image_registry",
        "ROLLOUT_IMAGE_REGISTRY",
        "--image-registry",
        "registry (host[:port]) that images built in the cluster are pushed to and looked up "
        "in; none: tasks that need a build fail with environment_build_failed",
        metavar="HOST",
    ),
    Setting(
        "image_repository",
        "ROLLOUT_IMAGE_REPOSITORY",
        "--image-repository",
        "repository of built images in that registry, e.g. evals/rollout-env (default: "
        "rollout-env); the tag is the image's hash",
        metavar="PATH",
    ),
    Setting(
        "image_pull_registry",
        "ROLLOUT_IMAGE_PULL_REGISTRY",
        "--image-pull-registry",
        "the same registry as the cluster's nodes reach it, when that differs (kind: "
        "localhost:5001) (default: the image registry)",
        metavar="HOST",
    ),
    Setting(
        "image_registry_plain_http",
        "ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP",
        "--image-registry-plain-http",
        "true: reach the registry over plain HTTP, without TLS (a local registry) (default: false)",
        boolean,
        "BOOL",
    ),
    Setting(
        "image_push_secret",
        "ROLLOUT_IMAGE_PUSH_SECRET",
        "--image-push-secret",
        "kubernetes.io/dockerconfigjson Secret that build Pods push with; it must exist in each "
        "namespace where jobs build images (default: push without credentials)",
        metavar="SECRET",
    ),
    Setting(
        "image_pull_secret",
        "ROLLOUT_IMAGE_PULL_SECRET",
        "--image-pull-secret",
        "Secret added to the imagePullSecrets of trial Pods that run a built image (default: none)",
        metavar="SECRET",
    ),
    Setting(
        "image_registry_config",
        "ROLLOUT_IMAGE_REGISTRY_CONFIG",
        "--image-registry-config",
        "the operator's own registry credentials: a .dockerconfigjson file (the push Secret, "
        "mounted), used to look images up (default: anonymous)",
        metavar="FILE",
    ),
    Setting(
        "builder",
        "ROLLOUT_BUILDER",
        "--builder",
        "buildkit (rootless, the default) or buildah",
        _builder,
        "BUILDER",
    ),
    Setting(
        "builder_image",
        "ROLLOUT_BUILDER_IMAGE",
        "--builder-image",
        "the builder's image (default: a pinned release of the chosen builder)",
        metavar="IMAGE",
    ),
    Setting(
        "build_platform",
        "ROLLOUT_BUILD_PLATFORM",
        "--build-platform",
        "platform images are built for (default: linux/amd64)",
        metavar="OS/ARCH",
    ),
    Setting(
        "build_poll_sec",
        "ROLLOUT_BUILD_POLL_SEC",
        "--build-poll-sec",
        "seconds between two looks at a running build Pod (default: 2)",
        seconds,
        "SECONDS",
    ),
)
"""In-cluster image builds (`rollout.controller.builds`)."""

STORAGE_SETTINGS: tuple[Setting, ...] = (
    BUCKET.but(help="default bucket for RolloutJobs without spec.storage"),
    PREFIX.but(help="key prefix in the default bucket"),
    ENDPOINT.but(help="S3 endpoint URL (default: AWS S3)"),
    REGION.but(help="region of the default bucket"),
    PATH_STYLE.but(help="true/false: path-style addressing (MinIO)"),
    CREDENTIALS_DIR.but(help="directory of the operator's own mounted storage credentials Secret"),
)
"""The operator's default storage and its own credentials (`OperatorConfig.storage`)."""

SETTINGS = OPERATOR_SETTINGS + BUILD_SETTINGS + STORAGE_SETTINGS
"""Every setting of the operator, in the order of `rollout-operator --help`."""
