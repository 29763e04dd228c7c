"""The effective timeout of each phase of a trial, from the task and the job.

The seed's job.yaml: `verifier.override_timeout_sec` replaces the task's verifier timeout when
set, `verifier.max_timeout_sec` caps it when set (0 means unset for both), and
`timeout_multiplier` applies to ALL timeouts: the task's and the job's override and ceiling alike.
Since the multiplier is positive, scaling before or after capping gives the same result.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import ConfigDict, Field

from rollout.api.base import ApiModel
from rollout.api.task import TaskConfig

TimeoutSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class PhaseTimeouts(ApiModel):
    """Effective timeouts in seconds: the task's, after job overrides and the multiplier.

    A RolloutTrial carries them in spec.timeouts, so neither the Pod renderer nor the runner
    reads the task's or the job's settings again.
    """

    model_config = ConfigDict(frozen=True)

    agent_install_sec: TimeoutSeconds = Field(description="Agent install script.")
    agent_sec: TimeoutSeconds = Field(description="Agent execute script.")
    verifier_sec: TimeoutSeconds = Field(description="Verifier (tests/test.sh).")
    build_sec: TimeoutSeconds = Field(description="Environment image build.")


def effective_timeouts(
    task: TaskConfig,
    *,
    multiplier: float = 1.0,
    verifier_override_sec: float | None = None,
    verifier_max_sec: float | None = None,
) -> PhaseTimeouts:
    """Each phase's timeout for a trial of `task` under the job's timeout settings."""
    if not (math.isfinite(multiplier) and multiplier > 0):
        raise ValueError(f"timeout_multiplier must be a positive number, got {multiplier!r}")
    _check_optional("verifier.override_timeout_sec", verifier_override_sec)
    _check_optional("verifier.max_timeout_sec", verifier_max_sec)
    verifier = task.verifier.timeout_sec
    if verifier_override_sec:
        verifier = verifier_override_sec
    if verifier_max_sec:
        verifier = min(verifier, verifier_max_sec)
    return PhaseTimeouts(
        build_sec=task.environment.build_timeout_sec * multiplier,
        agent_install_sec=task.agent.install_timeout_sec * multiplier,
        agent_sec=task.agent.timeout_sec * multiplier,
        verifier_sec=verifier * multiplier,
    )


def _check_optional(name: str, value: float | None) -> None:
    # 0 and None both mean "not set"; a negative or infinite value is a mistake, not "unset".
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be 0 (unset) or a positive number, got {value!r}")
