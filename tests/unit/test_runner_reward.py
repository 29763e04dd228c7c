"""Reading the verifier's reward files: order, formats, and what counts as invalid."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from rollout.api.errors import ErrorType
from rollout.api.reward import CoercedReward
from rollout_runner.reward import (
    MAX_REWARD_BYTES,
    RLLM_REWARD,
    RewardFile,
    RewardProblem,
    parse_reward_json,
    parse_reward_text,
    read_reward,
    verifier_dir_files,
)


def read_dir(directory: Path, **kwargs: Any) -> CoercedReward | RewardProblem:
    """The reward of /logs/verifier's files alone (no /tmp/rllm/reward.json)."""
    return read_reward(verifier_dir_files(directory), **kwargs)


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
        (b"true", 1.0),
        (b" \n 2 \n", 2.0),
    ],
)
def test_a_reward_json_number_or_bool_is_the_reward(text: bytes, reward: float) -> None:
    assert parse_reward_json(text) == CoercedReward(reward)


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        (b'{"reward": 1}', 1.0),
        (b'{"score": 0.5, "detail": {"passed": 1}}', 0.5),
        (b'{"reward": 0, "score": 1}', 0.0),  # "reward" wins over "score"
        (b'{"accuracy": 1, "style": 0.5}', 0.75),
    ],
)
def test_a_reward_json_object_is_coerced_and_kept_whole(text: bytes, reward: float) -> None:
    assert parse_reward_json(text) == CoercedReward(reward, json.loads(text))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b"", "is empty"),
        (b'{"reward": "1"}', 'has "reward": \'"1"\', not a number, a bool or an object'),
        (b'{"reward": null}', "has \"reward\": 'null', not a number, a bool or an object"),
        (b'{"passed": "yes"}', 'has no "reward" or "score" key and no value that is a number'),
        (b"[1]", "holds '[1]', not a number, a bool or an object"),
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
    assert read_dir(tmp_path) == CoercedReward(0.5, {"reward": 0.5})


def test_a_broken_reward_json_is_not_skipped_for_reward_txt(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("1")
    (tmp_path / "reward.json").write_text("")
    assert read_dir(tmp_path) == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.json is empty"
    )


def test_no_reward_file_is_reward_missing(tmp_path: Path) -> None:
    problem = read_dir(tmp_path)
    assert isinstance(problem, RewardProblem)
    assert problem.type is ErrorType.VERIFIER_REWARD_MISSING
    assert "/logs/verifier/reward.txt" in problem.message


def test_reward_txt_alone(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("abc\n")
    assert read_dir(tmp_path) == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.txt holds 'abc', not a number"
    )


def test_a_reward_that_is_not_a_regular_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("1")
    os.symlink(tmp_path / "target", tmp_path / "reward.txt")
    (tmp_path / "reward.json").mkdir()
    problem = read_dir(tmp_path)
    assert problem == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.json is not a regular file"
    )
    (tmp_path / "reward.json").rmdir()
    problem = read_dir(tmp_path)
    assert isinstance(problem, RewardProblem)
    assert problem.message == "/logs/verifier/reward.txt is not a regular file"


def test_a_huge_reward_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_bytes(b"1" + b" " * MAX_REWARD_BYTES)
    problem = read_dir(tmp_path)
    assert isinstance(problem, RewardProblem)
    assert problem.message == f"/logs/verifier/reward.txt is larger than {MAX_REWARD_BYTES} bytes"


def test_quoted_content_is_scrubbed_before_it_is_shortened(tmp_path: Path) -> None:
    secret = "s" * 100
    (tmp_path / "reward.txt").write_text(f"x{secret}")
    problem = read_dir(tmp_path, redact=lambda text: text.replace(secret, "***"))
    assert problem == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/logs/verifier/reward.txt holds 'x***', not a number"
    )


def test_tmp_rllm_reward_json_comes_first(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text("0")
    rllm = RewardFile(RLLM_REWARD, b'{"accuracy": 1, "style": 0.5}')
    reward = read_reward([rllm, *verifier_dir_files(tmp_path)])
    assert reward == CoercedReward(0.75, {"accuracy": 1, "style": 0.5})


def test_a_broken_tmp_rllm_reward_json_is_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("1")
    rllm = RewardFile(RLLM_REWARD, None, "is not a regular file")
    assert read_reward([rllm, *verifier_dir_files(tmp_path)]) == RewardProblem(
        ErrorType.VERIFIER_REWARD_INVALID, "/tmp/rllm/reward.json is not a regular file"
    )


def test_no_reward_anywhere_names_all_three_files(tmp_path: Path) -> None:
    problem = read_reward([RewardFile(RLLM_REWARD, None), *verifier_dir_files(tmp_path)])
    assert problem == RewardProblem(
        ErrorType.VERIFIER_REWARD_MISSING,
        "The verifier exited with code 0 but wrote no reward: neither /tmp/rllm/reward.json, "
        "/logs/verifier/reward.json nor /logs/verifier/reward.txt exists",
    )
