"""Rollout: run agent evaluations and RL rollouts on Kubernetes.

Seed 002's Python entry points are importable from here (README, "Python API"):

    from rollout import rollout, quick_rollout, load_config, load_tasks, AgentRunner, RolloutConfig

They are imported when first used (PEP 562 `__getattr__`), so that `import rollout.api.job`
imports no more than it did: the models, the CLI and the operator never pay for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout.python_api import (
        AgentRunner,
        RolloutConfig,
        load_config,
        load_tasks,
        quick_rollout,
        rollout,
    )

__all__ = ["AgentRunner", "RolloutConfig", "load_config", "load_tasks", "quick_rollout", "rollout"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("rollout.python_api"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
