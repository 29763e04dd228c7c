"""The ROLLOUT_STORAGE_* settings: where a process's storage is, and reading them.

The variable names are the contract with the Helm chart and with the trial Pod the operator
renders (`location_env` writes what `storage_from_env` reads back); the package docstring
(`rollout.storage`) lists them for users. The operator and the CLI take the same settings, with
flags and (the CLI) config-file keys, through `rollout.settings` as well.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from rollout.api.errors import InvalidInput
from rollout.api.storage import DEFAULT_REGION, StorageLocation
from rollout.settings import Resolved, Setting, boolean, resolve
from rollout.storage.credentials import (
    StorageCredentials,
    credentials_from_env,
    read_credentials_dir,
)
from rollout.storage.directory import DirectoryStore

BUCKET = Setting("bucket", "ROLLOUT_STORAGE_BUCKET", "--storage-bucket", key="storage.bucket")
PREFIX = Setting("prefix", "ROLLOUT_STORAGE_PREFIX", "--storage-prefix", key="storage.prefix")
ENDPOINT = Setting(
    "endpoint", "ROLLOUT_STORAGE_ENDPOINT", "--storage-endpoint", key="storage.endpoint"
)
REGION = Setting(
    "region",
    "ROLLOUT_STORAGE_REGION",
    "--storage-region",
    key="storage.region",
    fallbacks=("AWS_REGION", "AWS_DEFAULT_REGION"),  # as boto3 reads them
)
PATH_STYLE = Setting(
    "path_style",
    "ROLLOUT_STORAGE_PATH_STYLE",
    "--storage-path-style",
    parse=boolean,
    key="storage.pathStyle",
)
CREDENTIALS_DIR = Setting(
    "credentials_dir", "ROLLOUT_STORAGE_CREDENTIALS_DIR", "--storage-credentials-dir"
)
"""A mounted Secret's directory with the files AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
optionally AWS_SESSION_TOKEN: the credentials of the process that reads it."""
CREDENTIALS_SECRET = Setting(
    "credentials_secret",
    "ROLLOUT_STORAGE_CREDENTIALS_SECRET",
    "--storage-credentials-secret",
    key="storage.credentialsSecret",
)
"""The name of the Secret trial Pods mount (the operator's default, the CLI's spec.storage)."""


def absolute_directory(value: str) -> Path:
    path = Path(value)
    if not path.is_absolute():
        raise ValueError(f"{value!r} is not an absolute path")
    if not path.is_dir():
        raise ValueError(f"{value!r} is not a directory")
    return path


DIR = Setting("dir", "ROLLOUT_STORAGE_DIR", "--storage-dir", parse=absolute_directory)
"""A local directory that holds the objects instead of a bucket (local mode: `DirectoryStore`),
under the same keys; no bucket, endpoint or credentials then."""

JOBS_DIR = Setting(
    "jobs_dir", "ROLLOUT_STORAGE_JOBS_DIR", "--storage-jobs-dir", parse=absolute_directory
)
"""With DIR only: where the jobs' objects go instead of `<DIR>/jobs/` (local mode writes a job's
results into job.yaml's jobs_dir this way; task archives stay under DIR)."""

LOCATION_SETTINGS = (BUCKET, PREFIX, ENDPOINT, REGION, PATH_STYLE)
"""The settings of a `StorageLocation`, each named as its field."""

ENV_BUCKET = BUCKET.variable
ENV_PREFIX = PREFIX.variable
ENV_ENDPOINT = ENDPOINT.variable
ENV_REGION = REGION.variable
ENV_PATH_STYLE = PATH_STYLE.variable
ENV_CREDENTIALS_DIR = CREDENTIALS_DIR.variable
ENV_JOBS_DIR = JOBS_DIR.variable
ENV_DIR = DIR.variable

Location = TypeVar("Location", bound=StorageLocation)


def read_location(resolved: Resolved, model: type[Location]) -> Location | None:
    """The location of the resolved LOCATION_SETTINGS, as `model`, or None after adding to
    `resolved.problems` what is missing or wrong. Without a region: `DEFAULT_REGION`."""
    values = {
        s.name: resolved.values[s.name] for s in LOCATION_SETTINGS if s.name in resolved.values
    }
    if BUCKET.name not in values:
        resolved.report(BUCKET.name, "is required: the bucket for datasets and results")
        return None
    values.setdefault(REGION.name, DEFAULT_REGION)
    try:
        return model(**values)
    except ValidationError as err:
        resolved.report_invalid(err)
        return None


def read_credentials(resolved: Resolved, environ: Mapping[str, str]) -> StorageCredentials | None:
    """The files of the CREDENTIALS_DIR directory when it is given (a mounted Secret), else the
    AWS_* variables, else None (boto3's default chain); problems go to `resolved.problems`."""
    directory = resolved.values.get(CREDENTIALS_DIR.name)
    try:
        if directory:
            return read_credentials_dir(Path(directory), CREDENTIALS_DIR.variable)
        return credentials_from_env(environ)
    except InvalidInput as err:
        resolved.problems.extend(err.problems)
        return None


def storage_from_env(
    environ: Mapping[str, str] | None = None,
) -> tuple[StorageLocation, StorageCredentials | None]:
    """The location and credentials the ROLLOUT_STORAGE_* variables give (see the package
    docstring). Raises InvalidInput naming each variable or file that is missing or wrong."""
    env = os.environ if environ is None else environ
    resolved = resolve((*LOCATION_SETTINGS, CREDENTIALS_DIR), env)
    location = read_location(resolved, StorageLocation)
    credentials = read_credentials(resolved, env)
    resolved.raise_problems()
    assert location is not None  # no problem means there is one
    return location, credentials


def directory_from_env(environ: Mapping[str, str] | None = None) -> DirectoryStore | None:
    """The directory ROLLOUT_STORAGE_DIR names, as a store (its keys under
    ROLLOUT_STORAGE_PREFIX), or None when it is unset: then storage is the bucket that
    `storage_from_env` reads. Raises InvalidInput naming each variable that is wrong."""
    env = os.environ if environ is None else environ
    resolved = resolve((DIR, JOBS_DIR, BUCKET, PREFIX), env)
    if DIR.name not in resolved.origins:
        if JOBS_DIR.name in resolved.origins:
            resolved.report(JOBS_DIR.name, f"needs {DIR.variable}: it places a directory's jobs")
            resolved.raise_problems()
        return None
    if BUCKET.name in resolved.origins:
        resolved.report(
            DIR.name, f"and {BUCKET.variable} both name where objects go: set only one of them"
        )
    root = resolved.values.get(DIR.name)
    store = None
    try:
        if root is not None:
            store = DirectoryStore(
                root,
                resolved.values.get(PREFIX.name, ""),
                jobs_dir=resolved.values.get(JOBS_DIR.name),
            )
    except ValueError as err:
        resolved.report(PREFIX.name, str(err))
    resolved.raise_problems()
    return store


def location_env(location: StorageLocation) -> dict[str, str]:
    """The variables that `storage_from_env` reads `location` back from.

    A location without a region gets no ROLLOUT_STORAGE_REGION, so that the reader falls back
    to AWS_REGION and the default. Credentials are never included: a Pod gets them from a
    mounted Secret (ROLLOUT_STORAGE_CREDENTIALS_DIR), never from plain values in its spec.
    """
    env = {BUCKET.variable: location.bucket}
    if location.region:
        env[REGION.variable] = location.region
    env[PATH_STYLE.variable] = "true" if location.path_style else "false"
    if location.prefix:
        env[PREFIX.variable] = location.prefix
    if location.endpoint:
        env[ENDPOINT.variable] = location.endpoint
    return env
