"""A finished job's files in object storage: `jobs/<job>/result.json`, and with data rows seed
002's `results.jsonl`, `evaluation.json` and `summary_<benchmark>_<timestamp>.json`.

result.json is `rollout.api.results.aggregate` over the job's trials in trial order, with the
job's own start and end; the seed 002 files are `rollout.api.rowresults`' over the rows' lines.
Writing is idempotent: a restarted operator may write them again.
(config.json, the job as submitted, is in storage from the job's start: `jobconfig`.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from rollout.api.aggregate import TrialOutcome, aggregate
from rollout.api.errors import InvalidInput
from rollout.api.layout import RESULT_JSON, job_prefix, job_result_key, trial_prefix
from rollout.api.plan import PlannedShard
from rollout.api.resources import RolloutJob
from rollout.api.results import JobResult, TrialResult
from rollout.api.rowresults import (
    RESULTS_JSONL,
    ROW_LINE,
    ResultLine,
    RowFileSettings,
    line_of_record,
    parse_line,
    row_files,
)
from rollout.api.rowrun import RowVerifier
from rollout.api.trial_spec import row_verifier
from rollout.storage import ObjectNotFound, ObjectStore

log = logging.getLogger(__name__)

READERS = 16
"""Rows' lines read at once when a job with data rows ends: one small GET each (two for a
row without a score, `_row_line`)."""


def job_result(
    job: RolloutJob,
    trials: Sequence[TrialOutcome],
    *,
    started_at: datetime | None,
    ended_at: datetime | None,
) -> JobResult:
    """The job's result.json model, its trials listed in trial order."""
    return aggregate(
        job.job_name,
        trials,
        metrics=[m.type for m in job.spec.metrics],
        started_at=started_at,
        ended_at=ended_at,
    )


@dataclass(frozen=True)
class WrittenResult:
    result_uri: str


def _write(
    store: ObjectStore, job: RolloutJob, result: JobResult, shards: Sequence[PlannedShard]
) -> WrittenResult:
    if shards:
        _write_row_files(store, job, result, shards)
    result_key = job_result_key(store.location.prefix, job.job_name)
    store.put_bytes(result_key, result.to_json().encode(), "application/json")
    return WrittenResult(store.uri(result_key))


async def write_job_files(
    store: ObjectStore,
    job: RolloutJob,
    result: JobResult,
    shards: Sequence[PlannedShard] = (),
) -> WrittenResult:
    """Write seed 002's files of the job's data rows (`shards`), then result.json, in a thread
    (boto3 blocks): result.json last, so that its presence means the job's files are whole."""
    return await asyncio.to_thread(_write, store, job, result, shards)


@dataclass(frozen=True)
class _RowFiles:
    """A row's trial directory, its verifier's label and its reward as the job counts it."""

    trial_dir: str
    verifier: str
    reward: float | None


def _row_line(store: ObjectStore, row: _RowFiles) -> ResultLine | None:
    """The row's line of results.jsonl: its runner's (row.json) when that says what the row's
    record says, else one made from the record (result.json).

    The runner uploads row.json just before result.json; a runner lost in between leaves a
    line without a record, and the record the operator then writes (or an earlier try's) says
    otherwise. The line's score is checked against the reward the job counts (no request);
    a line without a score, against the record's error (one more GET)."""
    line_key = row.trial_dir + ROW_LINE
    try:
        line: ResultLine | None = parse_line(store.get_bytes(line_key), line_key)
    except (ObjectNotFound, InvalidInput):
        line = None
    if line is not None and line.score is not None and line.score == row.reward:
        return line
    try:
        record = TrialResult.from_json(store.get_bytes(row.trial_dir + RESULT_JSON))
    except (ObjectNotFound, InvalidInput):
        log.warning("%s has no record: left out of results.jsonl", store.uri(row.trial_dir))
        return None
    return line_of_record(record, line, verifier=row.verifier)


def _write_row_files(
    store: ObjectStore, job: RolloutJob, result: JobResult, shards: Sequence[PlannedShard]
) -> None:
    """results.jsonl, evaluation.json and the summary, from every row's line (row.json; a row
    its runner never recorded has only the operator's result.json)."""
    prefix = store.location.prefix
    name = job.job_name
    rewards = {
        (r.agent_name, r.dataset_name, r.task_name, r.attempt): r.reward for r in result.results
    }
    work: list[_RowFiles] = []
    for shard in shards:
        verifier = RowVerifier.of(row_verifier(job, shard)).label()
        for trial in shard.trials:
            key = trial.key
            trial_dir = trial_prefix(prefix, name, key.agent, key.dataset, key.task, key.attempt)
            reward = rewards.get((key.agent, key.dataset, key.task, key.attempt))
            work.append(_RowFiles(trial_dir, verifier, reward))

    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="rollout-lines") as pool:
        lines = [found for found in pool.map(partial(_row_line, store), work) if found is not None]
    datasets = list(dict.fromkeys(shard.key.dataset for shard in shards))
    spec = job.spec
    at = result.ended_at or datetime.now(UTC)
    base = job_prefix(prefix, name)
    files = row_files(
        lines,
        RowFileSettings(save_results=spec.save_results, save_summary=spec.save_summary),
        benchmark_name=datasets[0] if len(datasets) == 1 else name,
        total_time_seconds=result.total_duration_sec,
        at=at,
        uri=lambda file: store.uri(base + file),
    )
    for file, data in files.items():
        kind = "application/x-ndjson" if file == RESULTS_JSONL else "application/json"
        store.put_bytes(base + file, data, kind)
