"""The CLI's settings: the cluster, object storage and the runner image, from flags, environment
or a file (`rollout login` writes the file).

Each setting is taken from the first of these that gives it (empty values count as unset):

1. a flag: `--storage-bucket`, `--storage-endpoint`, `--storage-prefix`, `--storage-region`,
   `--storage-path-style`/`--no-storage-path-style`, `--storage-credentials-secret`,
   `--storage-cluster-endpoint`, `--runner-image`, `--context`, `--namespace`;
2. an environment variable: ROLLOUT_STORAGE_BUCKET, _ENDPOINT, _PREFIX, _REGION, _PATH_STYLE,
   _CREDENTIALS_SECRET, _CLUSTER_ENDPOINT, and ROLLOUT_RUNNER_IMAGE (the region also falls back
   to AWS_REGION and AWS_DEFAULT_REGION, as boto3 does);
3. the config file, `$ROLLOUT_CONFIG` or else `~/.config/rollout/config.yaml` (honouring
   XDG_CONFIG_HOME), whose `storage` keys are the Helm chart's `storage` values::

       kube:                                  # where flags give nothing (rollout login)
         context: kind-rollout                # else the kubeconfig's current context
         namespace: evals                     # else the context's namespace
       storage:
         bucket: rollout
         endpoint: http://127.0.0.1:9000      # how the CLI reaches storage
         clusterEndpoint: http://rollout-operator-minio.rollout-system:9000
         prefix: ""
         region: us-east-1
         pathStyle: true
         credentialsSecret: rollout-storage   # or credentials: {existingSecret: ...}
         credentials:                         # the CLI's own (never the Pods'): rollout login
           accessKeyId: AKIA...
           secretAccessKey: ...
       runnerImage: ghcr.io/example/rollout-runner:0.1.0
       registry: ./registry.json              # rollout benchmarks' (rollout.cli.benchmarks)

The same settings give the RolloutJob's `spec.storage` (bucket, prefix, endpoint, region,
pathStyle, credentialsSecret). `clusterEndpoint` is for when the CLI and the trial Pods reach
storage at different addresses (a port-forward to an in-cluster MinIO): Pods get it as
spec.storage.endpoint, the CLI uses `endpoint`.

`kube.namespace` applies to the context it was chosen with: with `--context` naming another
one, that context's own namespace applies (`--namespace` always wins).

The CLI's own storage credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
AWS_SESSION_TOKEN) when both are set; else `storage.credentials.accessKeyId` and
`secretAccessKey` of the config file; else boto3's default chain (profiles, SSO, instance roles).
They are never printed, logged or written into a resource (trial Pods use the Secret that
`credentialsSecret` names), and a config file that holds them is refused while other users may
read it (`chmod 600` it; `rollout login` writes it so).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import stat
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from rollout.api.errors import InvalidInput, Problem
from rollout.api.resources import StorageSpec
from rollout.api.storage import StorageLocation
from rollout.settings import (
    COMMAND_LINE,
    ENVIRONMENT,
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
KUBE_KEY = "kube"
CREDENTIALS_KEY = "storage.credentials"

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


_Model = TypeVar("_Model", bound=_FileSection)


class ChartCredentials(_FileSection):
    """`storage.credentials`, as in the Helm values: the Secret trial Pods use, and the CLI's own
    access key (`rollout login` writes it; never given to a Pod or written into a resource)."""

    existing_secret: str | None = Field(None, description="Secret with the AWS_* keys.")
    access_key_id: SecretStr | None = Field(None, description="The CLI's own access key id.")
    secret_access_key: SecretStr | None = Field(None, description="Its secret access key.")

    @model_validator(mode="after")
    def _key_and_secret_go_together(self) -> ChartCredentials:
        if _given(self.access_key_id) != _given(self.secret_access_key):
            raise ValueError("accessKeyId and secretAccessKey go together: give both or neither")
        return self

    def cli_credentials(self) -> StorageCredentials | None:
        """The CLI's own credentials, when the file gives them."""
        if self.access_key_id is None or self.secret_access_key is None:
            return None
        if not _given(self.access_key_id):
            return None
        return StorageCredentials(
            access_key_id=self.access_key_id, secret_access_key=self.secret_access_key
        )


def _given(secret: SecretStr | None) -> bool:
    return secret is not None and bool(secret.get_secret_value().strip())


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


class KubeSection(_FileSection):
    """`kube:` of the config file: the context and namespace to use where flags give none."""

    context: str | None = Field(None, description="kubeconfig context; else its current one.")
    namespace: str | None = Field(None, description="Namespace; else the context's.")


class ConfigFile(_FileSection):
    """The whole config file. `kube` is checked where the cluster is chosen (`kube_defaults`),
    so that a command that needs no storage still reports a bad `kube` key, and one that needs
    both reports it once."""

    kube: dict[str, Any] | None = None
    storage: StorageSection = Field(default_factory=StorageSection)
    runner_image: str | None = None
    registry: Any = Field(
        None, description="`rollout benchmarks`' registry.json; read and checked there."
    )


def config_path(environ: Mapping[str, str]) -> tuple[Path, bool]:
    """The config file's path, and whether the user named it ($ROLLOUT_CONFIG)."""
    if named := environ.get(ENV_CONFIG, "").strip():
        return Path(named).expanduser(), True
    base = environ.get("XDG_CONFIG_HOME", "").strip() or os.path.join(
        environ.get("HOME", "") or str(Path.home()), ".config"
    )
    return Path(base) / "rollout" / "config.yaml", False


def _read_mapping(path: Path, *, required: bool = False) -> dict[str, Any]:
    """The file's YAML mapping ({} for a missing default file or an empty one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise InvalidInput.one(path, None, f"no such file (named by ${ENV_CONFIG})") from None
        return {}
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidInput.one(path, None, f"invalid YAML: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidInput.one(path, None, "must be a mapping with a `storage:` section")
    return data


def _validated(model: type[_Model], path: Path, data: Any, prefix: str = "") -> _Model:
    """`data` as `model`; problems name the file and the key (never the value: it may be a
    credential)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = []
        for error in err.errors(include_url=False):
            where = ".".join([*([prefix] if prefix else []), *(str(p) for p in error["loc"])])
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown key"
            problems.append(Problem(str(path), where or None, message))
        raise InvalidInput(problems) from None


def load_config(path: Path, *, required: bool = False) -> ConfigFile:
    """Read the config file; a missing default file is an empty config, a missing named one an
    error. Problems name the file and the key."""
    return _validated(ConfigFile, path, _read_mapping(path, required=required))


def exposed_mode(path: Path) -> int | None:
    """The file's permission bits when users other than its owner have any access to it, else
    None (also where there are no such bits to look at)."""
    if os.name != "posix":
        return None
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    return mode if mode & 0o077 else None


def refusal_of_exposed_credentials(path: Path, mode: int) -> Problem:
    return Problem(
        str(path),
        CREDENTIALS_KEY,
        f"holds storage credentials but other users may read it (mode {mode:04o}), so they are "
        f"not used: run `chmod 600 {path}` (rollout login writes it so)",
    )


@dataclass(frozen=True)
class LoadedConfig:
    """The config file as read: where it is, whether $ROLLOUT_CONFIG named it, what it says,
    and its permission bits when others may read it."""

    path: Path
    named: bool
    config: ConfigFile
    exposed_mode: int | None = None


def read_config(environ: Mapping[str, str]) -> LoadedConfig:
    """The config file of `environ` ($ROLLOUT_CONFIG, else the default path)."""
    path, named = config_path(environ)
    config = load_config(path, required=named)
    return LoadedConfig(path, named, config, exposed_mode(path))


@dataclass(frozen=True)
class KubeDefaults:
    """The config file's `kube:` values and the file they came from."""

    context: str | None = None
    namespace: str | None = None
    path: Path | None = None

    def namespace_for(self, context: str | None) -> str | None:
        """The file's namespace when the chosen context is the file's (or it names none)."""
        if self.namespace and (self.context is None or self.context == context):
            return self.namespace
        return None

    def source(self, key: str) -> str:
        return f"{KUBE_KEY}.{key} in {self.path}"


def kube_defaults(environ: Mapping[str, str], loaded: LoadedConfig | None = None) -> KubeDefaults:
    """The `kube:` section of the config file (or of `loaded`), checked."""
    if loaded is None:
        path, named = config_path(environ)
        data = _read_mapping(path, required=named).get(KUBE_KEY)
    else:
        path, data = loaded.path, loaded.config.kube
    if data is None:
        return KubeDefaults(path=path)
    section = _validated(KubeSection, path, data, prefix=KUBE_KEY)
    return KubeDefaults(
        context=(section.context or "").strip() or None,
        namespace=(section.namespace or "").strip() or None,
        path=path,
    )


# --- writing it (rollout login) -------------------------------------------------------------------


def merged_config(path: Path, updates: Mapping[str, Any]) -> tuple[dict[str, Any], ConfigFile]:
    """The config file at `path` with `updates` merged in (nested mappings in the file's shape;
    a None value removes the key), as YAML data and checked, without writing anything."""
    merged = _merge(_read_mapping(path), updates)
    config = _validated(ConfigFile, path, merged)
    if config.kube is not None:
        _validated(KubeSection, path, config.kube, prefix=KUBE_KEY)
    return merged, config


def save_config(path: Path, updates: Mapping[str, Any], *, private_directory: bool) -> Path:
    """Merge `updates` into the config file at `path` (`merged_config`) and write it atomically
    (a new file renamed over the old one), readable by its owner only (0600). Other keys stay as
    they were; YAML comments do not. Returns the file written (a symlink's target).

    Missing directories are made 0700; with `private_directory` (the default location, not one
    $ROLLOUT_CONFIG names) the file's own directory is made 0700 even when it exists.
    """
    target = Path(os.path.realpath(path))
    merged, _ = merged_config(target, updates)
    directory = target.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if private_directory and os.name == "posix":
        directory.chmod(0o700)
    text = yaml.safe_dump(merged, sort_keys=False, default_flow_style=False, allow_unicode=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:  # mkstemp made it 0600
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if os.name == "posix":
            os.chmod(temporary, 0o600)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return target


def _merge(base: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in updates.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        elif isinstance(value, Mapping):
            merged[key] = _merge({}, value)
        else:
            merged[key] = value
    return {key: value for key, value in merged.items() if value != {}}


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
    file_credentials: StorageCredentials | None = field(default=None, repr=False, compare=False)
    """The config file's `storage.credentials` key pair, when it gives one."""
    credentials_refused: Problem | None = None
    """Why the file's credentials may not be used (others may read the file), when they may not."""

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
        """The CLI's credentials: from the AWS variables when both key and secret are set (so
        that messages can be scrubbed of them), else the config file's key pair, else None:
        boto3's default chain, which reads the same variables itself, then profiles, SSO and
        instance roles. The file's pair is refused while others may read the file."""
        if _environment_gives_credentials(environ):
            return credentials_from_env(environ)
        if self.credentials_refused is not None:
            raise InvalidInput([self.credentials_refused])
        return self.file_credentials

    def credentials_source(self, environ: Mapping[str, str]) -> str:
        """Where `storage_credentials` takes them from, in words (never the values)."""
        if _environment_gives_credentials(environ):
            return f"{AWS_ACCESS_KEY_ID} and {AWS_SECRET_ACCESS_KEY} of the environment"
        if self.file_credentials is not None or self.credentials_refused is not None:
            return f"{CREDENTIALS_KEY} in {self.config_file}"
        return "boto3's default chain (AWS_PROFILE, ~/.aws/credentials, SSO, instance role)"

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
        "(default ~/.config/rollout/config.yaml; `rollout login` writes it). Credentials: "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the config file's "
        "storage.credentials, else boto3's default chain.",
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


def resolve(
    args: argparse.Namespace, environ: Mapping[str, str], *, loaded: LoadedConfig | None = None
) -> CliSettings:
    """Merge flags, environment and config file (`loaded`, else the one of `environ`); invalid
    values are reported where written."""
    if loaded is None:
        loaded = read_config(environ)
    path, file = loaded.path, loaded.config
    resolved = resolve_settings(
        SETTINGS, environ, args, ConfigFileValues(str(path), _file_values(file))
    )
    resolved.raise_problems()
    credentials = file.storage.credentials.cli_credentials() if file.storage.credentials else None
    refused = None
    if credentials is not None and loaded.exposed_mode is not None:
        refused = refusal_of_exposed_credentials(path, loaded.exposed_mode)
        credentials = None
    settings = CliSettings(
        **resolved.values,
        config_file=path,
        origins=resolved.origins,
        file_credentials=credentials,
        credentials_refused=refused,
    )
    _check(settings)
    return settings


def _environment_gives_credentials(environ: Mapping[str, str]) -> bool:
    return all(environ.get(name, "").strip() for name in (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY))


def origin_text(origin: Origin) -> str:
    """Where a value was written, in words: `--runner-image`, `$ROLLOUT_RUNNER_IMAGE`,
    `runnerImage in /home/me/.config/rollout/config.yaml`."""
    file, key = origin
    if not key:
        return file
    if file == COMMAND_LINE:
        return key
    if file == ENVIRONMENT:
        return f"${key}"
    return f"{key} in {file}"


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
