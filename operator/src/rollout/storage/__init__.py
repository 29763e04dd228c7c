"""Object storage: an S3-compatible bucket (AWS S3, MinIO, GCS interop) through boto3.

Every call is retried by one policy (tenacity, `RetryPolicy`): throttling, 5xx and broken
connections are retried with exponential backoff and full jitter, bounded in attempts and in
total time; any other answer (403, 404, NoSuchBucket, ...) fails at once. Failures raise
`StorageError` (`ObjectNotFound` for a missing object), whose message names the operation, the
object, the endpoint and the last error, and never a credential. Retries are logged at WARNING
on the "rollout.storage" logger.

Keys are full keys; `ObjectStore.key(*parts)` joins parts under the location's prefix, e.g.
`store.key("jobs", job, "result.json")`.

An `ObjectStore` is given a location (`rollout.api.storage.StorageLocation`: bucket, prefix,
endpoint, region, addressing) and, beside it, the credentials to use there (`StorageCredentials`,
or None for boto3's default chain). A process reads both from its environment
(`storage_from_env`), the contract with the Helm chart and with the trial Pod the operator
renders; empty values count as unset:

    ROLLOUT_STORAGE_BUCKET           bucket for datasets and results (required)
    ROLLOUT_STORAGE_PREFIX           key prefix for everything of ours (default: none)
    ROLLOUT_STORAGE_ENDPOINT         endpoint URL, e.g. http://minio:9000 (default: AWS S3)
    ROLLOUT_STORAGE_REGION           region to sign for (default: AWS_REGION,
                                     AWS_DEFAULT_REGION, then us-east-1)
    ROLLOUT_STORAGE_PATH_STYLE       true/false: path-style addressing, as MinIO needs
                                     (default: false)
    ROLLOUT_STORAGE_CREDENTIALS_DIR  a mounted Secret directory with the files AWS_ACCESS_KEY_ID,
                                     AWS_SECRET_ACCESS_KEY and optionally AWS_SESSION_TOKEN

Without ROLLOUT_STORAGE_CREDENTIALS_DIR the credentials are the AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables when set, else boto3's default chain
(IRSA web identity, instance profile, ...). Credentials are held as pydantic SecretStr and never
logged.

Local mode keeps objects in a directory instead (`DirectoryStore`, the same keys as files under
it), which the runner takes when it is given one (`directory_from_env`):

    ROLLOUT_STORAGE_DIR              an absolute path to a directory; then no bucket, endpoint or
                                     credentials (ROLLOUT_STORAGE_PREFIX still applies)
    ROLLOUT_STORAGE_JOBS_DIR         with it: an absolute path where the jobs' objects go
                                     (`<prefix>/jobs/<job>/...` is `<it>/<job>/...`)

The runner needs only what `Store` declares, which both stores have.
"""

from rollout.api.storage import StorageLocation
from rollout.storage.credentials import (
    StorageCredentials,
    credentials_from_env,
    read_credentials_dir,
)
from rollout.storage.directory import DirectoryStore
from rollout.storage.protocol import Store, WritableStore
from rollout.storage.retry import (
    InvalidKey,
    ObjectNotFound,
    RetryPolicy,
    RetryStats,
    StorageError,
)
from rollout.storage.settings import (
    ENV_BUCKET,
    ENV_CREDENTIALS_DIR,
    ENV_DIR,
    ENV_ENDPOINT,
    ENV_JOBS_DIR,
    ENV_PATH_STYLE,
    ENV_PREFIX,
    ENV_REGION,
    directory_from_env,
    location_env,
    storage_from_env,
)
from rollout.storage.store import ObjectStore, join_key

__all__ = [
    "ENV_BUCKET",
    "ENV_CREDENTIALS_DIR",
    "ENV_DIR",
    "ENV_ENDPOINT",
    "ENV_JOBS_DIR",
    "ENV_PATH_STYLE",
    "ENV_PREFIX",
    "ENV_REGION",
    "DirectoryStore",
    "InvalidKey",
    "ObjectNotFound",
    "ObjectStore",
    "RetryPolicy",
    "RetryStats",
    "StorageCredentials",
    "StorageError",
    "StorageLocation",
    "Store",
    "WritableStore",
    "credentials_from_env",
    "directory_from_env",
    "join_key",
    "location_env",
    "read_credentials_dir",
    "storage_from_env",
]
