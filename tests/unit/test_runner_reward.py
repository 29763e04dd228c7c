"""Reading the verifier's reward files: order, formats, and what counts as invalid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.api.errors import ErrorType
from rollout_runner.reward import (
    MAX_REWARD_BYTES,
    RewardProblem,
    parse_reward_json,
    parse_reward_text,
    read_reward,
)


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        (b"1", 1.0),
        (b"0\n", 0.0),
        (b"  0.5  \n", 0.5),
        (b"-1", -1.0),
        (b"+.25", 0.25),
        (b"1e-3", 0.001),
        (b"7.", 7.0),
    ],
)
def test_a_reward_txt_holds_one_decimal_number(text: bytes, reward: float) -> None:
    assert parse_reward_text(text) == reward


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"abc", "holds 'abc', not a number"),
        (b"", "is empty"),
        (b" \n\t", "is empty"),
        (b"nan", "holds 'nan', not a number"),
        (b"NaN", "holds 'NaN', not a number"),
        (b"inf", "holds 'inf', not a number"),
        (b"1_000", "holds '1_000', not a number"),
        (b"1 2", "holds '1 2', not a number"),
        (b"1\n0", "holds '1\n0', not a number"),
        (b"0x10", "holds '0x10', not a number"),
        (b"1e999", "holds '1e999', which is too large to be a reward"),
        (b"\xff", "is not UTF-8 text"),
    ],
)
def test_anything_else_in_reward_txt_is_a_problem(text: bytes, problem: str) -> None:
    assert parse_reward_text(text) == problem


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        (b"1", 1.0),
        (b"0.75", 0.75),
        (b'{"reward": 1}', 1.0),
        (b'{"score": 0.5, "detail": {"passed": 1}}', 0.5),
        (b'{"reward": 0, "score": 1}', 0.0),  # "reward" wins over "score"
        (b" \n 2 \n", 2.0),
    ],
)
def test_a_reward_json_holds_a_number_or_a_reward_or_score(text: bytes, reward: float) -> None:
    assert parse_reward_json(text) == reward


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"", "is empty"),
        (b"true", "holds 'true', not a number"),
        (b'{"reward": true}', "has \"reward\": 'true', not a number"),
        (b'{"reward": "1"}', 'has "reward": \'"1"\', not a number'),
        (b'{"reward": null}', "has \"reward\": 'null', not a number"),
        (b'{"passed": 1}', 'has neither a "reward" nor a "score" key'),
        (b"[1]", "holds '[1]', not a number"),
        (b"NaN", "is not valid JSON (NaN is not a number)"),
        (b'{"score": Infinity}', "is not valid JSON (Infinity is not a number)"),
        (b"1" * 400, "holds '" + "1" * 80 + "...', which is too large to be a reward"),
    ],
)
def test_anything_else_in_reward_json_is_a_problem(text: bytes, problem: str) -> None:
    assert parse_reward_json(text) == problem


def test_broken_json_says_where() -> None:
    problem = parse_reward_json(b'{"reward": 1')
    assert isinstance(problem, str)
    assert problem.startswith("is not valid JSON (")
    assert "char 12" in problem


def test_reward_json_is_read_before_reward_txt(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("0")
    (tmp_path / "reward.json").write_text('{"reward": 0.5}')
    assert read_reward(tmp_path) == 0.5


def test_a_broken_reward_json_is_not_skipped_for_reward_txt(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("1")
    (tmp_path / "reward.json").write_text("")
    assert read_reward(tmp_path) == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.json is empty"
    )


def test_no_reward_file_is_reward_missing(tmp_path: Path) -> None:
    problem = read_reward(tmp_path)
    assert isinstance(problem, RewardProblem)
    assert problem.type is ErrorType.VERIFIER_REWARD_MISSING
    assert "/logs/verifier/reward.txt" in problem.message


def test_reward_txt_alone(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("abc\n")
    assert read_reward(tmp_path) == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.txt holds 'abc', not a number"
    )


def test_a_reward_that_is_not_a_regular_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("1")
    os.symlink(tmp_path / "target", tmp_path / "reward.txt")
    (tmp_path / "reward.json").mkdir()
    problem = read_reward(tmp_path)
    assert problem == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.json is not a regular file"
    )
    (tmp_path / "reward.json").rmdir()
    problem = read_reward(tmp_path)
    assert isinstance(problem, RewardProblem)
    assert problem.message == "/logs/verifier/reward.txt is not a regular file"


def test_a_huge_reward_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_bytes(b"1" + b" " * MAX_REWARD_BYTES)
    problem = read_reward(tmp_path)
    assert isinstance(problem, RewardProblem)
    assert problem.message == f"/logs/verifier/reward.txt is larger than {MAX_REWARD_BYTES} bytes"


def test_quoted_content_is_scrubbed_before_it_is_shortened(tmp_path: Path) -> None:
    secret = "s" * 100
    (tmp_path / "reward.txt").write_text(f"x{secret}")
    problem = read_reward(tmp_path, redact=lambda text: text.replace(secret, "***"))
    assert problem == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.txt holds 'x***', not a number"
    )
