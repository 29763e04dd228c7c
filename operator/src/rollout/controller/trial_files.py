"""What the operator writes under a trial's prefix in storage: its record when the runner could
not write one (`records`), the trial's cost in the record its runner wrote, and the files of a
lost try, kept under `retries/<k>/`; and beside the job, the log of a failed image build its
trials waited for (`jobs/<job>/builds/`). And what it reads there: whether a try whose Pod went
unseen ran (`try_ran`).

Blocking (boto3): the executor calls these in a thread. Both are safe to repeat, which is what
makes them safe across operator restarts: a record is written only where storage has none
(`put_new`, error.txt before result.json, as the runner writes them: result.json last means
complete), and keeping a try moves what is at the trial's own paths, so a second run finds
nothing left to move.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from rollout.api.errors import InvalidInput
from rollout.api.layout import RESULT_JSON, RETRIES_DIR, parse_s3_uri
from rollout.api.results import TrialResult
from rollout.controller.records import OperatorRecord, RecordCost
from rollout.controller.trials import CopyBuildLog, KeepTry, TryCheck
from rollout.storage import ObjectNotFound, ObjectStore, StorageError

log = logging.getLogger(__name__)

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


def write_record(store: ObjectStore, record: OperatorRecord) -> None:
    """Write the operator's record where the trial has none (the runner's, or an earlier
    write's, is kept)."""
    if record.error_text is not None:
        store.put_new(record.error_key, record.error_text.encode(), TEXT)
    if not store.put_new(record.result_key, record.result.to_json().encode(), JSON):
        log.info("%s is in storage already; kept", store.uri(record.result_key))


def set_cost(store: ObjectStore, cost: RecordCost) -> None:
    """Set the trial's cost in the result.json its runner wrote (unless it has it already).

    Every other byte's meaning is kept: the file is read and written back through the model,
    which keeps the seed's key order and everything under `rollout`. A record that is missing
    or unreadable is left alone (logged): the trial's status has the cost all the same.
    """
    try:
        result = TrialResult.from_json(store.get_bytes(cost.result_key))
    except ObjectNotFound:
        log.warning("%s is not in storage: its cost is not written", store.uri(cost.result_key))
        return
    except InvalidInput as err:
        log.warning(
            "%s cannot be read, its cost is not written: %s", store.uri(cost.result_key), err
        )
        return
    if result.cost != cost.cost:
        result.cost = cost.cost
        store.put_bytes(cost.result_key, result.to_json().encode(), JSON)


def keep_try(store: ObjectStore, keep: KeepTry) -> None:
    """Move the files at the trial's own paths (not its earlier tries') under
    `retries/<number>/`. Copies first, then deletes: interrupted, it is run again and finishes
    the move."""
    earlier = f"{keep.prefix}{RETRIES_DIR}/"
    keys = [key for key in store.list_keys(keep.prefix) if not key.startswith(earlier)]
    for key in keys:
        store.copy(key, keep.destination + key.removeprefix(keep.prefix))
    store.delete_keys(keys, keep.prefix)
    if keys:
        log.info("kept %d files of try %d under %s", len(keys), keep.number, keep.destination)


CLOCK_MARGIN = timedelta(seconds=5)
"""How far storage's clock may be behind the API server's when a file's time is compared with
a trial's creation (`try_ran`)."""


def try_ran(store: ObjectStore, check: TryCheck) -> bool:
    """Whether the trial's current try ran already, by its files in storage (`TryCheck`)."""
    if check.since is not None:
        earlier = f"{check.prefix}{RETRIES_DIR}/"
        since = check.since - CLOCK_MARGIN
        written = store.list_modified(check.prefix)
        return any(when >= since for key, when in written.items() if not key.startswith(earlier))
    try:
        record = TrialResult.from_json(store.get_bytes(check.prefix + RESULT_JSON))
    except ObjectNotFound:
        return False
    except InvalidInput as err:
        log.warning("%s cannot be read: %s", store.uri(check.prefix + RESULT_JSON), err)
        return False
    return record.rollout is not None and record.rollout.tries == check.try_number


def copy_build_log(store: ObjectStore, copy: CopyBuildLog) -> None:
    """Copy a failed build's log to where the job keeps it, unless it is there already. A log
    in another bucket, or gone, is left where it is (logged): the trials' records quote its end
    and say where it is."""
    if store.exists(copy.key):
        return
    bucket, source = parse_s3_uri(copy.source)
    if bucket != store.bucket:
        log.info("build log %s is in another bucket: not copied beside the job", copy.source)
        return
    try:
        store.copy(source, copy.key)
    except (ObjectNotFound, StorageError) as err:
        log.warning("build log %s could not be copied to %s: %s", copy.source, copy.key, err)
