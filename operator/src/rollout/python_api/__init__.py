"""Seed 002's Python entry points (README, "Python API"):

    from rollout import rollout, quick_rollout, load_config, load_tasks, AgentRunner, RolloutConfig

- `rollout(config_path=..., ...)` runs a RolloutConfig as a job through `rollout run` (on the
  cluster the kubeconfig names, or `local=True` on this machine) and returns seed 002's summary
  (`rollout.python_api.run`);
- `quick_rollout(question, ...)` answers one question in this process, no cluster
  (`rollout.python_api.quick`);
- `load_config(path)` reads a RolloutConfig from JSON or YAML, `RolloutConfig.to_job` says what
  each key becomes (`rollout.python_api.config`);
- `load_tasks(path_or_list)` gives the rows of a benchmark (`rollout.python_api.tasks`);
- `AgentRunner(config, worker_id=...)`, `start()`, `run_task(task)`, `stop()`: programmatic
  control (`rollout.python_api.agent_runner`).

This layer sits above the CLI and local mode (it may use both, and the runner's model agent);
nothing below imports it. Each name is imported when first used (PEP 562), so importing one
does not import the others' dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout.python_api.agent_runner import AgentRunner
    from rollout.python_api.config import RolloutConfig, load_config
    from rollout.python_api.quick import quick_rollout
    from rollout.python_api.run import rollout
    from rollout.python_api.tasks import load_tasks

MODULES = {
    "rollout": "rollout.python_api.run",
    "quick_rollout": "rollout.python_api.quick",
    "load_config": "rollout.python_api.config",
    "load_tasks": "rollout.python_api.tasks",
    "AgentRunner": "rollout.python_api.agent_runner",
    "RolloutConfig": "rollout.python_api.config",
}
"""Each exported name and the module that defines it."""

__all__ = ["AgentRunner", "RolloutConfig", "load_config", "load_tasks", "quick_rollout", "rollout"]


def __getattr__(name: str) -> Any:
    module = MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
