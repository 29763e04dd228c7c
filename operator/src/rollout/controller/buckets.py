"""Which object storage a job uses, and one `ObjectStore` per bucket for the whole process.

A RolloutJob names its storage in spec.storage or leaves it to the operator's default. Either
way the operator reads manifests and writes results with its own credentials (it reads no
Secret: RBAC grants it none); the Secret a job names is for its trial Pods.

spec.storage says where the job's objects are and how its Pods reach them. When it names the
operator's own default bucket, the operator reaches that bucket the way it is configured to
(its endpoint, region and addressing): the two may differ when the operator runs outside the
cluster (the quickstart's MinIO is `127.0.0.1:<port>` for it, a Service name for the Pods).
"""

from __future__ import annotations

from rollout.api.resources import StorageSpec
from rollout.storage import ObjectStore, RetryPolicy, StorageSettings

OPERATOR_RETRY = RetryPolicy(max_attempts=4, max_seconds=20.0)
"""Shorter than the runner's policy: a job's reconciler waits on these calls, and retries the
whole step itself later when storage stays away."""


class NoStorage(Exception):
    """Neither the job nor the operator names a bucket."""


def default_storage_spec(settings: StorageSettings) -> StorageSpec:
    """The operator's default storage as a RolloutTrial's spec.storage (no credentials: trial
    Pods mount the operator's configured Secret, see `pod.render_trial_pod`)."""
    return StorageSpec(
        bucket=settings.bucket,
        prefix=settings.prefix,
        endpoint=settings.endpoint_url,
        region=settings.region,
        path_style=settings.path_style,
    )


def job_storage_spec(
    job_storage: StorageSpec | None, default: StorageSettings | None
) -> StorageSpec:
    """The storage of a job: its own spec.storage, else the operator's default."""
    if job_storage is not None:
        return job_storage
    if default is None:
        raise NoStorage(
            "spec.storage is not set and the operator has no default storage "
            "(ROLLOUT_STORAGE_BUCKET): name a bucket in spec.storage"
        )
    return default_storage_spec(default)


def operator_settings(spec: StorageSpec, default: StorageSettings | None) -> StorageSettings:
    """How the operator itself reaches `spec`'s bucket: its place from `spec`, the credentials
    and timeouts from the operator's own settings (or the AWS default chain without them)."""
    base = default or StorageSettings(bucket=spec.bucket)
    update: dict[str, object] = {"bucket": spec.bucket, "prefix": spec.prefix.strip("/")}
    if default is None or spec.bucket != default.bucket:
        update["endpoint_url"] = spec.endpoint.rstrip("/") if spec.endpoint else None
        update["path_style"] = spec.path_style
        if spec.region:
            update["region"] = spec.region
    return StorageSettings.model_validate({**base.model_dump(), **update})


class StoreCache:
    """One ObjectStore (one boto3 client, one connection pool) per distinct storage settings."""

    def __init__(
        self, default: StorageSettings | None, retry: RetryPolicy = OPERATOR_RETRY
    ) -> None:
        self.default = default
        self._retry = retry
        self._stores: dict[str, ObjectStore] = {}

    def for_spec(self, spec: StorageSpec) -> ObjectStore:
        settings = operator_settings(spec, self.default)
        key = settings.model_dump_json()  # includes secrets only in memory, as SecretStr repr
        store = self._stores.get(key)
        if store is None:
            store = self._stores[key] = ObjectStore(settings, retry=self._retry)
        return store
