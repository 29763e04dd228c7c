"""The one retry policy of object storage: which failures are transient, and how we wait.

botocore's own retries are switched off (see `store.py`), so every storage call goes through
`call_with_retries` exactly once and the attempts counted here are the requests made.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import urllib3.exceptions
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    ResponseStreamingError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from pydantic import BaseModel, ConfigDict, Field
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

logger = logging.getLogger("rollout.storage")

T = TypeVar("T")

THROTTLING_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "Throttled",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "BandwidthLimitExceeded",
    }
)
SERVER_ERROR_CODES = frozenset(
    {"InternalError", "ServiceUnavailable", "RequestTimeout", "500", "502", "503", "504"}
)
NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})

# Failures of the connection rather than answers from the server. botocore's ConnectionError
# covers EndpointConnectionError, ConnectTimeoutError and ProxyConnectionError; HTTPClientError
# covers ConnectionClosedError and ReadTimeoutError; the rest happen while a body streams.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    BotoConnectionError,
    HTTPClientError,
    ResponseStreamingError,
    IncompleteReadError,
    urllib3.exceptions.HTTPError,
    ConnectionError,
    TimeoutError,
)


class RetryPolicy(BaseModel):
    """Exponential backoff with full jitter, bounded in attempts and in total time.

    The defaults suit a sidecar: about a minute of retrying rides out an endpoint restart or a
    throttling burst, and still leaves the trial's own deadline in charge. Twenty tries, not
    fewer: an endpoint that refuses connections at once uses a try in no time, and ten tries
    (their random waits up to 0.5, 1, 2, ... s) lasted less than 30 s about one time in five;
    twenty outlast a 30 s outage, the 60 s bounding the whole.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=20, ge=1, description="Attempts in all, the first included.")
    max_seconds: float = Field(
        default=60.0, gt=0, description="No new attempt once this much time would have passed."
    )
    initial_backoff_seconds: float = Field(default=0.5, gt=0)
    max_backoff_seconds: float = Field(default=15.0, gt=0)


class StorageError(Exception):
    """A storage call failed: not retryable, or still failing when the retries ran out.

    The message names the operation, the object, the endpoint and the last error, and never a
    credential. `transient` is True when the last error was one worth retrying (the endpoint was
    down or throttling until the end), False for answers like 403 or NoSuchBucket.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str,
        key: str | None,
        endpoint: str,
        attempts: int,
        transient: bool,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.key = key
        self.endpoint = endpoint
        self.attempts = attempts
        self.transient = transient
        self.code = code


class ObjectNotFound(StorageError):
    """The object does not exist (404 / NoSuchKey). Never retried."""


class InvalidKey(StorageError):
    """A store refused the key itself (`DirectoryStore`: one that is no safe relative path)."""


class RetryStats:
    """Counts of attempts, retries and failures per operation, safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.retries: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()

    def _add(self, counter: Counter[str], operation: str) -> None:
        with self._lock:
            counter[operation] += 1


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what caused it: boto3's transfer layer wraps the botocore error it got."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        last = getattr(current, "last_exception", None)  # boto3's RetriesExceededError
        if isinstance(last, BaseException):
            current = last
        else:
            current = current.__cause__ or current.__context__


def storage_failure(exc: BaseException) -> BaseException | None:
    """The botocore/connection error behind `exc`, or None if it is not a storage failure."""
    for link in exception_chain(exc):
        if isinstance(link, ClientError | BotoCoreError | urllib3.exceptions.HTTPError):
            return link
        if isinstance(link, ConnectionError | TimeoutError):
            return link
    return None


def error_code(exc: BaseException) -> str | None:
    """The S3 error code of a ClientError ('NoSuchKey', 'SlowDown', '404'), else None."""
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def http_status(exc: BaseException) -> int | None:
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def is_transient(exc: BaseException) -> bool:
    """Throttling, 5xx and broken connections are worth retrying; any other answer is not."""
    failure = storage_failure(exc)
    if failure is None:
        return False
    if isinstance(failure, ClientError):
        code = error_code(failure)
        status = http_status(failure) or 0
        return (
            code in THROTTLING_CODES or code in SERVER_ERROR_CODES or status == 429 or status >= 500
        )
    return isinstance(failure, CONNECTION_ERRORS)


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


def call_with_retries(
    fn: Callable[[], T],
    *,
    operation: str,
    key: str | None,
    what: str,
    endpoint: str,
    policy: RetryPolicy,
    stats: RetryStats,
    secrets: Sequence[str] = (),
) -> T:
    """Run `fn` under `policy`; storage failures come out as StorageError, others unchanged.

    `what` is how messages name the object (an s3:// URI). Each retry is logged at WARNING on
    the "rollout.storage" logger, with the error text scrubbed of `secrets`.
    """
    attempts = 0
    started = time.monotonic()

    def attempt() -> T:
        nonlocal attempts
        attempts += 1
        stats._add(stats.attempts, operation)
        return fn()

    def log_retry(state: RetryCallState) -> None:
        stats._add(stats.retries, operation)
        exc = state.outcome.exception() if state.outcome else None
        logger.warning(
            "storage %s of %s at %s failed on attempt %d of %d (%s); retrying in %.2f s",
            operation,
            what,
            endpoint,
            state.attempt_number,
            policy.max_attempts,
            redact(_describe(exc), secrets) if exc else "no error",
            state.upcoming_sleep,
        )

    retrying = Retrying(
        stop=stop_after_attempt(policy.max_attempts) | stop_before_delay(policy.max_seconds),
        wait=wait_random_exponential(
            multiplier=policy.initial_backoff_seconds, max=policy.max_backoff_seconds
        ),
        retry=retry_if_exception(is_transient),
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except Exception as exc:
        failure = storage_failure(exc)
        if failure is None:
            raise
        stats._add(stats.failures, operation)
        transient = is_transient(exc)
        code = error_code(failure)
        elapsed = time.monotonic() - started
        tried = f"after {attempts} attempts over {elapsed:.1f} s" if attempts > 1 else "at once"
        reason = "still failing" if transient else "not retryable"
        hint = what_to_do(failure, code, what)
        message = redact(
            f"storage {operation} of {what} at {endpoint} failed {tried} ({reason}): "
            f"{_describe(exc)}" + (f": {hint}" if hint else ""),
            secrets,
        )
        error_class = ObjectNotFound if code in NOT_FOUND_CODES else StorageError
        raise error_class(
            message,
            operation=operation,
            key=key,
            endpoint=endpoint,
            attempts=attempts,
            transient=transient,
            code=code,
        ) from exc


CREDENTIALS_HINT = (
    "no credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a "
    "profile (AWS_PROFILE, ~/.aws/credentials); where they are in a mounted Secret, set "
    "ROLLOUT_STORAGE_CREDENTIALS_DIR to its directory"
)
REFUSED_CREDENTIALS_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "AccessDenied", "403"}
)


def what_to_do(failure: BaseException, code: str | None, what: str) -> str | None:
    """For failures a person fixes (no credentials, refused ones, no bucket), how."""
    if isinstance(failure, NoCredentialsError):
        return CREDENTIALS_HINT
    if code in REFUSED_CREDENTIALS_CODES:
        return (
            "the credentials were refused: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
            "the profile) and that they may use this bucket"
        )
    if code == "NoSuchBucket":
        bucket = what.removeprefix("s3://").split("/", 1)[0] or "<bucket>"
        return (
            f"the bucket {bucket} does not exist: create it (`aws s3 mb s3://{bucket}`, with "
            "--endpoint-url for MinIO or another S3 service; `mc mb`), or name another one "
            "(--storage-bucket, ROLLOUT_STORAGE_BUCKET); the chart's MinIO creates its bucket"
        )
    return None


def _describe(exc: BaseException) -> str:
    failure = storage_failure(exc) or exc
    return f"{type(failure).__name__}: {failure}"
