"""The CLI's settings: object storage and the runner image, from flags, environment or a file.

Each setting is taken from the first of these that gives it (empty values count as unset):

1. a flag: `--storage-bucket`, `--storage-endpoint`, `--storage-prefix`, `--storage-region`,
   `--storage-path-style`/`--no-storage-path-style`, `--storage-credentials-secret`,
   `--storage-cluster-endpoint`, `--runner-image`;
2. an environment variable: ROLLOUT_STORAGE_BUCKET, _ENDPOINT, _PREFIX, _REGION, _PATH_STYLE,
   _CREDENTIALS_SECRET, _CLUSTER_ENDPOINT, and ROLLOUT_RUNNER_IMAGE (the region also falls back
   to AWS_REGION and AWS_DEFAULT_REGION, as boto3 does);
3. the config file, `$ROLLOUT_CONFIG` or else `~/.config/rollout/config.yaml` (honouring
   XDG_CONFIG_HOME), whose `storage` keys are the Helm chart's `storage` values::

       storage:
         bucket: rollout
         endpoint: http://127.0.0.1:9000      # how the CLI reaches storage
         clusterEndpoint: http://rollout-operator-minio.rollout-system:9000
         prefix: ""
         region: us-east-1
         pathStyle: true
         credentialsSecret: rollout-storage   # or credentials: {existingSecret: ...}
       runnerImage: ghcr.io/example/rollout-runner:0.1.0

The same settings give the RolloutJob's `spec.storage` (bucket, prefix, endpoint, region,
pathStyle, credentialsSecret). `clusterEndpoint` is for when the CLI and the trial Pods reach
storage at different addresses (a port-forward to an in-cluster MinIO): Pods get it as
spec.storage.endpoint, the CLI uses `endpoint`. The CLI's own credentials are never in these
settings: they come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or
boto3's default chain (profiles, SSO, instance roles).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic.alias_generators import to_camel

from rollout.api.errors import InvalidInput, Problem
from rollout.api.resources import StorageSpec
from rollout.storage import (
    ENV_BUCKET,
    ENV_ENDPOINT,
    ENV_PATH_STYLE,
    ENV_PREFIX,
    ENV_REGION,
    StorageSettings,
)

ENV_CONFIG = "ROLLOUT_CONFIG"
ENV_CREDENTIALS_SECRET = "ROLLOUT_STORAGE_CREDENTIALS_SECRET"  # noqa: S105 - a variable name
ENV_CLUSTER_ENDPOINT = "ROLLOUT_STORAGE_CLUSTER_ENDPOINT"
ENV_RUNNER_IMAGE = "ROLLOUT_RUNNER_IMAGE"
COMMAND_LINE = "command line"
ENVIRONMENT = "environment"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

# setting -> (flag, environment variable, config file key)
_SOURCES: dict[str, tuple[str, str, str]] = {
    "bucket": ("--storage-bucket", ENV_BUCKET, "storage.bucket"),
    "endpoint": ("--storage-endpoint", ENV_ENDPOINT, "storage.endpoint"),
    "cluster_endpoint": (
        "--storage-cluster-endpoint",
        ENV_CLUSTER_ENDPOINT,
        "storage.clusterEndpoint",
    ),
    "prefix": ("--storage-prefix", ENV_PREFIX, "storage.prefix"),
    "region": ("--storage-region", ENV_REGION, "storage.region"),
    "path_style": ("--storage-path-style", ENV_PATH_STYLE, "storage.pathStyle"),
    "credentials_secret": (
        "--storage-credentials-secret",
        ENV_CREDENTIALS_SECRET,
        "storage.credentialsSecret",
    ),
    "runner_image": ("--runner-image", ENV_RUNNER_IMAGE, "runnerImage"),
}


# --- the config file ------------------------------------------------------------------------------


class _FileSection(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False)


class ChartCredentials(_FileSection):
    """`storage.credentials`, as in the Helm values; only the Secret's name is used here."""

    existing_secret: str | None = Field(None, description="Secret with the AWS_* keys.")


class StorageSection(_FileSection):
    """`storage:` of the config file: the Helm chart's `storage` keys, plus clusterEndpoint."""

    bucket: str | None = None
    endpoint: str | None = None
    cluster_endpoint: str | None = None
    prefix: str | None = None
    region: str | None = None
    path_style: bool | None = Field(None, strict=True)
    credentials_secret: str | None = None
    credentials: ChartCredentials | None = None


class ConfigFile(_FileSection):
    """The whole config file."""

    storage: StorageSection = Field(default_factory=StorageSection)
    runner_image: str | None = None


def config_path(environ: Mapping[str, str]) -> tuple[Path, bool]:
    """The config file's path, and whether the user named it ($ROLLOUT_CONFIG)."""
    if named := environ.get(ENV_CONFIG, "").strip():
        return Path(named).expanduser(), True
    base = environ.get("XDG_CONFIG_HOME", "").strip() or os.path.join(
        environ.get("HOME", "") or str(Path.home()), ".config"
    )
    return Path(base) / "rollout" / "config.yaml", False


def load_config(path: Path, *, required: bool = False) -> ConfigFile:
    """Read the config file; a missing default file is an empty config, a missing named one an
    error. Problems name the file and the key."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise InvalidInput.one(path, None, f"no such file (named by ${ENV_CONFIG})") from None
        return ConfigFile()
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidInput.one(path, None, f"invalid YAML: {err}") from None
    if data is None:
        return ConfigFile()
    if not isinstance(data, dict):
        raise InvalidInput.one(path, None, "must be a mapping with a `storage:` section")
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as err:
        problems = []
        for error in err.errors(include_url=False):
            where = ".".join(str(part) for part in error["loc"]) or None
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown key"
            problems.append(Problem(str(path), where, message))
        raise InvalidInput(problems) from None


def _file_values(config: ConfigFile) -> dict[str, Any]:
    storage = config.storage
    secret = storage.credentials_secret
    if secret is None and storage.credentials is not None:
        secret = storage.credentials.existing_secret
    values = {
        "bucket": storage.bucket,
        "endpoint": storage.endpoint,
        "cluster_endpoint": storage.cluster_endpoint,
        "prefix": storage.prefix,
        "region": storage.region,
        "path_style": storage.path_style,
        "credentials_secret": secret,
        "runner_image": config.runner_image,
    }
    return {k: v for k, v in values.items() if v is not None and v != ""}


# --- resolution -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliSettings:
    """The resolved settings; None where nothing gave a value. `origins` says, for each value,
    where it came from as (file, field), so that a bad value is reported where it was written."""

    bucket: str | None = None
    endpoint: str | None = None
    cluster_endpoint: str | None = None
    prefix: str | None = None
    region: str | None = None
    path_style: bool | None = None
    credentials_secret: str | None = None
    runner_image: str | None = None
    config_file: Path | None = None
    origins: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def has_storage(self) -> bool:
        return self.bucket is not None

    def require_bucket(self) -> str:
        """The bucket, or an error that says every way to give one."""
        if self.bucket is None:
            where = f" or `storage.bucket` in {self.config_file}" if self.config_file else ""
            raise InvalidInput.one(
                COMMAND_LINE,
                "--storage-bucket",
                f"no object storage bucket is configured: pass --storage-bucket, set "
                f"{ENV_BUCKET}{where}",
            )
        return self.bucket

    def storage_settings(self, environ: Mapping[str, str]) -> StorageSettings:
        """How the CLI itself reaches storage; credentials from the AWS variables when both are
        set (so that messages can be scrubbed of them), else boto3's default chain."""
        values: dict[str, Any] = {"bucket": self.require_bucket()}
        if self.prefix is not None:
            values["prefix"] = self.prefix
        if self.endpoint is not None:
            values["endpoint_url"] = self.endpoint
        if self.region is not None:
            values["region"] = self.region
        if self.path_style is not None:
            values["path_style"] = self.path_style
        key_id = environ.get("AWS_ACCESS_KEY_ID", "").strip()
        secret = environ.get("AWS_SECRET_ACCESS_KEY", "").strip()
        if key_id and secret:
            values["access_key_id"] = SecretStr(key_id)
            values["secret_access_key"] = SecretStr(secret)
            if token := environ.get("AWS_SESSION_TOKEN", "").strip():
                values["session_token"] = SecretStr(token)
        try:
            return StorageSettings(**values)
        except ValidationError as err:
            raise InvalidInput(self._problems(err)) from None

    def storage_spec(self) -> StorageSpec | None:
        """The RolloutJob's spec.storage, or None when no bucket is configured (the operator's
        default storage applies then)."""
        if self.bucket is None:
            return None
        return StorageSpec(
            bucket=self.bucket,
            prefix=(self.prefix or "").strip("/"),
            endpoint=self.cluster_endpoint or self.endpoint,
            region=self.region,
            path_style=bool(self.path_style),
            credentials_secret=self.credentials_secret,
        )

    def loopback_warning(self) -> str | None:
        """A warning when trial Pods would be told to use a loopback endpoint they cannot reach."""
        if self.cluster_endpoint is not None or self.endpoint is None:
            return None
        host = urllib.parse.urlsplit(self.endpoint).hostname or ""
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return None
        return (
            f"the storage endpoint {self.endpoint} is a loopback address, which trial Pods "
            "cannot reach; give the address Pods use with --storage-cluster-endpoint "
            f"({ENV_CLUSTER_ENDPOINT}, or storage.clusterEndpoint in the config file)"
        )

    def _problems(self, err: ValidationError) -> list[Problem]:
        fields = {"endpoint_url": "endpoint"}
        problems = []
        for error in err.errors(include_url=False):
            name = str(error["loc"][0]) if error["loc"] else ""
            setting = fields.get(name, name)
            file, where = self.origins.get(setting, (COMMAND_LINE, setting))
            problems.append(Problem(file, where, error["msg"].removeprefix("Value error, ")))
        return problems


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """The storage and runner image flags (see the module docstring for the order)."""
    group = parser.add_argument_group(
        "object storage",
        f"Flags win over ROLLOUT_STORAGE_* variables, which win over ${ENV_CONFIG} "
        "(default ~/.config/rollout/config.yaml). Credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or boto3's default chain.",
    )
    group.add_argument("--storage-bucket", metavar="NAME", help="bucket for datasets and results")
    group.add_argument("--storage-endpoint", metavar="URL", help="S3 endpoint (MinIO, GCS, ...)")
    group.add_argument(
        "--storage-cluster-endpoint",
        metavar="URL",
        help="the endpoint trial Pods use, when it differs from --storage-endpoint",
    )
    group.add_argument("--storage-prefix", metavar="PREFIX", help="key prefix in the bucket")
    group.add_argument("--storage-region", metavar="REGION", help="region of the bucket")
    group.add_argument(
        "--storage-path-style",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="path-style addressing (MinIO needs it)",
    )
    group.add_argument(
        "--storage-credentials-secret",
        metavar="SECRET",
        help="Secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) that trial Pods use for storage",
    )


def add_runner_image_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runner-image",
        metavar="IMAGE",
        help=f"runner sidecar image ({ENV_RUNNER_IMAGE}; default: the operator's)",
    )


def resolve(args: argparse.Namespace, environ: Mapping[str, str]) -> CliSettings:
    """Merge flags, environment and config file; invalid values are reported where written."""
    path, named = config_path(environ)
    config = load_config(path, required=named)
    from_file = _file_values(config)
    values: dict[str, Any] = {}
    origins: dict[str, tuple[str, str]] = {}
    problems: list[Problem] = []
    for setting, (flag, variable, key) in _SOURCES.items():
        flag_value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        env_value = environ.get(variable, "").strip()
        if flag_value is not None and flag_value != "":
            values[setting], origins[setting] = flag_value, (COMMAND_LINE, flag)
        elif env_value:
            origins[setting] = (ENVIRONMENT, variable)
            if setting == "path_style":
                parsed = _boolean(env_value)
                if parsed is None:
                    problems.append(Problem(ENVIRONMENT, variable, f"{env_value!r} is not a bool"))
                values[setting] = parsed
            else:
                values[setting] = env_value
        elif setting in from_file:
            values[setting], origins[setting] = from_file[setting], (str(path), key)
    if "region" not in values:
        for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            if region := environ.get(variable, "").strip():
                values["region"], origins["region"] = region, (ENVIRONMENT, variable)
                break
    if problems:
        raise InvalidInput(problems)
    settings = CliSettings(**values, config_file=path, origins=origins)
    _check(settings)
    return settings


def _boolean(text: str) -> bool | None:
    lowered = text.lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else None


def _check(settings: CliSettings) -> None:
    """Report bad values at once, with the storage module's own rules, wherever they came from."""
    values: dict[str, Any] = {"bucket": settings.bucket or "placeholder"}
    for name, setting in (("endpoint_url", "endpoint"), ("prefix", "prefix")):
        if (value := getattr(settings, setting)) is not None:
            values[name] = value
    problems: list[Problem] = []
    try:
        StorageSettings(**values)
    except ValidationError as err:
        problems.extend(settings._problems(err))
    if settings.cluster_endpoint is not None:
        try:
            StorageSettings(bucket="placeholder", endpoint_url=settings.cluster_endpoint)
        except ValidationError as err:
            file, where = settings.origins["cluster_endpoint"]
            message = err.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            problems.append(Problem(file, where, message))
    if problems:
        raise InvalidInput(problems)
