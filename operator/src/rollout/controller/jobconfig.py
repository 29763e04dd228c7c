"""A job's `jobs/<job>/config.json`: the job as submitted, in storage from the job's start.

`rollout run` writes it before it creates the RolloutJob: the job file as written, as JSON. A
RolloutJob applied without the CLI (kubectl, GitOps) has no file to copy, so the operator writes
its job.yaml form when it accepts the job (`jobdecide.WriteJobConfig`, before the job's first
trial): the one translation layer gives it back (`rollout_job_to_job`), `${VAR}` references and
all. A RolloutJob with no job.yaml form (a dataset without `source`, an agent env var from a
Secret of the user's own) gets its spec as it is, under a `rollout_job_spec` key, so that the
file always says what was submitted.

Either way it is written once: only where storage has none (`ObjectStore.put_new`), so the
CLI's file is never overwritten, and neither a restarted operator nor a new generation of the
spec writes it again. Deleting the job (cancelling it) leaves it in storage.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rollout.api.errors import InvalidInput
from rollout.api.job import config_json_text, job_to_config_json
from rollout.api.layout import job_config_key
from rollout.api.resources import RolloutJob
from rollout.api.translate import rollout_job_to_job
from rollout.storage import ObjectStore

log = logging.getLogger(__name__)


def config_json(job: RolloutJob) -> dict[str, Any]:
    """The config.json content of a job applied without the CLI (see the module docstring)."""
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


def _write(store: ObjectStore, job: RolloutJob) -> bool:
    key = job_config_key(store.location.prefix, job.job_name)
    text = config_json_text(config_json(job))
    written = store.put_new(key, text.encode(), "application/json")
    if written:
        log.info("RolloutJob %s: wrote %s", job.metadata.name, store.uri(key))
    return written


async def write_job_config(store: ObjectStore, job: RolloutJob) -> bool:
    """Write the job's config.json unless storage has one; True when this call wrote it. In a
    thread (boto3 blocks)."""
    return await asyncio.to_thread(_write, store, job)
