"""The runner's input: the trial spec as JSON, and the agent's env from the spec and Secrets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.resources import AgentSpec
from rollout.api.wire.spec import SPEC_ENV_VAR, agent_env_var_name, parse_spec
from rollout_runner.spec import load_spec, resolve_agent_env

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
        "environment: ROLLOUT_AGENT_ENV_B: is not set, but agent.env[1] (B) takes its value from "
        "key 'b' of Secret 'keys' through it"
    )
