"""A finished job's files in object storage: `jobs/<job>/config.json` and `jobs/<job>/result.json`.

config.json is the job's job.yaml as JSON (the seed's "copy of job.yaml"), given back by the one
translation layer (`rollout_job_to_job`). A RolloutJob written by hand may have no job.yaml form
(a dataset without `source`, an agent env var from a Secret of the user's own): its config.json
is then the RolloutJob's spec as it is, under a `rollout_job_spec` key, so that the file always
says what ran.

result.json is `rollout.api.results.aggregate` over the job's trials in trial order, with the
job's own start and end. Writing is idempotent: a restarted operator may write both again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.api.aggregate import TrialOutcome, aggregate
from rollout.api.errors import InvalidInput
from rollout.api.job import job_to_config_json
from rollout.api.layout import job_config_key, job_result_key
from rollout.api.resources import RolloutJob
from rollout.api.results import JobResult
from rollout.api.translate import rollout_job_to_job
from rollout.storage import ObjectStore

log = logging.getLogger(__name__)


def config_json(job: RolloutJob) -> dict[str, Any]:
    """The job's config.json content (see the module docstring)."""
    try:
        return job_to_config_json(rollout_job_to_job(job))
    except InvalidInput as err:
        log.info(
            "RolloutJob %s has no job.yaml form (%s); config.json holds its spec",
            job.metadata.name,
            err,
        )
        return {
            "rollout_job_spec": job.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        }


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
    config_uri: str
    result_uri: str


def _write(store: ObjectStore, job: RolloutJob, result: JobResult) -> WrittenResult:
    prefix = store.location.prefix
    config_key = job_config_key(prefix, job.job_name)
    result_key = job_result_key(prefix, job.job_name)
    config = json.dumps(config_json(job), indent=2, ensure_ascii=False) + "\n"
    store.put_bytes(config_key, config.encode(), "application/json")
    # result.json last: its presence means the job's files are complete.
    store.put_bytes(result_key, result.to_json().encode(), "application/json")
    return WrittenResult(store.uri(config_key), store.uri(result_key))


async def write_job_files(store: ObjectStore, job: RolloutJob, result: JobResult) -> WrittenResult:
    """Write config.json, then result.json, in a thread (boto3 blocks)."""
    return await asyncio.to_thread(_write, store, job, result)
