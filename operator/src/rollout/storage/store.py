"""`ObjectStore`: the S3 operations the runner, the operator and the CLI need, each retried."""

from __future__ import annotations

import mimetypes
import os
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

from rollout.api.storage import DEFAULT_REGION, StorageLocation
from rollout.storage.credentials import StorageCredentials
from rollout.storage.retry import (
    NOT_FOUND_CODES,
    RetryPolicy,
    RetryStats,
    StorageError,
    call_with_retries,
    error_code,
    logger,
)

T = TypeVar("T")

MIB = 1024 * 1024
# S3 refuses multipart parts under 5 MiB (except the last one).
MIN_PART_SIZE = 5 * MIB
# delete_objects takes at most this many keys per request.
DELETE_BATCH = 1000
# A conditional write (If-None-Match: *) that found the object there, or another one under way.
CREATE_CONFLICT_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})


def join_key(*parts: str) -> str:
    """Join key parts with '/', refusing empty, '.' and '..' segments.

    Each part may itself contain slashes ("jobs/j1"); surrounding slashes are dropped.
    """
    segments: list[str] = []
    for part in parts:
        stripped = part.strip("/")
        if not stripped:
            raise ValueError(f"empty key part in {parts!r}")
        for segment in stripped.split("/"):
            if segment in ("", ".", ".."):
                raise ValueError(f"key part {part!r} has an empty, '.' or '..' segment")
            segments.append(segment)
    return "/".join(segments)


def folder(prefix: str) -> str:
    """A key prefix as a folder: 'jobs/j1' -> 'jobs/j1/', so that it never matches 'jobs/j10'."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


class ObjectStore:
    """An S3-compatible bucket through boto3, with `RetryPolicy` applied to every call.

    `location` says where (bucket, prefix, endpoint, region, addressing), `credentials` who we
    are there (None: boto3's default chain). The timeouts bound each attempt.

    Keys: every method takes *full* keys, exactly as they are in the bucket. `key(*parts)` builds
    one under the configured prefix (`store.key("jobs", job, "result.json")`); code that reads
    keys back from `list_keys` can pass them on unchanged. Methods that take a `key_prefix` for a
    tree treat it as a folder ('a/b' means 'a/b/...', never 'a/bc').

    Failures raise `StorageError` (`ObjectNotFound` for a missing object); local file errors
    (a missing source file, a full disk) come out as the OSError they are. The client is safe to
    share between threads; `stats` counts attempts, retries and failures per operation.
    """

    def __init__(
        self,
        location: StorageLocation,
        credentials: StorageCredentials | None = None,
        *,
        retry: RetryPolicy | None = None,
        connect_timeout_seconds: float = 10.0,
        read_timeout_seconds: float = 60.0,
        multipart_threshold: int = 64 * MIB,
        multipart_chunksize: int = 16 * MIB,
        max_concurrency: int = 4,
    ) -> None:
        if multipart_chunksize < MIN_PART_SIZE:
            raise ValueError(f"multipart_chunksize must be at least {MIN_PART_SIZE} bytes")
        if connect_timeout_seconds <= 0 or read_timeout_seconds <= 0:
            raise ValueError("the connect and read timeouts must be more than 0 seconds")
        self.location = location
        self.retry = retry or RetryPolicy()
        self.stats = RetryStats()
        self._secrets = credentials.secrets() if credentials else []
        self._client = _make_client(
            location, credentials, connect_timeout_seconds, read_timeout_seconds
        )
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
            # Whole-transfer retries are tenacity's job, as for every other call.
            num_download_attempts=1,
            preferred_transfer_client="classic",
        )

    @property
    def bucket(self) -> str:
        return self.location.bucket

    @property
    def prefix(self) -> str:
        """The location's key prefix (`Store.prefix`)."""
        return self.location.prefix

    @property
    def endpoint_name(self) -> str:
        """The endpoint as error messages name it."""
        return self.location.endpoint or f"AWS S3 ({self.location.signing_region})"

    def secrets(self) -> list[str]:
        """The credentials' secret values, so that messages can be scrubbed of them."""
        return list(self._secrets)

    def key(self, *parts: str) -> str:
        """A full key: the configured prefix, then `parts` joined with '/'."""
        if self.location.prefix:
            return join_key(self.location.prefix, *parts)
        return join_key(*parts)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, operation: str, key: str | None, fn: Callable[[], T]) -> T:
        return call_with_retries(
            fn,
            operation=operation,
            key=key,
            what=self.uri(key) if key is not None else f"s3://{self.bucket}",
            endpoint=self.endpoint_name,
            policy=self.retry,
            stats=self.stats,
            secrets=self._secrets,
        )

    # Single objects.

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        extra = {"ContentType": content_type} if content_type else {}
        self._call(
            "put_bytes",
            key,
            lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data, **extra),
        )

    def put_new(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        """Write the object only where there is none: True when this call wrote it, False when
        an object was there already (it is left as it is).

        It looks first (HEAD), then writes with `If-None-Match: *`, which S3 (since 2024),
        MinIO, GCS and R2 refuse with 412 when an object has appeared meanwhile. A store that
        ignores the header still has the look before: only two writers within the same moment
        could then both write. A write whose answer is lost and retried finds its own object
        and says False.
        """
        if self.exists(key):
            return False
        extra = {"ContentType": content_type} if content_type else {}

        def put() -> bool:
            try:
                self._client.put_object(
                    Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*", **extra
                )
            except ClientError as err:
                # 412: the object is there; 409: another conditional write of it is under way.
                if error_code(err) in CREATE_CONFLICT_CODES:
                    return False
                raise
            return True

        return self._call("put_new", key, put)

    def copy(self, source: str, key: str) -> None:
        """Copy the object `source` to `key` in the same bucket, server-side (any size: a large
        object is copied in parts)."""
        self._call(
            "copy",
            key,
            lambda: self._client.copy({"Bucket": self.bucket, "Key": source}, self.bucket, key),
        )

    def delete(self, key: str) -> None:
        """Delete the object (no object: nothing to do, as S3 has it)."""
        self._call("delete", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=key))

    def get_bytes(self, key: str) -> bytes:
        """The object's content; ObjectNotFound when there is no such key."""

        def get() -> bytes:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            # Reading is inside the retried call: a connection lost mid-body is retried too.
            try:
                return bytes(body.read())
            finally:
                body.close()

        return self._call("get_bytes", key, get)

    def exists(self, key: str) -> bool:
        """Whether the object exists. A missing bucket also reads as False (S3 says 404)."""

        def head() -> bool:
            try:
                self._client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as err:
                if error_code(err) in NOT_FOUND_CODES:
                    return False
                raise
            return True

        return self._call("exists", key, head)

    def upload_file(self, local_path: Path | str, key: str) -> None:
        """Upload a file; multipart above the threshold, with a content type from its name."""
        content_type = mimetypes.guess_type(str(local_path))[0] or "application/octet-stream"
        self._call(
            "upload_file",
            key,
            lambda: self._client.upload_file(
                Filename=str(local_path),
                Bucket=self.bucket,
                Key=key,
                ExtraArgs={"ContentType": content_type},
                Config=self._transfer,
            ),
        )

    def download_file(self, key: str, local_path: Path | str) -> None:
        """Download an object to a file (written under a temporary name, then renamed)."""
        Path(local_path).parent.mkdir(parents=True, exist_ok=True)
        self._call(
            "download_file",
            key,
            lambda: self._client.download_file(
                Bucket=self.bucket, Key=key, Filename=str(local_path), Config=self._transfer
            ),
        )

    # Trees of objects.

    def list_keys(self, prefix: str, page_size: int = 1000) -> list[str]:
        """Every key that starts with `prefix` (a plain string prefix), in S3's order.

        Listed `page_size` keys per request (S3 returns at most 1000), each page retried alone.
        """
        return [str(item["Key"]) for item in self._listing(prefix, page_size)]

    def list_modified(self, prefix: str, page_size: int = 1000) -> dict[str, datetime]:
        """Every key that starts with `prefix`, with when it was last written (the store's
        clock, to the second; timezone-aware), listed as `list_keys` lists."""
        return {str(item["Key"]): item["LastModified"] for item in self._listing(prefix, page_size)}

    def _listing(self, prefix: str, page_size: int) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = self._list_page(prefix, token, page_size)
            yield from page.get("Contents", [])
            if not page.get("IsTruncated"):
                return
            token = str(page["NextContinuationToken"])

    def _list_page(self, prefix: str, token: str | None, page_size: int) -> dict[str, Any]:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": page_size}
        if token is not None:
            args["ContinuationToken"] = token
        page: dict[str, Any] = self._call(
            "list_keys", prefix, lambda: self._client.list_objects_v2(**args)
        )
        return page

    def upload_tree(self, local_dir: Path | str, key_prefix: str) -> list[str]:
        """Upload every regular file under `local_dir` to `key_prefix/<relative path>`.

        Symlinks are followed only when they resolve inside `local_dir`; others, and anything
        that is not a regular file (a FIFO would block us forever), are skipped with a warning:
        the tree may have been written by an agent we do not trust. Returns the keys uploaded.
        """
        root = Path(local_dir).resolve(strict=True)
        base = folder(key_prefix)
        keys: list[str] = []
        for path in sorted(_walk(root)):
            relative = path.relative_to(root).as_posix()
            if not _safe_regular_file(path, root):
                logger.warning("upload_tree skips %s: not a regular file inside %s", path, root)
                continue
            key = base + relative
            self.upload_file(path, key)
            keys.append(key)
        return keys

    def download_prefix(
        self, key_prefix: str, local_dir: Path | str, *, workers: int = 1
    ) -> list[Path]:
        """Download every object under the folder `key_prefix` into `local_dir`.

        Refuses, before writing anything, a key that would land outside `local_dir` ('..',
        or a symlink already in `local_dir`). Keys ending in '/' (folder markers) are skipped.
        `local_dir` is made only when there is something to write. `workers` > 1 downloads that
        many files at a time (the client is thread-safe): a job's results are thousands of
        small files. Returns the files written.
        """
        root = Path(local_dir).resolve()
        base = folder(key_prefix)
        plan: list[tuple[str, Path]] = []
        for key in self.list_keys(base):
            relative = key[len(base) :]
            if not relative or relative.endswith("/"):
                continue
            target = (root / relative).resolve()
            if target == root or not target.is_relative_to(root):
                raise StorageError(
                    f"refusing to download {self.uri(key)}: it would be written outside {root}",
                    operation="download_prefix",
                    key=key,
                    endpoint=self.endpoint_name,
                    attempts=0,
                    transient=False,
                )
            plan.append((key, target))
        if plan:
            root.mkdir(parents=True, exist_ok=True)
        if workers > 1 and len(plan) > 1:
            with ThreadPoolExecutor(max_workers=min(workers, len(plan))) as pool:
                # list() so that the first failure is raised here, once all are done.
                list(pool.map(lambda item: self.download_file(*item), plan))
        else:
            for key, target in plan:
                self.download_file(key, target)
        return [target for _, target in plan]

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under the folder `prefix`; returns how many were deleted.

        An empty prefix is refused: it would empty the bucket.
        """
        base = folder(prefix)
        if not base:
            raise ValueError("delete_prefix needs a non-empty prefix")
        keys = self.list_keys(base)
        self.delete_keys(keys, base)
        return len(keys)

    def delete_keys(self, keys: list[str], base: str = "") -> None:
        """Delete the objects `keys` (those already gone count as deleted), in batches; `base`
        names them in errors (their common prefix)."""
        for start in range(0, len(keys), DELETE_BATCH):
            self._delete_batch(base, keys[start : start + DELETE_BATCH])

    def _delete_batch(self, base: str, keys: list[str]) -> None:
        objects = [{"Key": key} for key in keys]
        response: dict[str, Any] = self._call(
            "delete_prefix",
            base,
            lambda: self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
            ),
        )
        if errors := response.get("Errors"):
            first = errors[0]
            raise StorageError(
                f"storage delete_prefix of {self.uri(base)} at {self.endpoint_name}"
                f" could not delete {len(errors)} objects, e.g. {first.get('Key')}:"
                f" {first.get('Code')} {first.get('Message')}",
                operation="delete_prefix",
                key=base,
                endpoint=self.endpoint_name,
                attempts=1,
                transient=False,
                code=first.get("Code"),
            )

    # The bucket itself.

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (for tests and the quickstart)."""

        def ensure() -> None:
            try:
                self._client.head_bucket(Bucket=self.bucket)
                return
            except ClientError as err:
                if error_code(err) not in ("404", "NoSuchBucket", "NotFound"):
                    raise
            args: dict[str, Any] = {"Bucket": self.bucket}
            region = self.location.signing_region
            if region != DEFAULT_REGION:
                args["CreateBucketConfiguration"] = {"LocationConstraint": region}
            try:
                self._client.create_bucket(**args)
            except ClientError as err:
                # Someone (or our own earlier attempt) created it meanwhile.
                if error_code(err) != "BucketAlreadyOwnedByYou":
                    raise

        self._call("ensure_bucket", None, ensure)


def _make_client(
    location: StorageLocation,
    credentials: StorageCredentials | None,
    connect_timeout_seconds: float,
    read_timeout_seconds: float,
) -> Any:
    config = Config(
        signature_version="s3v4",
        connect_timeout=connect_timeout_seconds,
        read_timeout=read_timeout_seconds,
        # tenacity is the one retry policy: botocore makes exactly one attempt per call.
        retries={"total_max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path" if location.path_style else "auto"},
        # Checksums only where S3 requires them: several S3-compatible stores (GCS interop,
        # older MinIO) reject the newer default checksum headers.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    if credentials is None:
        session = boto3.session.Session(region_name=location.signing_region)
    else:
        token = credentials.session_token
        session = boto3.session.Session(
            aws_access_key_id=credentials.access_key_id.get_secret_value(),
            aws_secret_access_key=credentials.secret_access_key.get_secret_value(),
            aws_session_token=token.get_secret_value() if token else None,
            region_name=location.signing_region,
        )
    return session.client("s3", endpoint_url=location.endpoint, config=config)


def _walk(root: Path) -> list[Path]:
    """Every non-directory entry under `root`, not descending into symlinked directories."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        found.extend(base / name for name in filenames)
        # os.walk lists a symlink to a directory among dirnames and does not enter it.
        found.extend(base / name for name in dirnames if (base / name).is_symlink())
    return found


def _safe_regular_file(path: Path, root: Path) -> bool:
    try:
        resolved = path.resolve(strict=True)
        mode = resolved.stat().st_mode
    except OSError:
        return False
    return resolved.is_relative_to(root) and stat.S_ISREG(mode)
