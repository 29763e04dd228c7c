"""The verifier's reward files, with the real runner and the real shim: seed 004's search order
(/tmp/rllm/reward.json, /logs/verifier/reward.json, /logs/verifier/reward.txt), the one coercion
rule, and a reward.json with several keys kept whole in result.json (`rollout.rewards`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from runner_kit import make_spec, publish_task, run_in_fake_container, trial_objects

from fakecontainer import requires_fake_container
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

TASK = "reward-files"


def script(rllm: str | None = None, json_: str | None = None, txt: str | None = None) -> str:
    lines = ["mkdir -p /app/rewards"]
    for name, text in (("rllm.json", rllm), ("verifier.json", json_), ("verifier.txt", txt)):
        if text is not None:
            lines.append(f"printf '%s\\n' {shlex.quote(text)} > /app/rewards/{name}")
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("rllm", "json_", "txt", "reward"),
    [
        ("0.25", "0.5", "0.75", 0.25),  # /tmp/rllm/reward.json first
        (None, "0.5", "0.75", 0.5),  # then /logs/verifier/reward.json
        (None, None, "0.75", 0.75),  # then /logs/verifier/reward.txt
        ("true", None, None, 1.0),  # a bool is a reward
    ],
    ids=["tmp-rllm", "verifier-json", "verifier-txt", "bool"],
)
async def test_the_first_reward_file_in_the_search_order_wins(
    tmp_path: Path,
    fast_retry_store: ObjectStore,
    rllm: str | None,
    json_: str | None,
    txt: str | None,
    reward: float,
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(
        fast_retry_store, TASK, content_hash, agent="rewards", execute=script(rllm, json_, txt)
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == reward
    assert report.result.rollout.rewards is None  # a plain number is kept nowhere else


async def test_a_reward_json_with_several_keys_is_kept_whole(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    rewards = {"accuracy": 1, "style": 0.5, "note": "terse"}
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(
        fast_retry_store,
        TASK,
        content_hash,
        agent="rewards",
        execute=script(rllm=json.dumps(rewards), txt="0"),
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 0.75  # the mean of the numeric values
    uploaded = json.loads(trial_objects(fast_retry_store, spec)["result.json"])
    assert uploaded["reward"] == 0.75
    assert uploaded["rollout"]["rewards"] == rewards


async def test_a_broken_tmp_rllm_reward_is_invalid_not_skipped(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(
        fast_retry_store,
        TASK,
        content_hash,
        agent="rewards",
        execute=script(rllm='["no"]', txt="1"),
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.VERIFIER_REWARD_INVALID
    assert report.result.error.message == (
        "/tmp/rllm/reward.json holds '[\"no\"]', not a number, a bool or an object"
    )
    assert report.result.reward is None


async def test_a_reward_the_agent_put_in_tmp_rllm_is_cleared(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # The agent (root here: the task has no agent user) plants a reward; the verifier writes none.
    content_hash = publish_task(fast_retry_store, TASK)
    spec = make_spec(
        fast_retry_store,
        TASK,
        content_hash,
        agent="cheat",
        execute="mkdir -p /tmp/rllm && echo 1 > /tmp/rllm/reward.json",
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.VERIFIER_REWARD_MISSING
    assert "/tmp/rllm/reward.json" in report.result.error.message
