"""The trial the runner is asked to run: the RolloutTrial spec, the agent's env values and when
the trial's Pod was created.

The runner's side of `rollout.api.wire.spec`: it reads the spec from the file named by `--spec`,
or else from the variable `SPEC_ENV_VAR`, and takes the values of Secret-sourced agent env vars
from its own environment (`agent_env_var_name`). Literal values (`value:`) come from the spec.
The Pod's creation time (`POD_CREATED_ENV_VAR`) is where the trial's timings start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rollout.api.envrefs import HEADER_SLOT_PREFIX, MODEL_KEY_SLOT
from rollout.api.errors import InvalidInput, Problem
from rollout.api.resources import AgentSpec, RolloutTrialSpec
from rollout.api.wire.spec import (
    POD_CREATED_ENV_VAR,
    SPEC_ENV_VAR,
    TRY_ENV_VAR,
    agent_secret_carriers,
    parse_pod_created_at,
    parse_spec,
    parse_try,
)


@dataclass(frozen=True)
class AgentEnv:
    """The agent's values: env for install and execute, an endpoint's headers, a model's key,
    and which of them are secrets."""

    values: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    """Values that came from Secrets: scrubbed wherever the runner writes (see `redact`)."""
    headers: dict[str, str] = field(default_factory=dict)
    """An endpoint agent's request headers, in the spec's order."""
    model_api_key: str | None = field(default=None, repr=False)
    """A model agent's API key; None: it sends no Authorization header."""


def load_spec(path: Path | None, environ: Mapping[str, str]) -> RolloutTrialSpec:
    """Read the trial spec from the file `path`, or else from `ROLLOUT_TRIAL_SPEC`.

    Raises InvalidInput naming the file (or the variable) and each field that is wrong.
    """
    if path is not None:
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise InvalidInput.one(source, None, f"cannot be read: {err.strerror or err}") from None
        except UnicodeDecodeError as err:
            raise InvalidInput.one(source, None, f"not UTF-8 text ({err.reason})") from None
    else:
        source = SPEC_ENV_VAR
        text = environ.get(SPEC_ENV_VAR, "")
        if not text.strip():
            raise InvalidInput.one(
                "environment",
                SPEC_ENV_VAR,
                "is not set: give the trial spec as JSON in it, or as a file with --spec",
            )
    return parse_spec(text, source)


def load_pod_created_at(environ: Mapping[str, str]) -> datetime | None:
    """When the operator created the trial's Pod, from `ROLLOUT_POD_CREATED_AT`; None when unset.

    Unset (or empty) means unknown, and the trial is timed from the runner's start: a runner run
    by hand, or by an operator that does not set it, still works. A value that is not a time is
    refused like any other bad input (InvalidInput naming the variable): it can only come from a
    mismatch between operator and runner, and timings quietly measured from the wrong moment
    would go unnoticed.
    """
    text = environ.get(POD_CREATED_ENV_VAR, "")
    if not text.strip():
        return None
    return parse_pod_created_at(text)


def load_try(environ: Mapping[str, str]) -> int | None:
    """Which try at the trial the runner's Pod is, from `ROLLOUT_TRY`; None when unset (unknown:
    result.json then leaves `rollout.tries` out). A value that is not a whole number from 1 is
    refused, naming the variable."""
    text = environ.get(TRY_ENV_VAR, "")
    if not text.strip():
        return None
    return parse_try(text)


def resolve_agent_env(agent: AgentSpec, environ: Mapping[str, str]) -> AgentEnv:
    """The agent's values: literal ones from the spec, Secret-backed ones from `environ`, where
    the operator (or local mode) put them (`agent_secret_carriers`).

    A Secret-backed value whose runner variable is missing is an error, unless its
    secretKeyRef is optional (Kubernetes then leaves it unset too).
    """
    given: dict[str, str] = {}
    secrets: list[str] = []
    problems: list[Problem] = []
    for carrier in agent_secret_carriers(agent):
        value = environ.get(carrier.variable)
        if value is None:
            if not carrier.selector.optional:
                ref = carrier.selector
                problems.append(
                    Problem(
                        "environment",
                        carrier.variable,
                        f"is not set, but the agent's {_slot_label(carrier.slot)} takes its value "
                        f"from key {ref.key!r} of Secret {ref.name!r} through it",
                    )
                )
            continue
        given[carrier.slot] = value
        secrets.append(value)
        if carrier.slot.startswith(HEADER_SLOT_PREFIX) and len(value.split()) > 1:
            # `Bearer <token>`: an endpoint that echoes the token alone must not leak it.
            secrets.append(value.split()[-1])
    if problems:
        raise InvalidInput(problems)
    values: dict[str, str] = {}
    for var in agent.env:
        if var.value_from is None:
            values[var.name] = var.value or ""
        elif var.name in given:
            values[var.name] = given[var.name]
    headers: dict[str, str] = {}
    for header in agent.headers:
        if header.value_from is None:
            headers[header.name] = header.value or ""
        elif (slot := f"{HEADER_SLOT_PREFIX}{header.name}") in given:
            headers[header.name] = given[slot]
    return AgentEnv(
        values=values,
        secrets=secrets,
        headers=headers,
        model_api_key=given.get(MODEL_KEY_SLOT),
    )


def _slot_label(slot: str) -> str:
    if slot == MODEL_KEY_SLOT:
        return "model api_key"
    if slot.startswith(HEADER_SLOT_PREFIX):
        return f"header {slot.removeprefix(HEADER_SLOT_PREFIX)}"
    return f"env {slot}"
