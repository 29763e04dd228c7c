"""Whose failure a trial's error is: the agent's, the task's or the infrastructure's.

RL trainers mask the trials that failed for reasons that are not the agent's (a node taken away,
an image that would not pull, storage down): scored as zeros, they would bias the training
signal. So every trial record says its error's class (`rollout.failure_class` in the trial's
result.json, `status.failureClass` of the RolloutTrial), and the job counts its failed trials per
class. The class is decided here, once: `ERROR_CLASSES` has one row per error type of the seed,
and two rules stand beside it:

- the oracle agent runs the task's own solution/solve.sh, so what the table gives the agent is
  the task's when the agent is the oracle (`failure_class`);
- an image build that could not run at all (no registry to build into, a registry that cannot
  be asked, a build Pod that could not start or was lost) is the infrastructure's, although its
  error type is `environment_build_failed` (`BUILD_NOT_RUN`).

The README's "Failure classes" section gives the reason for each row; a test keeps its table and
this one the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from rollout.api.errors import ErrorType
from rollout.api.rules import ORACLE_AGENT


class FailureClass(StrEnum):
    """Whose failure an error is, as result.json and the resources spell it."""

    AGENT = "agent"
    TASK = "task"
    INFRASTRUCTURE = "infrastructure"


_AGENT = FailureClass.AGENT
_TASK = FailureClass.TASK
_INFRA = FailureClass.INFRASTRUCTURE

ERROR_CLASSES: Final[Mapping[ErrorType, FailureClass]] = MappingProxyType(
    {
        ErrorType.ENVIRONMENT_BUILD_FAILED: _TASK,  # its Dockerfile (a build not run: below)
        ErrorType.ENVIRONMENT_BUILD_TIMEOUT: _TASK,  # its build_timeout_sec
        ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED: _INFRA,  # registry, credentials, network
        ErrorType.ENVIRONMENT_START_FAILED: _INFRA,  # node, runtime, a missing Secret
        ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED: _INFRA,  # no room in the cluster
        ErrorType.AGENT_INSTALL_FAILED: _AGENT,
        ErrorType.AGENT_INSTALL_TIMEOUT: _AGENT,
        ErrorType.AGENT_EXECUTION_FAILED: _AGENT,
        ErrorType.AGENT_EXECUTION_TIMEOUT: _AGENT,
        # test.sh runs in the state the agent left, and is to report a wrong one as reward 0:
        # a crash or a hang cannot be told from an environment the agent broke, and calling it
        # the agent's means breaking the verifier never escapes a score.
        ErrorType.VERIFIER_FAILED: _AGENT,
        ErrorType.VERIFIER_TIMEOUT: _AGENT,
        # test.sh exited 0 yet gave no usable reward: its own logic.
        ErrorType.VERIFIER_REWARD_MISSING: _TASK,
        ErrorType.VERIFIER_REWARD_INVALID: _TASK,
        ErrorType.ENVIRONMENT_TEARDOWN_FAILED: _INFRA,  # the platform's; the reward stands
        ErrorType.TASK_INVALID: _TASK,
        ErrorType.TASK_NOT_FOUND: _TASK,
        ErrorType.INTERNAL_ERROR: _INFRA,  # runner, operator, storage, a Pod lost for good
    }
)
"""The class of each of the seed's error types (see the module docstring for the two rules
beside it, and the README for each row's reason)."""

BUILD_NOT_RUN: Final = FailureClass.INFRASTRUCTURE
"""The class of `environment_build_failed` when the build could not run at all (the operator's
own failure, or the cluster's: `rollout.controller.builds`, `rollout.controller.trials`), where
the table would say the task's."""


def failure_class(error_type: ErrorType, *, agent_name: str) -> FailureClass:
    """The class of a trial's error: the table's, except that the oracle's own errors (those the
    table gives the agent) are the task's, as the oracle runs the task's solution."""
    found = ERROR_CLASSES[error_type]
    if found is FailureClass.AGENT and agent_name == ORACLE_AGENT:
        return FailureClass.TASK
    return found
