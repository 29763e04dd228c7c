"""A script agent's /logs/agent/usage.json read into result.json's `rollout.usage`
(`rollout_runner.agent_usage`): what is recorded, and what is left out with a note."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rollout.api.additions import TokenUsage
from rollout.api.results import TrialResult
from rollout_runner.agent_usage import MAX_BYTES, read_usage


def write(logs: Path, content: str | bytes) -> None:
    (logs / "agent").mkdir(parents=True, exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    (logs / "agent" / "usage.json").write_bytes(data)


def test_no_file_says_nothing(tmp_path: Path) -> None:
    assert read_usage(tmp_path) == (None, None)


def test_tokens_and_cost_are_recorded_and_the_total_is_their_sum(tmp_path: Path) -> None:
    write(tmp_path, '{"input_tokens": 1200, "output_tokens": 34, "cost_usd": 0.0123}')
    usage, note = read_usage(tmp_path)
    assert note is None
    assert usage == TokenUsage(
        input_tokens=1200, output_tokens=34, total_tokens=1234, cost_usd=0.0123
    )


def test_a_total_given_is_kept(tmp_path: Path) -> None:
    write(tmp_path, '{"input_tokens": 10, "output_tokens": 5, "total_tokens": 40, "extra": 1}')
    usage, _ = read_usage(tmp_path)
    assert usage == TokenUsage(input_tokens=10, output_tokens=5, total_tokens=40)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("not json", "is not JSON"),
        ("[1, 2]", "is not a JSON object"),
        ('{"input_tokens": "12", "output_tokens": 3}', "input_tokens"),
        ('{"input_tokens": -1, "output_tokens": 3}', "input_tokens"),
        ('{"input_tokens": 1, "output_tokens": 3, "cost_usd": "free"}', "cost_usd"),
        ('{"input_tokens": 1.5, "output_tokens": 3}', "input_tokens"),
    ],
)
def test_a_file_not_of_the_form_is_left_out_with_a_note(
    tmp_path: Path, content: str, words: str
) -> None:
    write(tmp_path, content)
    usage, note = read_usage(tmp_path)
    assert usage is None
    assert note is not None
    assert note.startswith("logs/agent/usage.json ")
    assert words in note
    assert note.endswith("the agent's usage is not recorded")


def test_a_huge_file_or_a_symlink_is_not_read(tmp_path: Path) -> None:
    write(tmp_path, b" " * (MAX_BYTES + 1))
    assert "larger than" in (read_usage(tmp_path)[1] or "")
    os.remove(tmp_path / "agent" / "usage.json")
    (tmp_path / "secret").write_text('{"input_tokens": 1, "output_tokens": 1}')
    os.symlink(tmp_path / "secret", tmp_path / "agent" / "usage.json")
    assert "not a regular file" in (read_usage(tmp_path)[1] or "")


def test_the_record_keeps_usage_and_the_builtin(tmp_path: Path) -> None:
    record = {
        "task_name": "t", "dataset_name": "d", "agent_name": "claude-code", "attempt": 1,
        "reward": 1.0, "cost": None, "error": None,
        "durations": {}, "timestamps": {"started_at": "2026-01-01T00:00:00Z"},
        "rollout": {
            "failure_class": None,
            "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3, "cost_usd": 0.5},
            "agent": {"builtin": "claude-code", "version": "2.0.14", "model": None},
        },
    }  # fmt: skip
    result = TrialResult.model_validate_json(json.dumps(record))
    assert result.rollout is not None
    assert result.rollout.agent is not None
    assert result.rollout.agent.version == "2.0.14"
    again = json.loads(result.model_dump_json())
    assert again["rollout"]["usage"]["cost_usd"] == 0.5
    assert again["rollout"]["agent"] == {
        "builtin": "claude-code",
        "version": "2.0.14",
        "model": None,
    }
