"""`rollout run JOB.yaml --resume` on a cluster (../DESIGN.md, "Resume"): the job of that name
runs again as a new RolloutJob with `spec.resume`, and the operator runs only the trials the rule
runs again (`rollout.controller.resume`).

A RolloutJob of that name that has finished (Completed or Failed) is replaced: deleted first,
which takes only its resources (its trials, Pods and Secret; its results stay in storage), and
waited for until the API has let it go. One still running is refused: its trials would be
stopped mid-run. After the job, the local copy of its results mirrors storage, where the
trials that ran again moved their earlier files under `retries/<k>/`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.names import GROUP, LABEL_JOB, VERSION
from rollout.api.resources import JobPhase, RolloutJob, RolloutTrial
from rollout.api.trials import label_value
from rollout.cli.errors import CliError, note
from rollout.cli.kube import Cluster

REPLACEABLE = frozenset({JobPhase.COMPLETED.value, JobPhase.FAILED.value})
"""Phases of a RolloutJob that --resume replaces: it runs nothing any more."""

TRIALS = RolloutTrial.resource.plural

GONE_TIMEOUT_SEC = 120.0
"""How long --resume waits for the RolloutJob it replaces to be deleted."""


def refusal(existing: dict[str, Any], where: str) -> str | None:
    """Why the existing RolloutJob of the job's name cannot be replaced; None when it can."""
    metadata = existing.get("metadata") or {}
    name = metadata.get("name")
    if metadata.get("deletionTimestamp"):
        return None  # on its way: waited for
    phase = (existing.get("status") or {}).get("phase") or JobPhase.PENDING.value
    if phase in REPLACEABLE:
        return None
    return (
        f"a RolloutJob {name} ({phase}) is still running in {where}: --resume runs a finished "
        f"job's trials again; wait for it (`rollout status {name} --watch`) or stop it "
        f"(`rollout cancel {name}`) first"
    )


def resumed_job(job: RolloutJob, retry_errors: list[ErrorType]) -> RolloutJob:
    """The RolloutJob with `spec.resume` (and the error types to run again)."""
    spec = job.spec.model_copy(update={"resume": True, "retry_errors": list(retry_errors)})
    return job.model_copy(update={"spec": spec})


def replace(cluster: Cluster, name: str, *, timeout: float = GONE_TIMEOUT_SEC) -> None:
    """Delete the finished RolloutJob `name` and wait until the API has let it go (the
    operator takes its finalizer off once it has seen the deletion), and its trials with it
    (the garbage collector deletes them after the job: a new trial of the same name cannot be
    made before)."""
    if cluster.delete_job(name):
        note(f"--resume: deleting the finished RolloutJob {name} (its results stay in storage)")
    deadline = time.monotonic() + timeout
    while (found := cluster.get_job(name)) is not None:
        if time.monotonic() > deadline:
            finalizers = (found.get("metadata") or {}).get("finalizers") or []
            raise CliError(
                f"RolloutJob {name} in {cluster.where} is still being deleted after "
                f"{timeout:.0f} s (finalizers: {', '.join(finalizers) or 'none'}); is the "
                f"operator running? `rollout release {name}` frees it; then run again with "
                "--resume"
            )
        time.sleep(0.5)
    selector = f"{LABEL_JOB}={label_value(name)}"
    while time.monotonic() < deadline:
        try:
            left = cluster.list_objects(
                GROUP, VERSION, TRIALS, namespace=cluster.namespace, label_selector=selector
            )
        except CliError:
            return  # not allowed to list them: the operator waits for them instead
        if not left:
            return
        time.sleep(0.5)
    # The operator makes each trial once its namesake of the old job is gone.
    note(f"--resume: trials of the old RolloutJob {name} are still being deleted")


def prune_stale(target: Path, written: list[Path]) -> int:
    """Remove the files under `target` that are not among `written` (the download of the
    job's prefix), and directories left empty; how many files went. A resumed job moved the
    files of the trials it ran again under their `retries/`: the old copies must not stay."""
    keep = {path.resolve() for path in written}
    removed = 0
    if not target.is_dir():
        return 0
    for path in sorted(target.rglob("*"), reverse=True):
        if path.is_symlink() or path.is_file():
            if path.parent.resolve() / path.name not in keep:
                path.unlink()
                removed += 1
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return removed
