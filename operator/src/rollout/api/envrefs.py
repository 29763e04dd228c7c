"""Agent and task environment variables: their names, and `${VAR}` references in their values.

A value holding `${NAME}` takes its value from the environment of the process that submits the
job (the CLI); anything else is literal. Only `${NAME}` with a name of letters, digits and
underscores is a reference; `${...}` of any other shape is an error rather than a silently
literal value. The models never hold a resolved value: config.json and the RolloutJob keep the
`${VAR}` text, and resolved values exist only in `resolve_agent_env`'s result (the CLI puts them
in a Secret).

A task's `[environment.env]` values take their `${NAME}`s from the trial's agent env instead
(`resolve_task_env`), when the trial runs: that is the one place a trial has the job's values,
through the same Secret, whether the job came from the CLI or from kubectl.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rollout.api.errors import ErrorType, InvalidInput, Problem

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""Environment variable names: POSIX shell names, so install and execute scripts can read them."""

INSTRUCTION_ENV_VAR = "ROLLOUT_TASK_INSTRUCTION"
"""Set by Rollout to `instruction_path` for the agent; an agent's env may not set it."""

_ENV_NAME = re.compile(ENV_NAME_PATTERN)
_REFERENCE = re.compile(r"\$\{([^}]*)\}")


HEADER_SLOT_PREFIX = "header:"
MODEL_KEY_SLOT = "model:api_key"


@dataclass(frozen=True)
class AgentText:
    """One value of an agent that may hold `${VAR}`: an env value, an endpoint header's value or
    a model's api_key. `slot` names it among the agent's values (`KEY` for env, `header:<Name>`,
    `model:api_key`; env names have no colon, so slots never clash); `field` is where job.yaml
    has it under the agent (`env.KEY`, `headers.Name`, `model.api_key`)."""

    slot: str
    field: str
    text: str


class AgentWithEnv(Protocol):
    """An agent of job.yaml: its name and its values that may hold `${VAR}`."""

    @property
    def name(self) -> str: ...

    @property
    def env(self) -> dict[str, str]: ...

    def texts(self) -> list[AgentText]: ...


class JobWithAgents(Protocol):
    """A job of job.yaml, as far as its agents' env goes."""

    @property
    def agents(self) -> Sequence[AgentWithEnv]: ...


def env_key_problem(key: str) -> str | None:
    """What is wrong with an env variable name, or None."""
    if not _ENV_NAME.match(key):
        return f"{key!r} is not a valid environment variable name (letters, digits, underscores)"
    if key == INSTRUCTION_ENV_VAR:
        return f"{INSTRUCTION_ENV_VAR} is set by Rollout to instruction_path; set that instead"
    return None


def env_references(value: str) -> list[str]:
    """The variable names `${NAME}` in `value`, in order, each once."""
    names: list[str] = []
    for match in _REFERENCE.finditer(value):
        if match[1] not in names:
            names.append(match[1])
    return names


def env_value_problem(value: str) -> str | None:
    """What is wrong with the `${...}` references of an env value, or None."""
    for match in _REFERENCE.finditer(value):
        if not _ENV_NAME.match(match[1]):
            return (
                f"unsupported reference {match[0]!r}: only ${{NAME}} is supported, NAME made of "
                "letters, digits and underscores"
            )
    if "${" in _REFERENCE.sub("", value):
        return "'${' without a closing '}'"
    return None


def substitute(value: str, environ: Mapping[str, str]) -> str:
    """`value` with each `${NAME}` replaced from `environ` (every name must be there)."""
    return _REFERENCE.sub(lambda m: environ[m[1]], value)


def agent_env_references(job: JobWithAgents) -> dict[str, dict[str, list[str]]]:
    """`{agent: {KEY: [VAR, ...]}}` for every env value that refers to a variable."""
    found: dict[str, dict[str, list[str]]] = {}
    for agent in job.agents:
        for key, value in agent.env.items():
            if names := env_references(value):
                found.setdefault(agent.name, {})[key] = names
    return found


def resolve_agent_env(
    job: JobWithAgents, environ: Mapping[str, str], *, file: str | Path = "job.yaml"
) -> dict[str, dict[str, str]]:
    """`{agent: {slot: value}}` for every value of each agent that may hold `${VAR}` (its env,
    endpoint headers and model key; `AgentText`), each `${VAR}` taken from `environ`.

    Every unset variable is reported at once, naming the agent, the field and the variable.
    """
    resolved: dict[str, dict[str, str]] = {}
    problems: list[Problem] = []
    for index, agent in enumerate(job.agents):
        values: dict[str, str] = {}
        for item in agent.texts():
            missing = [name for name in env_references(item.text) if name not in environ]
            builtin = getattr(agent, "builtin", None)
            for name in missing:
                why = (
                    f"the built-in agent {builtin!r} needs it; export it, or give "
                    f"{item.field} in the job"
                    if builtin is not None and item.text == f"${{{name}}}"
                    else f"agent {agent.name!r} takes {item.field.removeprefix('env.')} from "
                    f"${{{name}}}"
                )
                problems.append(
                    Problem(
                        str(file),
                        f"agents[{index}].{item.field}",
                        f"environment variable {name} is not set ({why})",
                    )
                )
            if not missing:
                values[item.slot] = substitute(item.text, environ)
        resolved[agent.name] = values
    if problems:
        raise InvalidInput(problems)
    return resolved


def resolve_task_env(
    env: Mapping[str, str], agent_env: Mapping[str, str], *, task: str, agent: str
) -> dict[str, str]:
    """A task's `[environment.env]` with every `${VAR}` taken from the agent's env values.

    Every key that cannot be given (a bad name, a bad reference, a variable the agent's env does
    not set) is reported at once, naming the task, the key and, for a variable, what to set.
    """
    resolved: dict[str, str] = {}
    problems: list[Problem] = []
    file = f"task {task!r}: task.toml"

    def problem(key: str, message: str) -> None:
        problems.append(Problem(file, f"environment.env.{key}", message))

    for key, value in env.items():
        if why := env_key_problem(key) or env_value_problem(value):
            problem(key, why)
            continue
        missing = [name for name in env_references(value) if name not in agent_env]
        for name in missing:
            problem(
                key,
                f"takes ${{{name}}}, which agent {agent!r} does not set: give {name} in the "
                f"agent's env (job.yaml: `{name}: ${{{name}}}`)",
            )
        if not missing:
            resolved[key] = substitute(value, agent_env)
    if problems:
        raise InvalidInput(problems, ErrorType.TASK_INVALID)
    return resolved
