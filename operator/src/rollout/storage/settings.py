"""Where results go and who we are there: `StorageSettings`, read from the environment.

The environment variable names below are the contract with the Helm chart and with the trial Pod
the operator renders; the package docstring (`rollout.storage`) lists them for users.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from rollout.api.errors import InvalidInput, Problem, field_path

ENV_BUCKET = "ROLLOUT_STORAGE_BUCKET"
ENV_PREFIX = "ROLLOUT_STORAGE_PREFIX"
ENV_ENDPOINT = "ROLLOUT_STORAGE_ENDPOINT"
ENV_REGION = "ROLLOUT_STORAGE_REGION"
ENV_PATH_STYLE = "ROLLOUT_STORAGE_PATH_STYLE"
ENV_CREDENTIALS_DIR = "ROLLOUT_STORAGE_CREDENTIALS_DIR"

# The standard AWS names, both as environment variables and as the keys (file names) of a
# mounted Secret.
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name, not a secret
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"  # noqa: S105 - a variable name, not a secret

# Where a problem with the environment is reported (the `file` of a Problem).
ENVIRONMENT = "environment"

# What botocore accepts before sending; S3 itself is stricter (lowercase, 3-63 characters).
_BUCKET_NAME = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

_ENV_OF_FIELD = {
    "bucket": ENV_BUCKET,
    "prefix": ENV_PREFIX,
    "endpoint_url": ENV_ENDPOINT,
    "region": ENV_REGION,
    "path_style": ENV_PATH_STYLE,
}


class StorageSettings(BaseModel):
    """An S3-compatible bucket and prefix, how to reach it, and optional static credentials.

    Without credentials boto3 uses its default chain (IRSA web identity, instance profile, ...).
    Credentials are `SecretStr`: repr, str and JSON dumps show `**********`, never the value.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str = Field(min_length=1, description="Bucket that holds datasets and results.")
    prefix: str = Field(
        default="", description="Key prefix under which everything of ours lives; '' for none."
    )
    endpoint_url: str | None = Field(
        default=None, description="S3 endpoint (MinIO, GCS interop, moto); None for AWS S3."
    )
    region: str = Field(default="us-east-1", min_length=1, description="Region to sign for.")
    path_style: bool = Field(
        default=False, description="Path-style addressing (bucket in the path), as MinIO needs."
    )
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    read_timeout_seconds: float = Field(default=60.0, gt=0)

    @field_validator("bucket")
    @classmethod
    def _bucket_is_a_name(cls, value: str) -> str:
        if not _BUCKET_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a bucket name (letters, digits, '.', '-', '_')")
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix_is_clean(cls, value: str) -> str:
        value = value.strip("/")
        if value and any(part in ("", ".", "..") for part in value.split("/")):
            raise ValueError(f"{value!r} has an empty, '.' or '..' segment")
        return value

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _credentials_come_in_pairs(self) -> StorageSettings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("an access key id and a secret access key go together: set both")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("a session token needs an access key id and a secret access key")
        return self

    @property
    def endpoint_name(self) -> str:
        """The endpoint as error messages name it."""
        return self.endpoint_url or f"AWS S3 ({self.region})"

    def secrets(self) -> list[str]:
        """The secret values, so that messages can be scrubbed of them."""
        values = (self.access_key_id, self.secret_access_key, self.session_token)
        return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StorageSettings:
        """Read the settings from ROLLOUT_STORAGE_* variables (empty values count as unset).

        Credentials come from the files of ROLLOUT_STORAGE_CREDENTIALS_DIR when it is set (a
        mounted Secret), else from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN,
        else boto3's default chain. The region falls back to AWS_REGION, AWS_DEFAULT_REGION,
        then us-east-1. Raises InvalidInput naming each variable that is missing or wrong.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        problems: list[Problem] = []
        values: dict[str, Any] = {}
        bucket = get(ENV_BUCKET)
        if bucket is None:
            problems.append(
                Problem(ENVIRONMENT, ENV_BUCKET, "is required: the bucket for datasets and results")
            )
        else:
            values["bucket"] = bucket
        if (prefix := get(ENV_PREFIX)) is not None:
            values["prefix"] = prefix
        if (endpoint := get(ENV_ENDPOINT)) is not None:
            values["endpoint_url"] = endpoint
        region = get(ENV_REGION) or get("AWS_REGION") or get("AWS_DEFAULT_REGION")
        if region is not None:
            values["region"] = region
        if (path_style := get(ENV_PATH_STYLE)) is not None:
            if path_style.lower() in _TRUE:
                values["path_style"] = True
            elif path_style.lower() in _FALSE:
                values["path_style"] = False
            else:
                problems.append(
                    Problem(ENVIRONMENT, ENV_PATH_STYLE, f"{path_style!r} is not true or false")
                )

        credentials_dir = get(ENV_CREDENTIALS_DIR)
        if credentials_dir is not None:
            try:
                values.update(read_credentials_dir(Path(credentials_dir)))
            except InvalidInput as err:
                problems.extend(err.problems)
        else:
            for field, name in (
                ("access_key_id", AWS_ACCESS_KEY_ID),
                ("secret_access_key", AWS_SECRET_ACCESS_KEY),
                ("session_token", AWS_SESSION_TOKEN),
            ):
                if (value := get(name)) is not None:
                    values[field] = SecretStr(value)

        if problems:
            raise InvalidInput(problems)
        try:
            return cls(**values)
        except ValidationError as err:
            raise InvalidInput(_env_problems(err)) from None

    def to_env(self) -> dict[str, str]:
        """The non-secret ROLLOUT_STORAGE_* variables that `from_env` reads back.

        Credentials are not included: a Pod gets them from a mounted Secret
        (ROLLOUT_STORAGE_CREDENTIALS_DIR), never from plain values in its spec.
        """
        env = {
            ENV_BUCKET: self.bucket,
            ENV_REGION: self.region,
            ENV_PATH_STYLE: "true" if self.path_style else "false",
        }
        if self.prefix:
            env[ENV_PREFIX] = self.prefix
        if self.endpoint_url:
            env[ENV_ENDPOINT] = self.endpoint_url
        return env


def read_credentials_dir(directory: Path) -> dict[str, SecretStr]:
    """Read credentials from a mounted Secret: one file per key, as Kubernetes mounts them.

    AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are required, AWS_SESSION_TOKEN optional.
    Surrounding whitespace (a trailing newline from `echo > file`) is dropped.
    """
    if not directory.is_dir():
        raise InvalidInput.one(
            directory, None, f"the credentials directory ({ENV_CREDENTIALS_DIR}) does not exist"
        )
    values: dict[str, SecretStr] = {}
    problems: list[Problem] = []
    for field, name, required in (
        ("access_key_id", AWS_ACCESS_KEY_ID, True),
        ("secret_access_key", AWS_SECRET_ACCESS_KEY, True),
        ("session_token", AWS_SESSION_TOKEN, False),
    ):
        path = directory / name
        try:
            value = path.read_text().strip()
        except FileNotFoundError:
            value = ""
        except OSError as err:
            problems.append(Problem(str(path), None, f"cannot be read: {err.strerror}"))
            continue
        if value:
            values[field] = SecretStr(value)
        elif required:
            problems.append(Problem(str(path), None, "is missing or empty"))
    if problems:
        raise InvalidInput(problems)
    return values


def _env_problems(err: ValidationError) -> list[Problem]:
    """Name the environment variable behind each invalid field."""
    problems = []
    for e in err.errors(include_url=False):
        field = str(e["loc"][0]) if e["loc"] else None
        name = _ENV_OF_FIELD.get(field or "", field_path(e["loc"]))
        problems.append(Problem(ENVIRONMENT, name, e["msg"].removeprefix("Value error, ")))
    return problems
