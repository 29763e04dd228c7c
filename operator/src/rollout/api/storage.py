"""Where objects are kept: `StorageLocation`, the one model of an S3-compatible bucket and prefix.

A RolloutJob or RolloutTrial names its location in spec.storage (`StorageSpec`: a location plus
the Secret its trial Pods use); the operator, the CLI and the runner read theirs from flags,
variables and files (`rollout.storage.settings`); `rollout.storage.ObjectStore` reaches one.
Credentials are never part of a location: they are given beside it
(`rollout.storage.StorageCredentials`), so that a location can be written into a resource, a
Pod's environment or a log line as it is.

The checks below apply wherever a location comes from, so the CLI refuses at once what the
operator would refuse later; the CRD schema has only the field types (a stricter schema would
stop the apiserver from storing manifests older versions accepted).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rollout.api.base import ApiModel

DEFAULT_REGION = "us-east-1"
"""The region a location without one is signed for, as boto3 and the AWS CLI default."""

# What botocore accepts before sending; S3 itself is stricter (lowercase, 3-63 characters).
_BUCKET_NAME = re.compile(r"[a-zA-Z0-9.\-_]{1,255}")


class StorageLocation(ApiModel):
    """An S3-compatible bucket, the key prefix of everything of ours in it, and how to address it.

    `prefix` is kept without surrounding slashes and `endpoint` without a trailing one (an empty
    endpoint is none).
    """

    bucket: str = Field(min_length=1, description="Bucket name.")
    prefix: str = Field("", description="Key prefix under which datasets/, tasks/, jobs/ live.")
    endpoint: str | None = Field(
        None, description="Endpoint URL for non-AWS storage (MinIO, GCS interop)."
    )
    region: str | None = Field(None, description="Region of the bucket.")
    path_style: bool = Field(
        False, description="Address the bucket in the URL path (needed by MinIO)."
    )

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

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_a_url(cls, value: str | None) -> str | None:
        if not value:
            return None  # an empty endpoint in a manifest: AWS S3, as when it is left out
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value.rstrip("/")

    @property
    def signing_region(self) -> str:
        """The region requests are signed for: the location's own, else `DEFAULT_REGION`."""
        return self.region or DEFAULT_REGION


class StorageSpec(StorageLocation):
    """S3-compatible object storage for datasets and results.

    The credentials Secret, when named, holds `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`
    (and optionally `AWS_SESSION_TOKEN`); without it the ambient credentials apply (e.g. IRSA).
    """

    credentials_secret: str | None = Field(
        None, description="Name of a Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."
    )
