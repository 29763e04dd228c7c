"""The built-in agents: popular CLI agents, shipped as data, so `- name: claude-code` just works.

One YAML file per agent under `agents/` (`BuiltinAgent`): what it is, the command it runs, where
its flags are documented, its pinned default version and model, the API keys it needs by the
model's provider, and its install and execute scripts. `lib.sh` (bash functions that install OS
packages, node, Python tools, and record usage) is put before each script, so a script a user
copies from `rollout agents show` runs as it is.

How an agent becomes a built-in (`builtin_name`): `builtin: NAME` says so; else an agent whose name
is a built-in's and that gives neither `install` nor `execute` (an agent with a script of its own
is the user's, whatever its name: a job written before the built-in existed keeps its meaning), and
is no endpoint or model agent. `oracle` is never a built-in. Its parameters reach the scripts as
environment variables (`parameter_env`): the version, the model and the extra flags. Any field the
agent gives wins over the built-in's.

Files are read when an agent names them, one at a time (a runner that runs one agent reads one).
"""

from __future__ import annotations

import shlex
from functools import cache, cached_property
from importlib import resources
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rollout.api.envrefs import env_key_problem
from rollout.api.rules import ORACLE_AGENT

VERSION_ENV: Final = "ROLLOUT_AGENT_VERSION"
MODEL_ENV: Final = "ROLLOUT_AGENT_MODEL"
FLAGS_ENV: Final = "ROLLOUT_AGENT_FLAGS"

SCRIPT_HEADER: Final = "#!/bin/bash\nset -euo pipefail\n"
_PACKAGE = resources.files(__name__)


class KeyRule(BaseModel):
    """The API keys an agent needs, by the provider its model names (the text before "/")."""

    model_config = ConfigDict(extra="forbid")

    default: list[str] = Field(
        default_factory=list, description="Keys when the model names no provider listed below."
    )
    providers: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("default", "providers")
    @classmethod
    def _env_names(cls, value: list[str] | dict[str, list[str]]) -> object:
        names = value if isinstance(value, list) else [k for v in value.values() for k in v]
        for name in names:
            if problem := env_key_problem(name):
                raise ValueError(f"{name!r}: {problem}")
        return value


class BuiltinAgent(BaseModel):
    """One file of the catalogue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    command: str = Field(description="The executable the execute script runs.")
    docs: str = Field(description="Where the CLI flags the scripts use are documented.")
    version: str = Field(description="The version install gets when the job names none.")
    model: str | None = Field(None, description="The model when the job names none.")
    keys: KeyRule = Field(default_factory=KeyRule)
    install: str
    execute: str

    def keys_for(self, model: str | None) -> list[str]:
        """The environment variables holding the API keys this agent needs for `model`."""
        provider = model.split("/", 1)[0] if model and "/" in model else None
        if provider is not None and provider in self.keys.providers:
            return list(self.keys.providers[provider])
        return list(self.keys.default)

    # Made once per agent (`get` keeps each agent): every validation of a built-in's agent
    # asks for its execute script.
    @cached_property
    def install_script(self) -> str:
        return _script(self.install)

    @cached_property
    def execute_script(self) -> str:
        return _script(self.execute)


class CatalogueError(RuntimeError):
    """A catalogue file is malformed: a bug of the package, not of the user's job."""


def names() -> list[str]:
    """Every built-in agent's name, sorted."""
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in _PACKAGE.joinpath("agents").iterdir()
        if entry.name.endswith(".yaml")
    )


@cache
def get(name: str) -> BuiltinAgent | None:
    """The built-in agent `name`, or None when there is none."""
    if name == ORACLE_AGENT or not name or "/" in name or name.startswith("."):
        return None
    entry = _PACKAGE.joinpath("agents", f"{name}.yaml")
    if not entry.is_file():
        return None
    import yaml  # only where an agent is a built-in

    try:
        agent = BuiltinAgent.model_validate(yaml.safe_load(entry.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogueError(f"the built-in agent file {name}.yaml is malformed: {err}") from None
    if agent.name != name:
        raise CatalogueError(f"{name}.yaml names the agent {agent.name!r}")
    return agent


def builtin_name(
    name: object, *, builtin: object, install: object, execute: object, other_kind: bool
) -> str | None:
    """The built-in an agent's raw fields select (see the module docstring), or None."""
    if isinstance(builtin, str):
        return builtin
    if not isinstance(name, str) or other_kind or install is not None or execute is not None:
        return None
    return name if get(name) is not None else None


def unknown_builtin_message(name: str) -> str:
    if name == ORACLE_AGENT:
        return f"{ORACLE_AGENT!r} is the reserved agent that runs the task's solution, no built-in"
    return f"there is no built-in agent {name!r} (built-ins: {', '.join(names())})"


def parameter_env(version: str | None, model: str | None, flags: list[str]) -> dict[str, str]:
    """What a built-in's scripts read: its version, model and extra flags (shell-quoted)."""
    return {
        VERSION_ENV: version or "",
        MODEL_ENV: model or "",
        FLAGS_ENV: shlex.join(flags),
    }


@cache
def library() -> str:
    """lib.sh: the functions every built-in's scripts may call."""
    return _PACKAGE.joinpath("lib.sh").read_text(encoding="utf-8")


def _script(body: str) -> str:
    return f"{SCRIPT_HEADER}{library()}\n{body}"
