"""A shard of data rows once it has finished: each row's outcome for the shard's status, and
a record for each row its runner never recorded.

A shard's runner writes every row's result.json itself (`rollout_runner.shard`). When the shard
ends otherwise (its image would not pull, its Pod was lost more often than the job allows, the
runner died halfway, the job was deleted before it started), some rows have no record: the
operator writes one for each, with the shard's error (`records.failure_record`, written where
storage has none, so a row the runner did record keeps its own). Then every row's outcome goes
into the shard's status, in one patch: the job's figures count rows, and a restarted operator
finds them there without reading storage again.

Reading a shard's records costs one GET per row, a few at a time, once per shard; no API write.
Before a shard runs again (its Pod was lost), the rows it will run again have their earlier
files moved under `retries/<k>/`, as a trial's are (`keep_row_tries`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.failures import failure_class
from rollout.api.records import keeps_record
from rollout.api.results import TrialError, TrialResult
from rollout.api.rowrun import RowItem, RowOutcome
from rollout.api.trials import TrialKey
from rollout.controller.index import TrialEntry
from rollout.controller.records import OperatorRecord, TrialPlace, failure_record
from rollout.controller.trial_files import keep_try, write_record
from rollout.controller.trials import KeepTry
from rollout.storage import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

READERS = 8
"""Rows read at once: each is one small GET, mostly waiting."""

UNRECORDED = (
    "The shard's runner ended without recording this row (it stopped before reaching it, or "
    "its files did not reach storage)."
)


def shard_items(body: Mapping[str, Any]) -> list[RowItem]:
    """The rows a shard's RolloutTrial runs, from its spec."""
    rows = (body.get("spec") or {}).get("rows") or {}
    return [RowItem.model_validate(item) for item in rows.get("items") or []]


def shard_error(status: Mapping[str, Any]) -> TrialError | None:
    """The shard's own error, from the status about to be written (camelCase)."""
    error = status.get("error")
    if not isinstance(error, Mapping) or not error.get("type"):
        return None
    try:
        return TrialError(type=ErrorType(error["type"]), message=str(error.get("message") or ""))
    except ValueError:
        return TrialError(type=ErrorType.INTERNAL_ERROR, message=str(error.get("message") or ""))


def finish_rows(
    store: ObjectStore,
    place: TrialPlace,
    trial: TrialEntry,
    items: Sequence[RowItem],
    *,
    error: TrialError | None,
    now: datetime,
    pod_name: str | None,
) -> list[RowOutcome]:
    """Every row's outcome, writing the records its runner did not (see the module docstring).

    `error` is the shard's (None when its runner finished): a row without a record gets it, or,
    without one, `UNRECORDED` as internal_error."""
    missing_error = error or TrialError(type=ErrorType.INTERNAL_ERROR, message=UNRECORDED)

    def one(item: RowItem) -> RowOutcome:
        key = TrialKey(trial.agent, trial.dataset, item.id, item.attempt)
        result = read_record(store, place.result_key(key))
        if result is None:
            record = _record(place, trial, key, missing_error, now, pod_name)
            write_record(store, record)
            result = read_record(store, record.result_key) or record.result
        return outcome(item, result)

    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="rollout-rows") as pool:
        return list(pool.map(one, items))


def keep_row_tries(
    store: ObjectStore, place: TrialPlace, trial: TrialEntry, items: Sequence[RowItem], number: int
) -> None:
    """Before a shard's next try: the files of each row it will run again (no record, or one
    the runner does not keep: `keeps_record`) move under the row's `retries/<number>/`, as a
    trial's do, so that the row's next try starts from a clean place. Kept rows stay."""

    def one(item: RowItem) -> None:
        key = TrialKey(trial.agent, trial.dataset, item.id, item.attempt)
        if keeps_record(read_record(store, place.result_key(key))):
            return
        # A resumed job's row had tries before this shard: its try is counted after them.
        earlier = (item.try_number or 1) - 1
        keep_try(store, KeepTry(place.storage, place.prefix(key), earlier + number))

    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="rollout-rows") as pool:
        list(pool.map(one, items))


def cancelled_rows(
    place: TrialPlace,
    trial: TrialEntry,
    items: Sequence[RowItem],
    *,
    message: str,
    now: datetime,
) -> list[OperatorRecord]:
    """The records of a shard's rows when its job is deleted before the shard's runner started
    (written where storage has none: rows recorded by an earlier try keep theirs)."""
    error = TrialError(type=ErrorType.INTERNAL_ERROR, message=message)
    return [
        _record(place, trial, TrialKey(trial.agent, trial.dataset, i.id, i.attempt), error, now)
        for i in items
    ]


def outcome(item: RowItem, result: TrialResult) -> RowOutcome:
    error_type = result.error.type if result.error is not None else None
    return RowOutcome(
        id=item.id,
        attempt=item.attempt,
        reward=result.reward,
        error_type=error_type,
        failure_class=result.failure_class,
    )


def read_record(store: ObjectStore, key: str) -> TrialResult | None:
    """A trial's (or row's) result.json; None when it has none, or one that cannot be read."""
    try:
        return TrialResult.from_json(store.get_bytes(key))
    except ObjectNotFound:
        return None
    except InvalidInput as err:
        # Kept as it is (a record is never overwritten); it counts as none: a row unrecorded,
        # a resumed job's trial run again (its file moved under retries/).
        log.warning("%s cannot be read: %s", store.uri(key), err)
        return None


def _record(
    place: TrialPlace,
    trial: TrialEntry,
    key: TrialKey,
    error: TrialError,
    now: datetime,
    pod_name: str | None = None,
) -> OperatorRecord:
    return failure_record(
        key,
        place,
        tries=trial.tries,
        created_at=trial.created_at,
        error=error,
        failure_class=failure_class(error.type, agent_name=trial.agent),
        pod=None,
        pod_name=pod_name,
        ended_at=now,
    )
