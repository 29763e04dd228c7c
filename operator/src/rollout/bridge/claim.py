"""Which bridge runs a trial, and what a bridge does on seeing one. Pure.

The claim protocol:

1. A trial for the bridge (`for_bridge`) that nobody has claimed is claimed by writing the
   bridge's identity in the annotation `rollout.dev/bridge`, with the resourceVersion it was
   read at as a precondition (`BridgeApi.claim_trial`). Of two bridges that try, one wins; the
   other reads the trial again and leaves it.
2. The winner sets the status: phase Running and the condition `Claimed` (`claimed_status`).
   Only then does the trial's sandbox start. So a trial with the annotation and phase Pending
   never ran; one with phase Running ran, or runs, under that bridge.
3. No bridge ever changes another's claim. A bridge started again under the same identity (the
   chart's Deployment keeps it across restarts, and runs one Pod of it at a time) finds its
   claims: a Pending one is started, a Running one that this process does not run was lost with
   the process before it. Its sandbox is ended and the trial runs again as an infrastructure
   retry, within the job's maxInfraRetries, the lost try's files kept under retries/<n>/: as
   the operator retries a trial whose Pod was lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

from rollout.api.environment import EnvironmentType
from rollout.api.resources import (
    TrialPhase,
)
from rollout.bridge.kube import ANNOTATION_BRIDGE

FINISHED = frozenset({TrialPhase.SUCCEEDED.value, TrialPhase.FAILED.value})


class Step(Enum):
    """What a bridge does about a trial it sees."""

    IGNORE = "ignore"
    """Not this bridge's to run (another's claim, finished, or not a bridge trial)."""
    CLAIM = "claim"
    """Nobody's yet: claim it, then run it."""
    START = "start"
    """Claimed by this bridge, never started: run it."""
    RETRY = "retry"
    """Claimed and started by this bridge's previous process, which is gone: run it again."""
    STOP = "stop"
    """Being deleted (its job was cancelled): stop the run, end the sandbox."""


def for_bridge(body: Mapping[str, Any]) -> bool:
    """Whether the trial is a bridge's: its environment is not a Pod."""
    spec = body.get("spec") or {}
    kind = spec.get("environmentType") or EnvironmentType.KUBERNETES.value
    try:
        return EnvironmentType(kind).runs_on_bridge
    except ValueError:
        return False


def claimant(body: Mapping[str, Any]) -> str | None:
    """The identity of the bridge that claimed the trial, None when none has."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_BRIDGE)
    return str(value) if value else None


def phase(body: Mapping[str, Any]) -> str | None:
    return (body.get("status") or {}).get("phase")


def decide(body: Mapping[str, Any], identity: str, *, running_here: bool) -> Step:
    """The step for a trial as last seen (`running_here`: this process runs it now)."""
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return Step.STOP if running_here else Step.IGNORE
    if running_here or phase(body) in FINISHED or not for_bridge(body):
        return Step.IGNORE
    owner = claimant(body)
    if owner is None:
        return Step.CLAIM
    if owner != identity:
        return Step.IGNORE
    return Step.RETRY if phase(body) == TrialPhase.RUNNING.value else Step.START
