"""The task.toml keys this project reads but cannot honour, and what happens instead.

A task written for a newer Harbor still runs here (unknown keys are kept, never fatal), but a
key that asks for something a trial Pod cannot give must not be ignored in silence: `rollout
validate` warns about each one, naming it (`unhonoured_keys`). Keys no one needs to act on (such
as metadata) are not listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout.api.task import TaskConfig


@dataclass(frozen=True)
class Unhonoured:
    """A key the task sets, and what happens instead of what it asks."""

    key: str
    instead: str

    def __str__(self) -> str:
        return f"{self.key}: {self.instead}"


PHASE_NETWORK = (
    "per-phase network access is not switched during a trial: the [environment] network "
    "access applies to every phase"
)


def unhonoured_keys(config: TaskConfig) -> list[Unhonoured]:
    """Every key of `config` that cannot be honoured, in task.toml's order of tables."""
    environment = config.environment
    env_extra = _extra(environment)
    found: list[Unhonoured] = []
    os_name = env_extra.get("os")
    if os_name is not None and str(os_name).lower() != "linux":
        found.append(
            Unhonoured(
                "environment.os",
                f"is {os_name!r}: trials run as Linux Pods, so a {os_name} image does not start",
            )
        )
    if "tpu" in env_extra:
        found.append(Unhonoured("environment.tpu", "no TPU is requested for the trial's Pod"))
    if env_extra.get("gpu_types"):
        found.append(
            Unhonoured(
                "environment.gpu_types",
                "the GPU type is not chosen: any GPU the cluster offers as nvidia.com/gpu",
            )
        )
    if "healthcheck" in env_extra:
        found.append(
            Unhonoured("environment.healthcheck", "not run: the trial starts once the shim is up")
        )
    if environment.mcp_servers:
        found.append(
            Unhonoured("environment.mcp_servers", "no MCP server is started for the agent")
        )
    if environment.allowed_hosts and not environment.egress.restricted:
        found.append(
            Unhonoured(
                "environment.allowed_hosts",
                'ignored: the task has full network access (set network_mode = "allowlist")',
            )
        )
    for section, extra in (("agent", _extra(config.agent)), ("verifier", _extra(config.verifier))):
        for key in ("network_mode", "allowed_hosts"):
            if key in extra:
                found.append(Unhonoured(f"{section}.{key}", PHASE_NETWORK))
    if "environment" in _extra(config.verifier):
        found.append(
            Unhonoured(
                "verifier.environment",
                "no separate verifier environment: the verifier runs in the task's environment",
            )
        )
    if "steps" in _extra(config):
        found.append(
            Unhonoured(
                "steps",
                "multi-step tasks are not run step by step: the trial runs the task's own "
                "instruction.md and tests/ once",
            )
        )
    return found


def _extra(model: Any) -> Mapping[str, Any]:
    return model.model_extra or {}
