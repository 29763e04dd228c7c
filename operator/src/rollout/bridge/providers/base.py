"""What the bridge asks of a provider: start a trial's sandbox, find those it owns, end them.

A provider's sandbox is the trial's environment as the runner's phases see it
(`rollout_runner.environment.Environment`: run a command with env, user, cwd and a timeout; put
and get files; kill every process; stop), so setup, agent, verifier, collection, error types and
uploads are the code a trial Pod's runner runs. What differs per provider is only how a sandbox
starts, what its operations cost in round trips, and how it ends.

Every sandbox carries labels (tags, metadata: whatever the provider has) naming its trial and the
bridge that started it (`sandbox_labels`), so that a bridge started again finds the sandboxes of
its earlier run and ends those whose trial is no longer running (`Provider.owned`). Labels never
hold a secret.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rollout.api.names import LABEL_COMPONENT
from rollout.api.resources import LABEL_JOB, LABEL_TRIAL, RolloutTrialSpec
from rollout.api.trials import label_value
from rollout.local.sandbox import SandboxStartFailed
from rollout_runner.environment import Environment

LABEL_BRIDGE = "rollout.dev/bridge"
"""The identity of the bridge that started a sandbox (`BridgeSettings.identity`)."""
LABEL_NAMESPACE = "rollout.dev/namespace"
"""The namespace of the sandbox's RolloutTrial."""
LABEL_PRESERVED = "rollout.dev/preserved"
"""On a sandbox kept after its trial (preserveEnv)."""
BRIDGE_COMPONENT = "bridge-sandbox"
"""The component label of every sandbox a bridge starts."""


def sandbox_labels(
    namespace: str, trial_name: str, job_name: str, bridge: str, *, preserved: bool = False
) -> dict[str, str]:
    """The labels of a trial's sandbox: which trial, which job, which bridge, and whether it is
    kept after the trial (the job's preserveEnv: no sweep removes it)."""
    labels = {
        LABEL_COMPONENT: BRIDGE_COMPONENT,
        LABEL_NAMESPACE: label_value(namespace),
        LABEL_TRIAL: label_value(trial_name),
        LABEL_JOB: label_value(job_name),
        LABEL_BRIDGE: label_value(bridge),
    }
    if preserved:
        labels[LABEL_PRESERVED] = "true"
    return labels


class ProviderError(SandboxStartFailed):
    """A sandbox could not be started (or the provider refused), as local mode's sandboxes fail:
    the trial fails with `error_type`, one of the seed's environment_* types (internal_error
    where the provider's SDK or credentials are missing). The message names what failed, never
    a secret."""


@dataclass(frozen=True)
class SandboxRequest:
    """What a provider needs to start one trial's sandbox."""

    namespace: str
    trial_name: str
    """The RolloutTrial's metadata.name."""
    spec: RolloutTrialSpec
    labels: Mapping[str, str]
    """`sandbox_labels` of the trial: set on the sandbox (never a secret)."""
    task_dir: Path | None
    """The task's files, extracted from its archive (environment/ holds the Dockerfile), for a
    provider that builds the image from them: when `spec.builds_image`. None otherwise."""


class Sandbox(Environment):
    """A started sandbox: the trial's environment, and how to end it."""

    @property
    @abc.abstractmethod
    def sandbox_id(self) -> str:
        """The provider's id for it (a container id, a sandbox id)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """How a user finds it (for messages and a kept sandbox's note)."""

    @abc.abstractmethod
    async def terminate(self) -> None:
        """End the sandbox and remove it. Idempotent: safe in any state, and after `stop`."""

    async def reported_cost(self) -> float | None:
        """What the provider says the sandbox cost so far, where it says (None: it does not;
        the bridge's unit prices apply)."""
        return None


@dataclass(frozen=True)
class OwnedSandbox:
    """A sandbox a provider holds for a bridge, as its labels describe it."""

    sandbox_id: str
    namespace: str
    """The `LABEL_NAMESPACE` label (a label value: `label_value` of the namespace)."""
    trial_name: str
    """The `LABEL_TRIAL` label (`label_value` of the trial's name)."""
    preserved: bool = False

    def of_trial(self, namespace: str, trial_name: str) -> bool:
        """Whether it is the sandbox of that trial."""
        return (self.namespace, self.trial_name) == (
            label_value(namespace),
            label_value(trial_name),
        )


class Provider(abc.ABC):
    """One kind of sandbox (per address or account, as the provider's settings say)."""

    name: str
    """The environment type it serves (`docker`, `modal`, ...)."""

    @abc.abstractmethod
    async def start(self, request: SandboxRequest) -> Sandbox:
        """Start the trial's sandbox from its image (pulled where absent, or built from
        `request.task_dir`) with the trial's resources, and return it running; `wait_ready` is
        then called on it. Raises ProviderError (nothing is left behind then)."""

    @abc.abstractmethod
    async def owned(self, bridge: str) -> list[OwnedSandbox]:
        """The sandboxes labelled with `bridge`'s identity, running or not."""

    @abc.abstractmethod
    async def terminate(self, sandbox_id: str) -> None:
        """End and remove a sandbox by id (one `owned` found); done when it is gone already."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the provider's connections."""
