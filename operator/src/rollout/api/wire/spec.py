"""How the operator hands the runner its trial: the RolloutTrial spec and the agent's Secrets.

The operator gives the runner container the RolloutTrial's `.spec` as compact camelCase JSON (as
in the resource, `trial_spec_json`) in the environment variable `SPEC_ENV_VAR`; the runner also
takes it from a file named by `--spec`, and reads it back with `parse_spec`. Agent env values
that come from Secrets never appear in the spec: the operator maps each agent EnvVar with
`valueFrom.secretKeyRef` to a variable of the runner container itself, named by
`agent_env_var_name` (`ROLLOUT_AGENT_ENV_<NAME>`), and the runner reads it from its own
environment. Literal values (`value:`) come from the spec.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from rollout.api.errors import InvalidInput
from rollout.api.problems import problems_from_validation_error
from rollout.api.resources import RolloutTrialSpec

SPEC_ENV_VAR = "ROLLOUT_TRIAL_SPEC"
"""The runner container's variable holding the trial spec as JSON (when --spec is not given)."""

AGENT_ENV_PREFIX = "ROLLOUT_AGENT_ENV_"


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
