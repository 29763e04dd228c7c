"""What the operator puts in a container reaches the process byte for byte, through the kubelet.

The kubelet expands `$(NAME)` and `$$` in command, args and env values
(tests/kubeharness/kubelet.py plays it exactly). On a real cluster, main once wrote the shim's `$$`
(its pid) and the agents' scripts unescaped: every trial ended `environment_start_failed`, and an
agent's `echo $$` printed `$`.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from kubeharness.kubelet import container_argv, container_env, expand
from rollout.api.resources import RolloutTrialSpec
from rollout.api.wire.shim import shim_command
from rollout.api.wire.spec import agent_env_var_name, trial_spec_json
from rollout.controller.config import OperatorConfig
from rollout.controller.kubelet_text import kubelet_literal
from rollout.controller.pod import render_trial_pod
from rollout_runner.spec import load_pod_created_at, load_spec

# The script a maintainer ran on a real cluster; main's Pod turned it into
# `pid-literal: $$ pid: $ sub: sub-ok home: `.
FAULT_SCRIPT = (
    'echo "pid-literal: \\$\\$ pid: $$ sub: $(echo sub-ok) home: $(HOME)" > /logs/agent/out.txt'
)


@pytest.mark.parametrize(
    ("text", "variables", "expanded"),
    [
        ("$$", {}, "$"),
        ("pid=$$", {}, "pid=$"),
        ("$$$$", {}, "$$"),
        ("$(HOME)", {"HOME": "/tmp"}, "/tmp"),
        ("$(HOME)", {}, "$(HOME)"),  # unknown: kept as written
        ("$$(HOME)", {"HOME": "/tmp"}, "$(HOME)"),  # escaped reference
        ("$(echo sub-ok)", {}, "$(echo sub-ok)"),
        ("$(unclosed", {"unclosed": "x"}, "$(unclosed"),
        ("$x $1 ${A}", {"A": "a"}, "$x $1 ${A}"),
        ("trailing $", {}, "trailing $"),
        ("$(A)$(B)", {"A": "1", "B": "2"}, "12"),
        ("$(A)", {"A": "$$"}, "$$"),  # a value is substituted, not expanded again
    ],
)
def test_the_kubelet_expansion(text: str, variables: dict[str, str], expanded: str) -> None:
    assert expand(text, variables) == expanded


def test_env_values_see_only_the_variables_declared_before_them() -> None:
    env = container_env(
        {
            "env": [
                {"name": "LATER_REF", "value": "$(B)"},
                {"name": "B", "value": "b"},
                {"name": "EARLIER_REF", "value": "$(B)/x"},
                {"name": "EMPTY", "value": ""},
            ]
        }
    )
    assert env == {"LATER_REF": "$(B)", "B": "b", "EARLIER_REF": "b/x", "EMPTY": ""}


def test_kubelet_literals_come_back_unchanged_and_unescaped_text_does_not() -> None:
    for text in ["$$", "$(HOME)", FAULT_SCRIPT, "a$", "$$(X)", "$", "no dollars"]:
        assert expand(kubelet_literal(text), {"HOME": "/root", "X": "x"}) == text
    assert expand(FAULT_SCRIPT, {}) != FAULT_SCRIPT  # so the tests below can fail


def trial_with_dollars() -> dict[str, Any]:
    spec = {
        "jobName": "bars-smoke",
        "agent": {
            "name": "shell",
            "install": "echo $$ > /tmp/pid",
            "execute": FAULT_SCRIPT,
            "env": [
                {"name": "PROMPT_SUFFIX", "value": "costs $$5, see $(HOME) and $HOME"},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ],
        },
        "datasetName": "set",
        "taskName": "task",
        "attempt": 1,
        "taskContentHash": "ab" * 32,
        "image": "debian:bookworm-slim",
        "resources": {"cpus": "1", "memory": "1G", "storage": "1G"},
        "timeouts": {"agentInstallSec": 60, "agentSec": 60, "verifierSec": 60, "buildSec": 600},
        "storage": {"bucket": "b", "prefix": "team-$(USER)-$$", "endpoint": "http://s3:9000"},
        "runnerImage": "runner:1",
    }
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutTrial",
        "metadata": {"name": "t", "namespace": "ns", "uid": "u"},
        "spec": spec,
    }


def test_every_string_of_a_trial_pod_reaches_its_process_byte_for_byte() -> None:
    trial = trial_with_dollars()
    created = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    pod = render_trial_pod(
        copy.deepcopy(trial),
        config=OperatorConfig(runner_image="r"),
        pod_name="p",
        created_at=created,
    )
    containers = {c["name"]: c for c in pod["spec"]["containers"]}

    environment = containers["environment"]
    assert container_argv(environment, container_env(environment)) == shim_command()

    runner = containers["runner"]
    env = container_env(runner, {("s", "k"): "secret-$(HOME)-$$"})
    spec = load_spec(None, env)
    assert spec == RolloutTrialSpec.model_validate(trial["spec"])
    assert spec.agent.execute == FAULT_SCRIPT
    assert spec.agent.install == "echo $$ > /tmp/pid"
    assert spec.agent.env[0].value == "costs $$5, see $(HOME) and $HOME"
    assert env["ROLLOUT_STORAGE_PREFIX"] == "team-$(USER)-$$"
    assert env[agent_env_var_name("KEY")] == "secret-$(HOME)-$$"  # Secrets are not expanded
    assert load_pod_created_at(env) == created
    # And what an unescaped Pod would have handed the runner instead:
    raw = trial_spec_json(RolloutTrialSpec.model_validate(trial["spec"]))
    assert json.loads(expand(raw, env))["agent"]["execute"] != FAULT_SCRIPT
