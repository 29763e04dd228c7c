"""Agents that are services rather than scripts: an HTTP endpoint (seed 003) or a model behind an
OpenAI-compatible chat-completions API (seed 002). Their shared rules; the forms that differ
between job.yaml and a resource (header values and the model's key: `${VAR}` text in job.yaml,
a value or a Secret reference in a resource) are `rollout.api.job.JobModel` and
`rollout.api.resources.common.ModelSpec` / `HeaderVar`.

An agent is exactly one kind (`AgentKind`):

- `oracle`: the reserved name; runs the task's solution, takes nothing else;
- `script`: `install` (optional) and `execute`, run with bash in the environment;
- `endpoint`: `endpoint` (an http(s) URL), `headers`, `timeout_sec` (one request's limit,
  `DEFAULT_ENDPOINT_TIMEOUT_SEC`); the runner POSTs seed 003's payload per attempt;
- `model`: `model: {name, base_url, api_key, temperature, max_turns, max_retries,
  system_prompt | system_prompt_file, extra_params}`; the runner converses with the model.

Endpoint and model agents run inside the runner, so a data row they answer needs no
environment container; on a task with an environment, their answer is written to
/logs/agent/ and the task's verifier runs as usual. `env` is allowed for every kind: for an
endpoint or model agent it only feeds the `${VAR}`s of a task's [environment.env].

Tools through seed 002's sandbox server are not part of this project: a model that sets
`available_tools` or a `sandbox_*` key is refused, saying so (`UNSUPPORTED_MODEL_KEYS`).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Final

from pydantic import Field, field_validator, model_validator

from rollout.api.base import ApiModel
from rollout.api.problems import FieldErrors
from rollout.api.rules import ORACLE_AGENT, PositiveInt, not_bool, text

DEFAULT_ENDPOINT_TIMEOUT_SEC: Final = 60.0
"""An endpoint request's limit when the agent gives no `timeout_sec` (seed 003's default)."""
DEFAULT_MODEL_BASE_URL: Final = "https://api.openai.com/v1"
DEFAULT_MAX_TURNS: Final = 10
DEFAULT_MODEL_MAX_RETRIES: Final = 3

CHAT_RESERVED_PARAMS: Final = frozenset({"model", "messages", "temperature"})
"""Request fields of a chat completion that the caller's own settings make (a model agent's, the
llm_judgement evaluator's): their `extra_params` may not set them."""

RUNNER_HEADERS: Final = frozenset({"content-type", "content-length", "host", "traceparent"})
"""Headers of an endpoint request that the runner sets itself (lowercase)."""

HEADER_NAME_PATTERN: Final = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
"""An HTTP header name: an RFC 9110 token."""
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)

UNSUPPORTED_MODEL_KEYS: Final = (
    "available_tools",
    "tools",
    "sandbox_server_url",
    "sandbox_url",
    "sandbox_auto_start",
    "sandbox_config_path",
    "sandbox_timeout",
    "resource_types",
    "resource_init_configs",
)
_TOOLS_MESSAGE = (
    "tools through seed 002's sandbox server are not supported: a model agent answers without "
    "tools (remove {key})"
)


class AgentKind(StrEnum):
    """What an agent is (see the module docstring)."""

    ORACLE = "oracle"
    SCRIPT = "script"
    ENDPOINT = "endpoint"
    MODEL = "model"

    @property
    def in_runner(self) -> bool:
        """The runner itself answers for the agent (an HTTP client): nothing of it runs in the
        environment."""
        return self in (AgentKind.ENDPOINT, AgentKind.MODEL)


def header_name_problem(name: str) -> str | None:
    """What is wrong with an endpoint header's name, or None."""
    if not _HEADER_NAME.match(name):
        return f"{name!r} is not an HTTP header name (letters, digits and !#$%&'*+.^_`|~-)"
    if name.lower() in RUNNER_HEADERS:
        return f"{name} is set by the runner itself and cannot be given"
    return None


def endpoint_url_problem(url: str) -> str | None:
    if not re.match(r"^https?://[^/\s]+", url):
        return f"{url!r} is not an http:// or https:// URL"
    return None


def agent_kind_problems(
    name: str,
    *,
    install: str | None,
    execute: str | None,
    endpoint: str | None,
    timeout_sec: float | None,
    headers: bool,
    model: bool,
) -> list[tuple[str | None, str]]:
    """The rules of what one agent may combine (see the module docstring), as field problems."""
    problems: list[tuple[str | None, str]] = []
    given = {
        "install": install is not None,
        "execute": execute is not None and bool(execute.strip()),
        "endpoint": endpoint is not None,
        "model": model,
    }
    if name == ORACLE_AGENT:
        for field in ("install", "execute", "endpoint", "model"):
            if given[field] or (field == "execute" and execute is not None):
                what = f"{field!r} script" if field in ("install", "execute") else repr(field)
                problems.append(
                    (
                        field,
                        f"the reserved agent {ORACLE_AGENT!r} runs the task's solution/solve.sh "
                        f"and takes no {what}; remove it, or give this agent another name",
                    )
                )
    else:
        kinds = [field for field in ("execute", "endpoint", "model") if given[field]]
        if not kinds:
            problems.append(
                (
                    "execute",
                    f"agent {name!r} needs an 'execute' script, an 'endpoint' or a 'model' (only "
                    f"the reserved agent {ORACLE_AGENT!r} runs without one)",
                )
            )
        elif len(kinds) > 1:
            problems.append(
                (kinds[1], f"an agent is one of: a script, an endpoint, a model; not {kinds}")
            )
        elif given["install"] and not given["execute"]:
            problems.append(("install", "only a script agent (with 'execute') installs"))
    if endpoint is None:
        if headers:
            problems.append(("headers", "only an endpoint agent ('endpoint') sends headers"))
        if timeout_sec is not None:
            problems.append(
                ("timeout_sec", "only an endpoint agent ('endpoint') has a request timeout")
            )
    elif problem := endpoint_url_problem(endpoint):
        problems.append(("endpoint", problem))
    return problems


class ModelBase(ApiModel):
    """A model agent's settings, but its API key (whose form differs; see the module)."""

    name: str = Field(min_length=1, description="The model, as the API names it.")
    base_url: str = Field(
        DEFAULT_MODEL_BASE_URL, description="The OpenAI-compatible API's base URL (…/v1)."
    )
    temperature: float = Field(
        0.0, ge=0.0, le=2.0, allow_inf_nan=False, description="Sampling temperature, 0.0-2.0."
    )
    max_turns: PositiveInt = Field(
        DEFAULT_MAX_TURNS, description="Most chat completions per attempt."
    )
    max_retries: int = Field(
        DEFAULT_MODEL_MAX_RETRIES,
        ge=0,
        strict=True,
        description="Retries of a failed call (connection error, 429, 5xx) after the first try.",
    )
    system_prompt: str | None = Field(
        None, description="The system message; default: a short built-in one."
    )
    extra_params: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        exclude_if=lambda v: not v,
        description="More fields of each request body, e.g. max_tokens.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_tools(cls, data: Any) -> Any:
        if isinstance(data, dict):
            problems: list[tuple[str | None, str]] = [
                (key, _TOOLS_MESSAGE.format(key=key))
                for key in UNSUPPORTED_MODEL_KEYS
                if key in data
            ]
            if problems:
                raise FieldErrors(problems)
        return data

    @field_validator("name", "base_url", "system_prompt", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        return text(value)

    @field_validator("temperature", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return not_bool(value)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if problem := endpoint_url_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("extra_params", mode="before")
    @classmethod
    def _no_params(cls, value: Any) -> Any:
        return {} if value is None else value

    @field_validator("extra_params")
    @classmethod
    def _extra_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        if clash := sorted(CHAT_RESERVED_PARAMS & set(value)):
            raise ValueError(
                f"may not set {', '.join(clash)}: the model's name, the conversation and "
                "temperature make those"
            )
        return value

    def settings(self) -> dict[str, Any]:
        """The fields every form has, to build another form from this one."""
        return {name: getattr(self, name) for name in ModelBase.model_fields}
