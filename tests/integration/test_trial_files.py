"""`controller.trial_files.try_ran` against a real S3 endpoint (moto): whether a trial's try ran
already, its Pod lost while the operator was not watching, by its files in storage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from s3_kit import S3Settings

from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.records import failed_result
from rollout.api.resources import StorageSpec
from rollout.api.results import TrialError
from rollout.api.trials import TrialKey
from rollout.controller.trial_files import CLOCK_MARGIN, try_ran
from rollout.controller.trials import RetryPod, TryCheck
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

PREFIX = "jobs/j/oracle/d/t__1/"


def check(store: ObjectStore, try_number: int, since: datetime | None) -> TryCheck:
    # `if_ran` is the executor's to carry out; try_ran reads only where and what.
    lost = RetryPod(status={}, old_pod=None, retry=try_number)
    return TryCheck(StorageSpec(bucket=store.bucket), PREFIX, try_number, since, lost)


def record(tries: int) -> bytes:
    now = datetime.now(UTC)
    result = failed_result(
        TrialKey("oracle", "d", "t", 1),
        started=now,
        ended=now,
        in_setup=False,
        error=TrialError(type=ErrorType.INTERNAL_ERROR, message="stopped (SIGTERM)"),
        failure_class=FailureClass.INFRASTRUCTURE,
        tries=tries,
    )
    return result.to_json().encode()


def test_a_first_try_ran_when_any_file_of_it_is_newer_than_its_trial(
    s3_settings: S3Settings,
) -> None:
    store = s3_settings.store()
    made = datetime.now(UTC)
    assert not try_ran(store, check(store, 1, made))  # nothing there: never made
    store.put_bytes(PREFIX + "retries/1/result.json", record(1))
    assert not try_ran(store, check(store, 1, made))  # an earlier run's tries do not count
    store.put_bytes(PREFIX + "logs/agent/started", b"")
    assert try_ran(store, check(store, 1, made))
    # Files of an earlier job of the same name are older than this trial (beyond the margin
    # allowed for storage's clock).
    later = datetime.now(UTC) + CLOCK_MARGIN + timedelta(seconds=2)
    assert not try_ran(store, check(store, 1, later))


def test_a_retry_ran_when_its_own_result_json_says_so(s3_settings: S3Settings) -> None:
    store = s3_settings.store()
    store.put_bytes(PREFIX + "logs/agent/started", b"")
    # Files without a record, or the try before's record: that try's, still to be kept.
    assert not try_ran(store, check(store, 2, None))
    store.put_bytes(PREFIX + "result.json", record(1))
    assert not try_ran(store, check(store, 2, None))
    store.put_bytes(PREFIX + "result.json", record(2))
    assert try_ran(store, check(store, 2, None))
    store.put_bytes(PREFIX + "result.json", b"{not json")
    assert not try_ran(store, check(store, 2, None))
