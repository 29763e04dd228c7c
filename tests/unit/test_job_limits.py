"""Limits that keep a job from breaking its operator or every one of its Pods: the number of
trials one job may have, the timeout multiplier, and Pod settings the API server would refuse."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rollout.api.job_settings import MAX_TIMEOUT_MULTIPLIER, JobSettings
from rollout.api.plan import MAX_TRIALS, ResolvedDataset, ResolvedTask, TooManyTrials, plan_job
from rollout.api.resources import PodOverrides
from rollout.api.task import TaskConfig
from rollout.api.trials import label_key_problem

HASH = "a" * 64


def dataset(tasks: int) -> ResolvedDataset:
    return ResolvedDataset(
        "d", HASH, tuple(ResolvedTask(f"t{i}", HASH, TaskConfig()) for i in range(tasks))
    )


def test_a_job_of_more_trials_than_the_limit_is_refused_before_any_is_enumerated() -> None:
    with pytest.raises(TooManyTrials) as refused:
        plan_job("job", ["a", "b"], [dataset(3)], 10**9)  # 6e9 trials: enumerating would hang
    assert refused.value.count == 6 * 10**9
    assert "6,000,000,000 trials (2 agents x 3 tasks x 1000000000 attempts)" in str(refused.value)
    assert len(plan_job("job", ["a"], [dataset(1)], MAX_TRIALS)) == MAX_TRIALS


def test_the_timeout_multiplier_has_a_ceiling() -> None:
    assert JobSettings(timeout_multiplier=MAX_TIMEOUT_MULTIPLIER).timeout_multiplier == 1000.0
    with pytest.raises(ValidationError, match="less than or equal to 1000"):
        JobSettings(timeout_multiplier=1e308)


@pytest.mark.parametrize(
    ("key", "fine"),
    [
        ("disk", True),
        ("kubernetes.io/arch", True),
        ("node.example.com/gpu-type", True),
        ("a_b.c-d", True),
        ("x" * 63, True),
        ("x" * 64, False),
        ("bad key!", False),
        ("-leading", False),
        ("Example.com/x", False),
        ("/x", False),
        ("a/", False),
        ("a/b/c", False),
    ],
)
def test_label_keys_as_the_api_server_takes_them(key: str, fine: bool) -> None:
    assert (label_key_problem(key) is None) is fine


def test_pod_settings_a_pod_cannot_have_are_refused_with_their_place() -> None:
    with pytest.raises(ValidationError) as refused:
        PodOverrides.model_validate({"nodeSelector": {"ok": "fine", "disk": "bad value!"}})
    assert "disk: 'bad value!' is no label value" in str(refused.value)
    with pytest.raises(ValidationError, match="must be empty when operator is Exists"):
        PodOverrides.model_validate({"tolerations": [{"operator": "Exists", "value": "v"}]})
    fine = PodOverrides.model_validate(
        {"nodeSelector": {"kubernetes.io/arch": "amd64"}, "tolerations": [{"operator": "Exists"}]}
    )
    assert fine.node_selector == {"kubernetes.io/arch": "amd64"}
