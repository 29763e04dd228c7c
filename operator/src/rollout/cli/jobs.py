"""Which job a command means, and where its results are.

A JOB argument is a RolloutJob's name, or a job's own name (job.yaml's `name`, which may not be a
valid resource name: `My Eval` is the RolloutJob `my-eval-<hash>`). When no RolloutJob has that
name any more (it was cancelled, or its TTL ran out), the argument is taken as the job's name, so
its results can still be read from storage.

Where results are: the bucket and prefix come from the RolloutJob's spec.storage when it has one
(that is where the job wrote); how the CLI reaches that storage (endpoint, region, path style)
comes from the CLI's own settings where they are given, else from spec.storage too. Without
spec.storage (the operator's default storage) or without a RolloutJob, the CLI's settings say it
all.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout.cli.config import CliSettings
from rollout.cli.kube import Cluster
from rollout.cli.kubeconfig import ClusterError
from rollout.storage import ObjectStore

DEFAULT_JOBS_DIR = "jobs"


@dataclass(frozen=True)
class JobRef:
    """A job as a command found it: in the cluster (`body`), or only by name."""

    name: str
    """The RolloutJob's name (the argument, when there is no RolloutJob)."""
    job_name: str
    """The job's own name: its results are under jobs/<job_name>/."""
    body: dict[str, Any] | None

    @property
    def spec(self) -> dict[str, Any]:
        return dict((self.body or {}).get("spec") or {})

    @property
    def jobs_dir(self) -> str:
        return str(self.spec.get("jobsDir") or DEFAULT_JOBS_DIR)


def connect_optional(args: argparse.Namespace, environ: Mapping[str, str]) -> Cluster | None:
    """The cluster, or None (with a note on stderr) when there is no kubeconfig to use: reading
    results needs only storage."""
    try:
        return Cluster.from_args(args, environ)
    except ClusterError as err:
        print(f"note: {err}; reading object storage only", file=sys.stderr)
        return None


def find_job(cluster: Cluster | None, name: str) -> JobRef:
    """The job `name` (see the module docstring); `cluster` None means storage only."""
    body = cluster.find_job(name) if cluster is not None else None
    if body is None:
        return JobRef(name=name, job_name=name, body=None)
    resource = str(body["metadata"]["name"])
    job_name = str((body.get("spec") or {}).get("jobName") or resource)
    return JobRef(name=resource, job_name=job_name, body=body)


def results_settings(job: JobRef, settings: CliSettings) -> CliSettings:
    """The CLI's settings for reading `job`'s results (see the module docstring)."""
    spec = job.spec.get("storage")
    if isinstance(spec, Mapping) and spec.get("bucket"):
        path_style = spec.get("pathStyle")
        settings = dataclasses.replace(
            settings,
            bucket=str(spec["bucket"]),
            prefix=str(spec.get("prefix") or ""),
            endpoint=settings.endpoint or spec.get("endpoint"),
            region=settings.region or spec.get("region"),
            path_style=settings.path_style if settings.path_style is not None else path_style,
        )
    return settings


def results_store(job: JobRef, settings: CliSettings, environ: Mapping[str, str]) -> ObjectStore:
    return results_settings(job, settings).object_store(environ)
