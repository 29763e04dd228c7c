"""What the operator writes under a trial's prefix in storage: its record when the runner could
not write one (`records`), the trial's cost in the record its runner wrote, and the files of a
lost try, kept under `retries/<k>/`.

Blocking (boto3): the executor calls these in a thread. Both are safe to repeat, which is what
makes them safe across operator restarts: a record is written only where storage has none
(`put_new`, error.txt before result.json, as the runner writes them: result.json last means
complete), and keeping a try moves what is at the trial's own paths, so a second run finds
nothing left to move.
"""

from __future__ import annotations

import logging

from rollout.api.errors import InvalidInput
from rollout.api.layout import RETRIES_DIR
from rollout.api.results import TrialResult
from rollout.controller.records import OperatorRecord, RecordCost
from rollout.controller.trials import KeepTry
from rollout.storage import ObjectNotFound, ObjectStore

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
