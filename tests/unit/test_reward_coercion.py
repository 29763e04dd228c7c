"""The one coercion rule for rewards (`rollout.api.reward`), row by row of its table."""

from __future__ import annotations

import math

import pytest

from rollout.api.reward import CoercedReward, coerce_reward


@pytest.mark.parametrize(
    ("value", "reward"),
    [
        (1, 1.0),
        (0.5, 0.5),
        (-2, -2.0),
        (True, 1.0),
        (False, 0.0),
    ],
)
def test_a_number_or_a_bool_is_the_reward(value: object, reward: float) -> None:
    assert coerce_reward(value) == CoercedReward(reward)


@pytest.mark.parametrize(
    ("value", "reward"),
    [
        ({"reward": 1}, 1.0),
        ({"reward": 0, "score": 1}, 0.0),  # "reward" wins over "score"
        ({"reward": True, "detail": "x"}, 1.0),
        ({"score": 0.25, "detail": {"passed": 1}}, 0.25),
        ({"accuracy": 1, "style": 0.5}, 0.75),  # the mean of the numeric values
        ({"accuracy": 1, "passed": False, "note": "ok", "parts": [1, 1]}, 0.5),
    ],
)
def test_a_mapping_gives_reward_else_score_else_the_mean(value: object, reward: float) -> None:
    assert coerce_reward(value) == CoercedReward(reward, dict(value))  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1", "holds '\"1\"', not a number, a bool or an object"),
        (None, "holds 'null', not a number, a bool or an object"),
        ([1], "holds '[1]', not a number, a bool or an object"),
        ({"reward": "1"}, 'has "reward": \'"1"\', not a number, a bool or an object'),
        ({"reward": None, "score": 1}, "has \"reward\": 'null', not a number, a bool or an object"),
        ({"score": [1]}, "has \"score\": '[1]', not a number, a bool or an object"),
        ({"passed": "yes"}, 'has no "reward" or "score" key and no value that is a number'),
        ({}, 'has no "reward" or "score" key and no value that is a number'),
        (math.nan, "holds 'NaN', not a number"),
        (math.inf, "holds 'Infinity', which is too large to be a reward"),
        (10**400, "holds '" + "1" + "0" * 79 + "...', which is too large to be a reward"),
        (
            {"a": math.inf, "b": -math.inf},
            'holds \'{"a": Infinity, "b": -Infinity}\', whose mean is not a finite number',
        ),
    ],
)
def test_anything_else_is_no_reward(value: object, problem: str) -> None:
    assert coerce_reward(value) == problem


def test_quoted_values_are_scrubbed_before_they_are_shortened() -> None:
    secret = "s" * 100
    problem = coerce_reward(f"x{secret}", redact=lambda text: text.replace(secret, "***"))
    assert problem == "holds '\"x***\"', not a number, a bool or an object"
