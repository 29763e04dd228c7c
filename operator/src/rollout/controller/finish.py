"""A finished job's file in object storage: `jobs/<job>/result.json`.

result.json is `rollout.api.results.aggregate` over the job's trials in trial order, with the
job's own start and end. Writing is idempotent: a restarted operator may write it again.
(config.json, the job as submitted, is in storage from the job's start: `jobconfig`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rollout.api.aggregate import TrialOutcome, aggregate
from rollout.api.layout import job_result_key
from rollout.api.resources import RolloutJob
from rollout.api.results import JobResult
from rollout.storage import ObjectStore


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


def _write(store: ObjectStore, job: RolloutJob, result: JobResult) -> WrittenResult:
    result_key = job_result_key(store.location.prefix, job.job_name)
    store.put_bytes(result_key, result.to_json().encode(), "application/json")
    return WrittenResult(store.uri(result_key))


async def write_job_files(store: ObjectStore, job: RolloutJob, result: JobResult) -> WrittenResult:
    """Write result.json, in a thread (boto3 blocks)."""
    return await asyncio.to_thread(_write, store, job, result)
