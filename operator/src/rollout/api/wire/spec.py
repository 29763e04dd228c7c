"""How the operator hands the runner its trial: the RolloutTrial spec, the agent's Secrets and
the moment the trial's Pod was created.

The operator gives the runner container the RolloutTrial's `.spec` as compact camelCase JSON (as
in the resource, `trial_spec_json`) in the environment variable `SPEC_ENV_VAR`; the runner also
takes it from a file named by `--spec`, and reads it back with `parse_spec`. Agent env values
that come from Secrets never appear in the spec: the operator maps each agent EnvVar with
`valueFrom.secretKeyRef` to a variable of the runner container itself, named by
`agent_env_var_name` (`ROLLOUT_AGENT_ENV_<NAME>`), and the runner reads it from its own
environment. Literal values (`value:`) come from the spec.

The runner cannot see when its Pod was created (it has no Kubernetes API access, and the downward
API does not expose `creationTimestamp`), yet the seed's environment setup includes everything
before the runner starts: scheduling, the image pull, the container start. So the operator sets
`POD_CREATED_ENV_VAR` to the moment it creates the Pod (`pod_created_at_text`, RFC 3339 in UTC,
`2025-01-15T10:30:00.123456Z`) and the runner reads it back with `parse_pod_created_at`. The
variable is optional: a runner started without it (by hand, or by an operator that predates it)
times the trial from its own start.

A trial runs again in a new Pod when its Pod is lost (an infrastructure retry); `TRY_ENV_VAR`
says which try the runner's Pod is (1 for the first, `try_text`, `parse_try`), and the runner
writes it as `rollout.tries` in the trial's result.json. Unset: unknown, and left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from rollout.api.envrefs import HEADER_SLOT_PREFIX, MODEL_KEY_SLOT
from rollout.api.errors import InvalidInput
from rollout.api.problems import problems_from_validation_error
from rollout.api.resources import AgentSpec, RolloutTrialSpec, SecretKeySelector
from rollout.api.results import format_timestamp

SPEC_ENV_VAR = "ROLLOUT_TRIAL_SPEC"
"""The runner container's variable holding the trial spec as JSON (when --spec is not given)."""

AGENT_ENV_PREFIX = "ROLLOUT_AGENT_ENV_"

POD_CREATED_ENV_VAR = "ROLLOUT_POD_CREATED_AT"
"""The runner container's variable holding when the operator created the trial's Pod."""

TRY_ENV_VAR = "ROLLOUT_TRY"
"""The runner container's variable holding which try at the trial its Pod is, from 1."""


HEADER_ENV_PREFIX = "ROLLOUT_AGENT_HEADER_"
MODEL_KEY_ENV_VAR = "ROLLOUT_AGENT_MODEL_API_KEY"


@dataclass(frozen=True)
class SecretCarrier:
    """A runner variable that carries one Secret-backed value of the agent."""

    variable: str
    """The runner container's variable."""
    selector: SecretKeySelector
    """The Secret key it takes its value from."""
    slot: str
    """Which value of the agent (`rollout.api.envrefs.AgentText.slot`): the env KEY,
    `header:<Name>` or `model:api_key`."""


def agent_secret_carriers(agent: AgentSpec) -> list[SecretCarrier]:
    """Every Secret-backed value of `agent` and the runner variable carrying it: env vars as
    `ROLLOUT_AGENT_ENV_<NAME>`, endpoint headers as `ROLLOUT_AGENT_HEADER_<index>` (header
    names are not all variable names), the model's key as `ROLLOUT_AGENT_MODEL_API_KEY`. The
    operator sets them from the Secret, local mode from the resolved values; the runner reads
    them."""
    carriers = [
        SecretCarrier(agent_env_var_name(var.name), var.value_from.secret_key_ref, var.name)
        for var in agent.env
        if var.value_from is not None
    ]
    carriers += [
        SecretCarrier(
            f"{HEADER_ENV_PREFIX}{index}",
            header.value_from.secret_key_ref,
            f"{HEADER_SLOT_PREFIX}{header.name}",
        )
        for index, header in enumerate(agent.headers)
        if header.value_from is not None
    ]
    if agent.model is not None and agent.model.api_key is not None:
        carriers.append(SecretCarrier(MODEL_KEY_ENV_VAR, agent.model.api_key, MODEL_KEY_SLOT))
    return carriers


def agent_env_var_name(name: str) -> str:
    """The runner container's variable that carries the Secret-sourced agent env var `name`.

    The operator sets `ROLLOUT_AGENT_ENV_<name>` from the same secretKeyRef in the runner
    container; agent env names are shell names (letters, digits, underscores), so the result is
    one too.
    """
    return f"{AGENT_ENV_PREFIX}{name}"


def trial_spec_json(spec: RolloutTrialSpec) -> str:
    """The spec as the runner reads it (`parse_spec`): compact camelCase JSON.

    Agent env vars from Secrets appear only as their `valueFrom` references, never as values.
    """
    return json.dumps(
        spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        separators=(",", ":"),
        ensure_ascii=False,
    )


def parse_spec(text: str | bytes, source: str = "trial spec") -> RolloutTrialSpec:
    """Validate the JSON of a RolloutTrial spec; problems name `source` and the field."""
    try:
        return RolloutTrialSpec.model_validate_json(text)
    except ValidationError as err:
        raise InvalidInput(problems_from_validation_error(err, source)) from None


def pod_created_at_text(created_at: datetime) -> str:
    """`created_at` (timezone-aware) as `POD_CREATED_ENV_VAR` holds it: RFC 3339 in UTC, `...Z`.

    Raises ValueError for a naive time: nobody could tell which clock it came from.
    """
    return format_timestamp(created_at)


def parse_pod_created_at(text: str) -> datetime:
    """The moment in `POD_CREATED_ENV_VAR`, in UTC; InvalidInput names the variable.

    Any RFC 3339 time with its offset is read (`Z`, `+00:00`, `+02:00`); one without an offset
    is refused.
    """
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        value = None
    if value is None or value.utcoffset() is None:
        raise InvalidInput.one(
            "environment",
            POD_CREATED_ENV_VAR,
            f"is {text!r}, not a time with its offset such as 2025-01-15T10:30:00Z (when the "
            "operator created the trial's Pod; leave it unset when that is not known)",
        )
    return value.astimezone(UTC)


def try_text(try_number: int) -> str:
    """`try_number` (from 1) as `TRY_ENV_VAR` holds it."""
    if try_number < 1:
        raise ValueError(f"a try is numbered from 1, not {try_number}")
    return str(try_number)


def parse_try(text: str) -> int:
    """The try in `TRY_ENV_VAR`; InvalidInput names the variable."""
    value = text.strip()
    if not value.isdigit() or int(value) < 1:
        raise InvalidInput.one(
            "environment",
            TRY_ENV_VAR,
            f"is {text!r}, not a whole number from 1 (which try at the trial this Pod is; leave "
            "it unset when that is not known)",
        )
    return int(value)
