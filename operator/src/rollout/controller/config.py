"""The operator's settings: environment variables set by the Helm chart, or command-line flags.

The variables are the contract with the Helm chart (its deployment template sets them, and
tests/unit/test_chart.py feeds the rendered environment to `OperatorConfig.from_env`); the README's
"Chart values" section lists them. Every variable has a flag of the same meaning; a flag that is
given wins over its variable.
Empty values count as unset, except ROLLOUT_PEERING, where "" means "no peering" (standalone).

Bad values raise `InvalidInput`, one `Problem` per bad value, each naming the variable (file
"environment") or the flag (file "command line") at fault.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rollout.api.errors import InvalidInput, Problem
from rollout.api.job_settings import LogLevel
from rollout.api.resources import PodOverrides
from rollout.storage import StorageSettings
from rollout.storage.settings import (
    ENV_BUCKET,
    ENV_CREDENTIALS_DIR,
    ENV_ENDPOINT,
    ENV_PATH_STYLE,
    ENV_PREFIX,
    ENV_REGION,
)

ENVIRONMENT = "environment"
COMMAND_LINE = "command line"

ENV_NAMESPACES = "ROLLOUT_NAMESPACES"
ENV_RUNNER_IMAGE = "ROLLOUT_RUNNER_IMAGE"
ENV_RUNNER_IMAGE_PULL_POLICY = "ROLLOUT_RUNNER_IMAGE_PULL_POLICY"
ENV_STORAGE_CREDENTIALS_SECRET = "ROLLOUT_STORAGE_CREDENTIALS_SECRET"  # noqa: S105 - a name
ENV_TRIAL_SERVICE_ACCOUNT = "ROLLOUT_TRIAL_SERVICE_ACCOUNT"
ENV_PEERING = "ROLLOUT_PEERING"
ENV_CLUSTERWIDE_PEERING = "ROLLOUT_CLUSTERWIDE_PEERING"
ENV_METRICS_PORT = "ROLLOUT_METRICS_PORT"
ENV_HEALTH_PORT = "ROLLOUT_HEALTH_PORT"
ENV_WORKER_LIMIT = "ROLLOUT_WORKER_LIMIT"
ENV_LOG_LEVEL = "ROLLOUT_LOG_LEVEL"
ENV_DEFAULT_POD_OVERRIDES = "ROLLOUT_DEFAULT_POD_OVERRIDES"
ENV_UNSCHEDULABLE_GRACE_SEC = "ROLLOUT_UNSCHEDULABLE_GRACE_SEC"
ENV_IMAGE_PULL_GRACE_SEC = "ROLLOUT_IMAGE_PULL_GRACE_SEC"
ENV_STATUS_INTERVAL_SEC = "ROLLOUT_STATUS_INTERVAL_SEC"
ENV_POD_TERMINATION_GRACE_SEC = "ROLLOUT_POD_TERMINATION_GRACE_SEC"

DEFAULT_PEERING = "rollout-operator"
STORAGE_VARIABLES = (ENV_PREFIX, ENV_ENDPOINT, ENV_REGION)
"""Variables that make no sense without a bucket (the chart always sets the path style)."""

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
PULL_POLICIES: tuple[PullPolicy, ...] = ("Always", "IfNotPresent", "Never")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class OperatorConfig(BaseModel):
    """Everything the operator process is configured with (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty: the whole cluster."
    )
    runner_image: str = Field(
        min_length=1, description="Runner image for RolloutJobs without spec.runnerImage."
    )
    runner_image_pull_policy: PullPolicy = Field(
        "IfNotPresent", description="imagePullPolicy of the runner container."
    )
    storage: StorageSettings | None = Field(
        None,
        description="Default object storage for RolloutJobs without spec.storage; None: every "
        "RolloutJob must name its own. Holds the operator's own credentials, if any.",
    )
    storage_credentials_secret: str | None = Field(
        None, description="Secret that trial Pods mount for storage credentials."
    )
    trial_service_account: str | None = Field(
        None, description="serviceAccountName of trial Pods; None: the namespace's default."
    )
    peering_name: str | None = Field(
        DEFAULT_PEERING, description="kopf peering name; None: standalone, no peering."
    )
    clusterwide_peering: bool = Field(
        True,
        description="ClusterKopfPeering (whole cluster) rather than namespaced KopfPeering; "
        "derived from `namespaces` when not given.",
    )
    metrics_port: int = Field(9090, ge=1, le=65535, description="Prometheus metrics port.")
    health_port: int = Field(8080, ge=1, le=65535, description="Port of /healthz.")
    worker_limit: int = Field(
        200,
        ge=1,
        description=(
            "kopf's worker limit: objects handled at once. Each trial, Pod and job holds a "
            "worker while its events are processed, so at scale a small limit throttles the "
            "watches."
        ),
    )
    log_level: LogLevel = Field(LogLevel.INFO, description="debug, info, warning or error.")
    default_pod_overrides: PodOverrides | None = Field(
        None, description="Trial Pod overrides where a RolloutJob's spec.pod sets nothing."
    )
    unschedulable_grace_sec: float = Field(
        600.0,
        ge=0,
        allow_inf_nan=False,
        description="How long a trial Pod may stay Unschedulable before the trial fails.",
    )
    image_pull_grace_sec: float = Field(
        120.0,
        ge=0,
        allow_inf_nan=False,
        description="How long an image may fail to pull (ErrImagePull, ImagePullBackOff) before "
        "the trial fails; InvalidImageName fails at once.",
    )
    status_interval_sec: float = Field(
        2.0,
        ge=0,
        allow_inf_nan=False,
        description="Least seconds between two status patches of one RolloutJob.",
    )
    pod_termination_grace_sec: int = Field(
        10, ge=0, description="terminationGracePeriodSeconds of trial Pods."
    )

    @model_validator(mode="before")
    @classmethod
    def _derive_clusterwide_peering(cls, data: Any) -> Any:
        # Watching the whole cluster goes with a cluster-wide peering object, unless told.
        if isinstance(data, dict) and data.get("clusterwide_peering") is None:
            # Absent or None: derived. The field's default only satisfies type checkers.
            data = {**data, "clusterwide_peering": not data.get("namespaces")}
        return data

    @property
    def clusterwide(self) -> bool:
        """Whether the operator watches the whole cluster."""
        return not self.namespaces

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorConfig:
        """Read the settings from ROLLOUT_* variables (the chart's contract).

        Raises InvalidInput with one Problem per bad or missing variable, each naming it.
        """
        env = os.environ if environ is None else environ
        return _read(env, {})


# --- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    """One setting: its variable, its flag, the model field and how its text is parsed."""

    variable: str
    flag: str
    field: str
    parse: Callable[[str], Any]
    help: str
    metavar: str = "VALUE"
    empty_is_a_value: bool = False


def _namespaces(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _boolean(text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ValueError(f"{text!r} is not true or false")


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"{text!r} must be a finite number of seconds, 0 or more")
    return value


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


SETTINGS: tuple[_Setting, ...] = (
    _Setting(
        ENV_NAMESPACES,
        "--namespace",
        "namespaces",
        _namespaces,
        "namespace to watch (repeat, or separate with commas); none: the whole cluster",
        "NAMESPACE",
    ),
    _Setting(
        ENV_RUNNER_IMAGE,
        "--runner-image",
        "runner_image",
        str,
        "runner image for RolloutJobs without spec.runnerImage (required)",
        "IMAGE",
    ),
    _Setting(
        ENV_RUNNER_IMAGE_PULL_POLICY,
        "--runner-image-pull-policy",
        "runner_image_pull_policy",
        _pull_policy,
        "imagePullPolicy of the runner container (default: IfNotPresent)",
        "POLICY",
    ),
    _Setting(
        ENV_STORAGE_CREDENTIALS_SECRET,
        "--storage-credentials-secret",
        "storage_credentials_secret",
        str,
        "Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY that trial Pods mount",
        "SECRET",
    ),
    _Setting(
        ENV_TRIAL_SERVICE_ACCOUNT,
        "--trial-service-account",
        "trial_service_account",
        str,
        "serviceAccountName of trial Pods (default: the namespace's default)",
        "NAME",
    ),
    _Setting(
        ENV_PEERING,
        "--peering",
        "peering_name",
        _peering,
        f'kopf peering name; "" for standalone (default: {DEFAULT_PEERING})',
        "NAME",
        empty_is_a_value=True,
    ),
    _Setting(
        ENV_CLUSTERWIDE_PEERING,
        "--clusterwide-peering",
        "clusterwide_peering",
        _boolean,
        "true: ClusterKopfPeering; false: namespaced KopfPeering (default: true when watching "
        "the whole cluster)",
        "BOOL",
    ),
    _Setting(
        ENV_METRICS_PORT,
        "--metrics-port",
        "metrics_port",
        _integer,
        "Prometheus metrics port, path /metrics (default: 9090)",
        "PORT",
    ),
    _Setting(
        ENV_HEALTH_PORT,
        "--health-port",
        "health_port",
        _integer,
        "liveness/readiness port, path /healthz (default: 8080)",
        "PORT",
    ),
    _Setting(
        ENV_WORKER_LIMIT,
        "--worker-limit",
        "worker_limit",
        _integer,
        "kopf worker limit: handlers running at once (default: 50)",
        "N",
    ),
    _Setting(
        ENV_LOG_LEVEL,
        "--log-level",
        "log_level",
        _log_level,
        "debug, info, warning or error (default: info)",
        "LEVEL",
    ),
    _Setting(
        ENV_DEFAULT_POD_OVERRIDES,
        "--default-pod-overrides",
        "default_pod_overrides",
        _pod_overrides,
        "JSON of default trial Pod overrides (nodeSelector, tolerations, runtimeClassName, "
        "priorityClassName, imagePullSecrets); a RolloutJob's spec.pod wins field by field",
        "JSON",
    ),
    _Setting(
        ENV_UNSCHEDULABLE_GRACE_SEC,
        "--unschedulable-grace-sec",
        "unschedulable_grace_sec",
        _seconds,
        "how long a trial Pod may be Unschedulable before the trial fails (default: 600)",
        "SECONDS",
    ),
    _Setting(
        ENV_IMAGE_PULL_GRACE_SEC,
        "--image-pull-grace-sec",
        "image_pull_grace_sec",
        _seconds,
        "how long an image may fail to pull before the trial fails (default: 120)",
        "SECONDS",
    ),
    _Setting(
        ENV_STATUS_INTERVAL_SEC,
        "--status-interval-sec",
        "status_interval_sec",
        _seconds,
        "least seconds between two status patches of one RolloutJob (default: 2)",
        "SECONDS",
    ),
    _Setting(
        ENV_POD_TERMINATION_GRACE_SEC,
        "--pod-termination-grace-sec",
        "pod_termination_grace_sec",
        _integer,
        "terminationGracePeriodSeconds of trial Pods (default: 10)",
        "SECONDS",
    ),
)

# The storage variables belong to rollout.storage; these are their flags.
STORAGE_FLAGS: tuple[tuple[str, str, str], ...] = (
    (ENV_BUCKET, "--storage-bucket", "default bucket for RolloutJobs without spec.storage"),
    (ENV_PREFIX, "--storage-prefix", "key prefix in the default bucket"),
    (ENV_ENDPOINT, "--storage-endpoint", "S3 endpoint URL (default: AWS S3)"),
    (ENV_REGION, "--storage-region", "region of the default bucket"),
    (ENV_PATH_STYLE, "--storage-path-style", "true/false: path-style addressing (MinIO)"),
    (
        ENV_CREDENTIALS_DIR,
        "--storage-credentials-dir",
        "directory of the operator's own mounted storage credentials Secret",
    ),
)


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a flag for every setting; each flag defaults to None, i.e. "use the variable"."""
    for setting in SETTINGS:
        kwargs: dict[str, Any] = {
            "dest": _dest(setting.flag),
            "metavar": setting.metavar,
            "default": None,
            "help": f"{setting.help} [${setting.variable}]",
        }
        if setting.variable == ENV_NAMESPACES:
            kwargs["action"] = "append"
        parser.add_argument(setting.flag, **kwargs)
    for variable, flag, help_text in STORAGE_FLAGS:
        parser.add_argument(flag, dest=_dest(flag), default=None, help=f"{help_text} [${variable}]")


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> OperatorConfig:
    """The settings from parsed flags (see `add_arguments`) over the variables of `environ`.

    A problem with a value that came from a flag names the flag (file "command line").
    """
    env = dict(os.environ if environ is None else environ)
    given: dict[str, str] = {}
    for setting in SETTINGS:
        value = getattr(args, _dest(setting.flag), None)
        if value is None:
            continue
        if isinstance(value, list):
            value = ",".join(value)
        env[setting.variable] = value
        given[setting.variable] = setting.flag
    for variable, flag, _help in STORAGE_FLAGS:
        value = getattr(args, _dest(flag), None)
        if value is not None:
            env[variable] = value
            given[variable] = flag
    return _read(env, given)


def _read(env: Mapping[str, str], flags: Mapping[str, str]) -> OperatorConfig:
    """Parse every setting of `env`; `flags` maps variables whose value came from a flag."""

    def problem(variable: str | None, message: str) -> Problem:
        if variable is not None and variable in flags:
            return Problem(COMMAND_LINE, flags[variable], message)
        return Problem(ENVIRONMENT, variable, message)

    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.variable not in env:
            continue
        text = env[setting.variable].strip()
        if not text and not setting.empty_is_a_value:
            continue
        try:
            values[setting.field] = setting.parse(text)
        except ValueError as err:
            problems.append(problem(setting.variable, str(err)))
    if "runner_image" not in values:
        problems.append(problem(ENV_RUNNER_IMAGE, "is required: the runner image of trial Pods"))
    try:
        values["storage"] = _storage(env)
    except InvalidInput as err:
        for p in err.problems:
            problems.append(problem(p.field, p.message) if p.file == ENVIRONMENT else p)
    # Range checks too, for the values that parsed, so that one run reports every problem.
    variable_of = {s.field: s.variable for s in SETTINGS}
    config: OperatorConfig | None = None
    try:
        config = OperatorConfig(**values)
    except ValidationError as err:
        for e in err.errors(include_url=False):
            if e["type"] != "missing":  # the one required setting is reported above
                field = str(e["loc"][0]) if e["loc"] else ""
                problems.append(
                    problem(variable_of.get(field), e["msg"].removeprefix("Value error, "))
                )
    if problems:
        raise InvalidInput(problems)
    assert config is not None  # no problem means it validated
    return config


def _storage(env: Mapping[str, str]) -> StorageSettings | None:
    """The default storage, or None when no bucket is set (RolloutJobs then name their own)."""
    if env.get(ENV_BUCKET, "").strip():
        return StorageSettings.from_env(env)
    stray = [name for name in STORAGE_VARIABLES if env.get(name, "").strip()]
    if stray:
        raise InvalidInput(
            [
                Problem(
                    ENVIRONMENT,
                    ENV_BUCKET,
                    f"is required when {', '.join(stray)} is set: the default bucket",
                )
            ]
        )
    return None
