"""Effective phase timeouts: the task's, the job's verifier override and ceiling, the multiplier."""

from __future__ import annotations

import pytest

from rollout.api.task import TaskConfig, parse_task_config
from rollout.api.timeouts import PhaseTimeouts, effective_timeouts


def _task(verifier: float = 120.0) -> TaskConfig:
    return parse_task_config(
        {
            "verifier": {"timeout_sec": verifier},
            "agent": {"install_timeout_sec": 200.0, "timeout_sec": 900.0},
            "environment": {"build_timeout_sec": 450.0},
        }
    )


def test_the_task_timeouts_as_they_are() -> None:
    assert effective_timeouts(_task()) == PhaseTimeouts(
        build_sec=450.0, agent_install_sec=200.0, agent_sec=900.0, verifier_sec=120.0
    )


def test_the_seed_defaults() -> None:
    assert effective_timeouts(TaskConfig()) == PhaseTimeouts(
        build_sec=600.0, agent_install_sec=300.0, agent_sec=600.0, verifier_sec=600.0
    )


def test_the_multiplier_applies_to_every_phase() -> None:
    assert effective_timeouts(_task(), multiplier=2.5) == PhaseTimeouts(
        build_sec=1125.0, agent_install_sec=500.0, agent_sec=2250.0, verifier_sec=300.0
    )
    assert effective_timeouts(_task(), multiplier=0.5).agent_sec == 450.0


@pytest.mark.parametrize(
    ("task_verifier", "override", "ceiling", "multiplier", "expected"),
    [
        (120.0, None, None, 1.0, 120.0),
        (120.0, 0, 0, 1.0, 120.0),  # 0 means "not set" for both
        (120.0, 300.0, None, 1.0, 300.0),  # the override replaces the task's timeout
        (120.0, 30.0, None, 1.0, 30.0),  # even when shorter
        (120.0, None, 60.0, 1.0, 60.0),  # the ceiling caps the task's timeout
        (120.0, None, 600.0, 1.0, 120.0),  # a ceiling above it changes nothing
        (120.0, 300.0, 200.0, 1.0, 200.0),  # the ceiling caps the override too
        (120.0, 100.0, 200.0, 1.0, 100.0),
        (120.0, 0, 60.0, 1.0, 60.0),
        (120.0, 300.0, 0, 1.0, 300.0),
        (120.0, 300.0, None, 2.0, 600.0),  # the multiplier scales the override
        (120.0, None, 60.0, 2.0, 120.0),  # and the ceiling
        (120.0, 300.0, 200.0, 3.0, 600.0),
        (900.0, None, 600.0, 0.5, 300.0),
    ],
)
def test_verifier_timeout(
    task_verifier: float,
    override: float | None,
    ceiling: float | None,
    multiplier: float,
    expected: float,
) -> None:
    timeouts = effective_timeouts(
        _task(task_verifier),
        multiplier=multiplier,
        verifier_override_sec=override,
        verifier_max_sec=ceiling,
    )
    assert timeouts.verifier_sec == expected
    # The verifier settings never touch the other phases.
    assert timeouts.agent_sec == 900.0 * multiplier
    assert timeouts.agent_install_sec == 200.0 * multiplier
    assert timeouts.build_sec == 450.0 * multiplier


@pytest.mark.parametrize("multiplier", [0, -1.0, float("inf"), float("nan")])
def test_a_multiplier_must_be_positive(multiplier: float) -> None:
    with pytest.raises(ValueError, match="timeout_multiplier must be a positive number"):
        effective_timeouts(_task(), multiplier=multiplier)


def test_negative_job_timeouts_are_mistakes() -> None:
    with pytest.raises(ValueError, match=r"verifier\.override_timeout_sec must be 0 \(unset\)"):
        effective_timeouts(_task(), verifier_override_sec=-1)
    with pytest.raises(ValueError, match=r"verifier\.max_timeout_sec must be 0 \(unset\)"):
        effective_timeouts(_task(), verifier_max_sec=-5)


def test_phase_timeouts_are_frozen() -> None:
    timeouts = effective_timeouts(_task())
    with pytest.raises(ValueError, match="frozen"):
        timeouts.agent_sec = 1.0  # type: ignore[misc]
