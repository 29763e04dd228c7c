"""Rules that job.yaml and the custom resources share, written once.

Each is a plain function (or an annotated type) that the models of both surfaces call, so that
`rollout validate`, the CLI and the operator refuse the same things with the same words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from rollout.api.layout import check_component
from rollout.api.quantity import cpu_millicores, quantity_bytes

ORACLE_AGENT = "oracle"
"""The reserved agent name: runs the task's solution/solve.sh, needs no install or execute."""

DEFAULT_INSTRUCTION_PATH = "/tmp/instruction.md"

NAME_PATTERN = r"^([^/\\\x00.][^/\\\x00]*|\.[^/\\\x00.][^/\\\x00]*|\.\.[^/\\\x00]+)$"
"""A name that is one safe path segment (job, agent, dataset, task): not empty, "." or "..", no
slash, backslash or NUL. The same rule as `rollout.api.layout.check_component`, as a regex for the
CRD (RE2 has no lookahead, hence the three alternatives)."""

DIGEST_PATTERN = r"^[0-9a-f]{64}$"
"""sha256 in lowercase hex: a dataset manifest's digest, a task's content hash."""


PositiveInt = Annotated[int, Field(ge=1, strict=True)]
PositiveSeconds = Annotated[float, Field(ge=0, strict=True, allow_inf_nan=False)]


def check_name(value: str, what: str) -> str:
    """`value` if it can be a directory name and an object-storage key segment."""
    return check_component(value, what)


def check_instruction_path(value: str) -> str:
    """An absolute path of a file in the container."""
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must be an absolute path (e.g. /tmp/instruction.md)")
    if value.endswith("/") or "\0" in value:
        raise ValueError(f"{value!r} must be the path of a file")
    return value


def duplicate_problems(
    names: Sequence[str], what: str, listed_as: str, field: str = "name"
) -> list[tuple[str | None, str]]:
    """`[i].<field>: duplicate <what> 'x' (also <listed_as>[j])` for each repeat, the field
    relative to the list."""
    first: dict[str, int] = {}
    problems: list[tuple[str | None, str]] = []
    for index, name in enumerate(names):
        if name in first:
            problems.append(
                (
                    f"[{index}].{field}",
                    f"duplicate {what} {name!r} (also {listed_as}[{first[name]}])",
                )
            )
        else:
            first[name] = index
    return problems


def quantity_as_written(value: Any) -> Any:
    """An override as written, except that a float becomes a string (0.5 -> "0.5"): a Kubernetes
    quantity is an integer or a string."""
    not_bool(value)
    if isinstance(value, float):
        return repr(value)
    return value


def check_cpus_override(value: int | str | None) -> int | str | None:
    """`override_cpus` checked with task.toml's rule for cpus."""
    if value is not None:
        cpu_millicores(value)
    return value


def check_bytes_override(value: int | str | None) -> int | str | None:
    """`override_memory`/`override_storage` checked with task.toml's rule (a bare number: MiB)."""
    if value is not None:
        quantity_bytes(value)
    return value


def zero_is_unset(value: float | None) -> float | None:
    """The seed's verifier timeouts: 0 means "not set", as null does."""
    return None if value == 0 else value


def not_bool(value: Any) -> Any:
    """`value`, unless it is a boolean: YAML's `yes`/`true` would otherwise pass as the number 1."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


def text(value: Any, hint: str = "quote it in YAML") -> Any:
    """`value`, unless it is there and not a string (YAML reads `version: 2.0` as a number)."""
    if value is not None and not isinstance(value, str):
        kind = "a number" if isinstance(value, int | float) else type(value).__name__
        raise ValueError(f"expected a string, got {kind} ({value!r}): {hint}")
    return value


# --- annotated types: the rule in Python and, as a pattern, in the CRD -----------------------


def _name_of(what: str) -> AfterValidator:
    return AfterValidator(lambda value: check_name(value, what))


def _pattern(pattern: str) -> dict[str, Any]:
    return {"pattern": pattern}


def matching_pattern(pattern: str, what: str) -> AfterValidator:
    """Check `pattern` in Python with a message that says what was expected."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.search(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


AGENT_VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$"
"""A built-in agent's version: what npm, PyPI and release tags take."""
MODEL_NAME_PATTERN = r"^\S+$"
"""A built-in agent's model: any name without spaces (claude-sonnet-4-5, openai/gpt-5, ...)."""

AgentVersion = Annotated[
    str,
    matching_pattern(AGENT_VERSION_PATTERN, "a version (letters, digits and . _ + -, e.g. 1.2.3)"),
    Field(json_schema_extra=_pattern(AGENT_VERSION_PATTERN)),
]
ModelName = Annotated[
    str,
    matching_pattern(MODEL_NAME_PATTERN, "a model name (not empty, no spaces)"),
    Field(json_schema_extra=_pattern(MODEL_NAME_PATTERN)),
]
JobName = Annotated[str, _name_of("job name"), Field(json_schema_extra=_pattern(NAME_PATTERN))]
AgentName = Annotated[str, _name_of("agent name"), Field(json_schema_extra=_pattern(NAME_PATTERN))]
DatasetName = Annotated[
    str, _name_of("dataset name"), Field(json_schema_extra=_pattern(NAME_PATTERN))
]
TaskName = Annotated[str, _name_of("task name"), Field(json_schema_extra=_pattern(NAME_PATTERN))]
Digest = Annotated[
    str,
    matching_pattern(DIGEST_PATTERN, "a sha256 digest (64 lowercase hex digits)"),
    Field(json_schema_extra=_pattern(DIGEST_PATTERN)),
]
InstructionPath = Annotated[
    str, AfterValidator(check_instruction_path), Field(json_schema_extra=_pattern("^/"))
]
