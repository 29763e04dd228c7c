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
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from rollout.api.errors import InvalidInput, Problem
from rollout.api.resources import StorageSpec
from rollout.api.storage import StorageLocation
from rollout.settings import (
    COMMAND_LINE,
    RUNNER_IMAGE,
    ConfigFileValues,
    Origin,
    Resolved,
    Setting,
)
from rollout.settings import resolve as resolve_settings
from rollout.storage import ObjectStore, StorageCredentials, credentials_from_env
from rollout.storage.credentials import AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
from rollout.storage.settings import (
    BUCKET,
    CREDENTIALS_SECRET,
    ENDPOINT,
    PATH_STYLE,
    PREFIX,
    REGION,
)

ENV_CONFIG = "ROLLOUT_CONFIG"

CLUSTER_ENDPOINT = Setting(
    "cluster_endpoint",
    "ROLLOUT_STORAGE_CLUSTER_ENDPOINT",
    "--storage-cluster-endpoint",
    "the endpoint trial Pods use, when it differs from --storage-endpoint",
    metavar="URL",
    key="storage.clusterEndpoint",
)
ENV_CLUSTER_ENDPOINT = CLUSTER_ENDPOINT.variable

STORAGE_SETTINGS: tuple[Setting, ...] = (
    BUCKET.but(help="bucket for datasets and results", metavar="NAME"),
    ENDPOINT.but(help="S3 endpoint (MinIO, GCS, ...)", metavar="URL"),
    CLUSTER_ENDPOINT,
    PREFIX.but(help="key prefix in the bucket", metavar="PREFIX"),
    REGION.but(help="region of the bucket", metavar="REGION"),
    PATH_STYLE.but(help="path-style addressing (MinIO needs it)"),
    CREDENTIALS_SECRET.but(
        help="Secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) that trial Pods use for storage",
        metavar="SECRET",
    ),
)
"""The CLI's storage settings, in the order of its --help."""

CLI_RUNNER_IMAGE = RUNNER_IMAGE.but(
    help=f"runner sidecar image ({RUNNER_IMAGE.variable}; default: the operator's)"
)
SETTINGS = (*STORAGE_SETTINGS, CLI_RUNNER_IMAGE)


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
    origins: dict[str, Origin] = field(default_factory=dict)

    @property
    def has_storage(self) -> bool:
        return self.bucket is not None

    def require_bucket(self) -> str:
        """The bucket, or an error that says every way to give one."""
        if self.bucket is None:
            where = f" or `storage.bucket` in {self.config_file}" if self.config_file else ""
            raise InvalidInput.one(
                COMMAND_LINE,
                BUCKET.flag,
                f"no object storage bucket is configured: pass {BUCKET.flag}, set "
                f"{BUCKET.variable}{where}",
            )
        return self.bucket

    def storage_location(self) -> StorageLocation:
        """Where the CLI itself reaches storage (its own endpoint, not the Pods')."""
        values: dict[str, Any] = {"bucket": self.require_bucket()}
        for name in ("prefix", "endpoint", "region", "path_style"):
            if (value := getattr(self, name)) is not None:
                values[name] = value
        try:
            return StorageLocation(**values)
        except ValidationError as err:
            raise InvalidInput(self._problems(err)) from None

    def storage_credentials(self, environ: Mapping[str, str]) -> StorageCredentials | None:
        """The CLI's credentials from the AWS variables when both key and secret are set (so
        that messages can be scrubbed of them), else None: boto3's default chain, which reads
        the same variables itself, then profiles, SSO and instance roles."""
        if not all(
            environ.get(name, "").strip() for name in (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
        ):
            return None
        return credentials_from_env(environ)

    def object_store(self, environ: Mapping[str, str]) -> ObjectStore:
        """The CLI's way to storage: `storage_location` with `storage_credentials`."""
        return ObjectStore(self.storage_location(), self.storage_credentials(environ))

    def storage_spec(self) -> StorageSpec | None:
        """The RolloutJob's spec.storage, or None when no bucket is configured (the operator's
        default storage applies then)."""
        if self.bucket is None:
            return None
        return StorageSpec(
            bucket=self.bucket,
            prefix=self.prefix or "",
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
            f"cannot reach; give the address Pods use with {CLUSTER_ENDPOINT.flag} "
            f"({CLUSTER_ENDPOINT.variable}, or {CLUSTER_ENDPOINT.key} in the config file)"
        )

    def _problems(self, err: ValidationError) -> list[Problem]:
        resolved = Resolved({s.name: s for s in SETTINGS}, origins=dict(self.origins))
        resolved.report_invalid(err)
        return resolved.problems


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """The storage and runner image flags (see the module docstring for the order)."""
    group = parser.add_argument_group(
        "object storage",
        f"Flags win over ROLLOUT_STORAGE_* variables, which win over ${ENV_CONFIG} "
        "(default ~/.config/rollout/config.yaml). Credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or boto3's default chain.",
    )
    for setting in STORAGE_SETTINGS:
        if setting.name == PATH_STYLE.name:  # --storage-path-style / --no-storage-path-style
            group.add_argument(
                setting.flag,
                dest=setting.dest,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=setting.help,
            )
        else:
            setting.add_flag(group, show_variable=False)


def add_runner_image_argument(parser: argparse.ArgumentParser) -> None:
    CLI_RUNNER_IMAGE.add_flag(parser, show_variable=False)


def resolve(args: argparse.Namespace, environ: Mapping[str, str]) -> CliSettings:
    """Merge flags, environment and config file; invalid values are reported where written."""
    path, named = config_path(environ)
    config = load_config(path, required=named)
    resolved = resolve_settings(
        SETTINGS, environ, args, ConfigFileValues(str(path), _file_values(config))
    )
    resolved.raise_problems()
    settings = CliSettings(**resolved.values, config_file=path, origins=resolved.origins)
    _check(settings)
    return settings


def _check(settings: CliSettings) -> None:
    """Report bad values at once, with the location's own rules, wherever they came from."""
    values: dict[str, Any] = {"bucket": settings.bucket or "placeholder"}
    for name in ("endpoint", "prefix"):
        if (value := getattr(settings, name)) is not None:
            values[name] = value
    problems: list[Problem] = []
    try:
        StorageLocation(**values)
    except ValidationError as err:
        problems.extend(settings._problems(err))
    if settings.cluster_endpoint is not None:
        try:
            StorageLocation(bucket="placeholder", endpoint=settings.cluster_endpoint)
        except ValidationError as err:
            file, where = settings.origins[CLUSTER_ENDPOINT.name]
            message = err.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
            problems.append(Problem(file, where, message))
    if problems:
        raise InvalidInput(problems)
