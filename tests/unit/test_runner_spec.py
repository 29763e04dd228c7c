"""The runner's input: the trial spec as JSON, and the agent's env from the spec and Secrets."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.resources import AgentSpec
from rollout.api.wire.spec import (
    POD_CREATED_ENV_VAR,
    SPEC_ENV_VAR,
    TRY_ENV_VAR,
    agent_env_var_name,
    parse_spec,
    pod_created_at_text,
    try_text,
)
from rollout_runner.spec import load_pod_created_at, load_spec, load_try, resolve_agent_env

SPEC: dict[str, Any] = {
    "jobName": "job",
    "agent": {"name": "oracle"},
    "datasetName": "dataset",
    "taskName": "task",
    "attempt": 1,
    "taskContentHash": "a" * 64,
    "image": "debian:bookworm-slim",
    "resources": {"cpus": "1", "memory": "2G", "storage": "10G"},
    "timeouts": {"agentInstallSec": 300, "agentSec": 600, "verifierSec": 600, "buildSec": 600},
    "storage": {"bucket": "results"},
    "runnerImage": "runner:1",
}


def secret_ref(name: str, optional: bool | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": "keys", "key": name.lower()}
    if optional is not None:
        ref["optional"] = optional
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def test_the_spec_comes_from_a_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(SPEC))
    from_file = load_spec(path, {})
    from_env = load_spec(None, {SPEC_ENV_VAR: json.dumps(SPEC)})
    assert from_file == from_env
    assert from_file.task_name == "task"
    assert from_file.instruction_path == "/tmp/instruction.md"


def test_a_missing_spec_says_how_to_give_one() -> None:
    with pytest.raises(InvalidInput) as caught:
        load_spec(None, {})
    assert str(caught.value) == (
        "environment: ROLLOUT_TRIAL_SPEC: is not set: give the trial spec as JSON in it, "
        "or as a file with --spec"
    )


def test_a_bad_spec_names_its_fields() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_spec(json.dumps({**SPEC, "attempt": 0, "taskContentHash": "x"}), "spec.json")
    fields = {problem.field for problem in caught.value.problems}
    assert fields == {"attempt", "taskContentHash"}
    assert all(problem.file == "spec.json" for problem in caught.value.problems)


def test_the_carrier_variable_of_a_secret_env_var() -> None:
    assert agent_env_var_name("ANTHROPIC_API_KEY") == "ROLLOUT_AGENT_ENV_ANTHROPIC_API_KEY"


def test_literal_values_come_from_the_spec_and_secret_ones_from_the_environment() -> None:
    agent = AgentSpec.model_validate(
        {
            "name": "cpe",
            "execute": "cpe",
            "env": [
                {"name": "MODEL", "value": "sonnet"},
                secret_ref("API_KEY"),
                secret_ref("OPTIONAL_KEY", optional=True),
                {"name": "EMPTY"},
            ],
        }
    )
    env = resolve_agent_env(agent, {"ROLLOUT_AGENT_ENV_API_KEY": "sk-1234", "API_KEY": "no"})
    assert env.values == {"MODEL": "sonnet", "API_KEY": "sk-1234", "EMPTY": ""}
    assert env.secrets == ["sk-1234"]


def test_a_missing_secret_value_is_an_error_naming_the_secret() -> None:
    agent = AgentSpec.model_validate(
        {"name": "cpe", "execute": "cpe", "env": [secret_ref("A"), secret_ref("B")]}
    )
    with pytest.raises(InvalidInput) as caught:
        resolve_agent_env(agent, {"ROLLOUT_AGENT_ENV_A": "value"})
    assert str(caught.value) == (
        "environment: ROLLOUT_AGENT_ENV_B: is not set, but the agent's env B takes its value from "
        "key 'b' of Secret 'keys' through it"
    )


# --- when the trial's Pod was created -------------------------------------------------------------


def test_the_pod_creation_time_round_trips_through_its_variable() -> None:
    created = datetime(2025, 1, 15, 10, 30, 0, 250000, tzinfo=UTC)
    text = pod_created_at_text(created)
    assert text == "2025-01-15T10:30:00.250000Z"
    assert load_pod_created_at({POD_CREATED_ENV_VAR: text}) == created


def test_a_pod_creation_time_with_an_offset_is_read_in_utc() -> None:
    found = load_pod_created_at({POD_CREATED_ENV_VAR: "2025-01-15T12:30:00+02:00"})
    assert found == datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    assert found is not None
    assert found.tzinfo is UTC


@pytest.mark.parametrize("environ", [{}, {POD_CREATED_ENV_VAR: ""}, {POD_CREATED_ENV_VAR: " "}])
def test_an_unset_pod_creation_time_is_unknown(environ: dict[str, str]) -> None:
    assert load_pod_created_at(environ) is None


@pytest.mark.parametrize("text", ["yesterday", "2025-01-15T10:30:00", "1736937000", "2025-13-01Z"])
def test_a_bad_pod_creation_time_names_the_variable(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        load_pod_created_at({POD_CREATED_ENV_VAR: text})
    assert str(caught.value).startswith(f"environment: ROLLOUT_POD_CREATED_AT: is {text!r}, not a")


def test_a_naive_pod_creation_time_is_not_written() -> None:
    with pytest.raises(ValueError, match="no timezone"):
        pod_created_at_text(datetime(2025, 1, 15, 10, 30))


# --- which try at the trial the Pod is ----------------------------------------------------------


def test_the_try_round_trips_through_its_variable() -> None:
    assert load_try({TRY_ENV_VAR: try_text(3)}) == 3
    assert load_try({}) is None
    assert load_try({TRY_ENV_VAR: " "}) is None


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_a_bad_try_names_the_variable(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        load_try({TRY_ENV_VAR: text})
    assert str(caught.value).startswith(f"environment: ROLLOUT_TRY: is {text!r}, not a whole")
