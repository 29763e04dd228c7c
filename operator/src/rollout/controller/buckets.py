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
from rollout.api.storage import StorageLocation
from rollout.storage import ObjectStore, RetryPolicy, StorageCredentials

OPERATOR_RETRY = RetryPolicy(max_attempts=4, max_seconds=20.0)
"""Shorter than the runner's policy: a job's reconciler waits on these calls, and retries the
whole step itself later when storage stays away."""


class NoStorage(Exception):
    """Neither the job nor the operator names a bucket."""


def job_storage_spec(job_storage: StorageSpec | None, default: StorageSpec | None) -> StorageSpec:
    """The storage of a job: its own spec.storage, else the operator's default (which names no
    credentials Secret: trial Pods then mount the operator's configured one, see
    `pod.render_trial_pod`)."""
    if job_storage is not None:
        return job_storage
    if default is None:
        raise NoStorage(
            "spec.storage is not set and the operator has no default storage "
            "(ROLLOUT_STORAGE_BUCKET): name a bucket in spec.storage"
        )
    return default


def operator_location(spec: StorageLocation, default: StorageLocation | None) -> StorageLocation:
    """How the operator itself reaches `spec`'s bucket: the operator's own way to its default
    bucket (endpoint, region, addressing) with `spec`'s prefix; any other bucket as `spec` says,
    signed for the operator's region when `spec` names none."""
    if default is not None and spec.bucket == default.bucket:
        return default.model_copy(update={"prefix": spec.prefix})
    if default is not None and not spec.region:
        return spec.model_copy(update={"region": default.region})
    return spec


class StoreCache:
    """One ObjectStore (one boto3 client, one connection pool) per distinct location, all with
    the operator's own credentials (or boto3's default chain without them)."""

    def __init__(
        self,
        default: StorageLocation | None,
        credentials: StorageCredentials | None = None,
        retry: RetryPolicy = OPERATOR_RETRY,
    ) -> None:
        self.default = default
        self._credentials = credentials
        self._retry = retry
        self._stores: dict[str, ObjectStore] = {}

    def for_spec(self, spec: StorageLocation) -> ObjectStore:
        location = operator_location(spec, self.default)
        # The location's own fields only: jobs that differ in their Pods' Secret share a client.
        key = location.model_dump_json(include=set(StorageLocation.model_fields))
        store = self._stores.get(key)
        if store is None:
            store = self._stores[key] = ObjectStore(location, self._credentials, retry=self._retry)
        return store
