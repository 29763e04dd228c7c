"""An agent cannot give itself a reward: /logs/verifier is cleared, and locked from its user."""

from __future__ import annotations

from pathlib import Path

import pytest
from runner_kit import (
    make_spec,
    new_container_dir,
    publish_task,
    run_in,
    run_in_fake_container,
    trial_objects,
)

from fakecontainer import fake_container, requires_fake_container, shell_params
from rollout.api.errors import ErrorType
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

PLANT_REWARDS = (
    "mkdir -p /logs/verifier\n"
    "echo 1 > /logs/verifier/reward.txt\n"
    "echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
    "mkdir -p /tests && echo 'echo 1 > /logs/verifier/reward.txt' > /tests/planted.sh\n"
)


async def test_a_reward_the_agent_wrote_is_cleared_before_the_verifier(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # The verifier writes no reward at all: a reward can only come from the agent's files.
    content_hash = publish_task(fast_retry_store, "verifier-no-reward")
    spec = make_spec(
        fast_retry_store, "verifier-no-reward", content_hash, agent="cheat", execute=PLANT_REWARDS
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.VERIFIER_REWARD_MISSING
    assert report.result.reward is None
    objects = trial_objects(fast_retry_store, spec)
    assert "logs/verifier/reward.txt" not in objects
    assert "logs/verifier/reward.json" not in objects


async def test_a_planted_reward_json_does_not_beat_the_verifiers_reward(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # The agent does not solve the task, so the verifier writes 0 to reward.txt; an uncleared
    # reward.json of the agent's would be read first and give 1.
    content_hash = publish_task(fast_retry_store, "hello-offline")
    spec = make_spec(
        fast_retry_store, "hello-offline", content_hash, agent="cheat", execute=PLANT_REWARDS
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 0.0


PROBE = """\
whoami > /logs/agent/whoami.txt
ls -la /tests > /logs/agent/ls-tests.out 2>&1; echo $? > /logs/agent/ls-tests.rc
cat /tests/test.sh > /logs/agent/cat-tests.out 2>&1; echo $? > /logs/agent/cat-tests.rc
(echo 1 > /logs/verifier/reward.txt) 2> /logs/agent/write.out; echo $? > /logs/agent/write.rc
(echo 1 > /tmp/rllm/reward.json) 2> /logs/agent/rllm.out; echo $? > /logs/agent/rllm.rc
mv /logs/verifier /logs/mine 2> /logs/agent/mv.out; echo $? > /logs/agent/mv.rc
echo probe done
"""


async def test_with_an_agent_user_the_agent_cannot_read_tests_nor_write_the_reward(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # hello-agent-user's task.toml says [agent] user = "agent"; its verifier gives reward 1 when
    # the agent ran as `agent` and the verifier runs as root.
    content_hash = publish_task(fast_retry_store, "hello-agent-user")
    spec = make_spec(
        fast_retry_store, "hello-agent-user", content_hash, agent="probe", execute=PROBE
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0  # the agent ran as `agent`, the verifier as root
    objects = trial_objects(fast_retry_store, spec)
    assert objects["command/stdout.txt"] == b"probe done\n"
    assert objects["logs/agent/whoami.txt"] == b"agent\n"
    for probe in ("ls-tests", "cat-tests", "write", "rllm", "mv"):
        assert objects[f"logs/agent/{probe}.rc"] != b"0\n", probe
        assert b"Permission denied" in objects[f"logs/agent/{probe}.out"], probe
    assert objects["logs/verifier/reward.txt"] == b"1\n"


async def test_a_spec_agent_user_applies_to_a_task_without_one(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    content_hash = publish_task(fast_retry_store, "reward-from-answer")
    spec = make_spec(
        fast_retry_store,
        "reward-from-answer",
        content_hash,
        agent="probe",
        execute="whoami > /logs/agent/whoami.txt; ls /tests 2> /logs/agent/ls.err; echo 1 > /app/a",
        agentUser="agent",
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    objects = trial_objects(fast_retry_store, spec)
    assert objects["logs/agent/whoami.txt"] == b"agent\n"
    assert b"Permission denied" in objects["logs/agent/ls.err"]
    # /app is root's in the fake container: the agent could not write its answer there.
    assert report.result.error is not None
    assert report.result.error.type is ErrorType.AGENT_EXECUTION_FAILED


ISOLATED_PROBE = """\
id -u > /logs/agent/uid.txt; whoami > /logs/agent/whoami.txt; echo "$HOME" > /logs/agent/home.txt
(echo 1 > /logs/verifier/reward.txt) 2> /logs/agent/write.out; echo $? > /logs/agent/write.rc
(echo 1 > /tmp/rllm/reward.json) 2> /logs/agent/rllm.out; echo $? > /logs/agent/rllm.rc
mkdir -p /app/rewards && echo 0.5 > /app/rewards/verifier.txt
"""


@pytest.mark.parametrize("shell", shell_params())
async def test_an_isolated_agent_runs_as_a_created_user_and_cannot_write_the_reward(
    tmp_path: Path, fast_retry_store: ObjectStore, shell: str
) -> None:
    # reward-files declares no agent user; the job's isolate_agents makes one. The verifier copies
    # the agent's /app/rewards/verifier.txt (0.5) to reward.txt: it runs, as root, after the agent.
    content_hash = publish_task(fast_retry_store, "reward-files")
    spec = make_spec(
        fast_retry_store,
        "reward-files",
        content_hash,
        agent="probe",
        execute=ISOLATED_PROBE,
        isolateAgent=True,
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store, shell=shell)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 0.5
    objects = trial_objects(fast_retry_store, spec)
    assert objects["logs/agent/uid.txt"] == b"10001\n"
    assert objects["logs/agent/whoami.txt"] == b"rollout-agent\n"
    assert objects["logs/agent/home.txt"] == b"/home/rollout-agent\n"
    for probe in ("write", "rllm"):
        assert objects[f"logs/agent/{probe}.rc"] != b"0\n", probe
        assert b"Permission denied" in objects[f"logs/agent/{probe}.out"], probe


async def test_the_agent_user_gets_a_line_of_its_own_in_an_unterminated_passwd(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # An image whose /etc/passwd (group, shadow) does not end in a newline: appended as it is,
    # the new entry would join the last one, and neither user would exist.
    content_hash = publish_task(fast_retry_store, "reward-files")
    spec = make_spec(
        fast_retry_store,
        "reward-files",
        content_hash,
        agent="probe",
        execute=ISOLATED_PROBE,
        isolateAgent=True,
    )
    base = new_container_dir(tmp_path)
    with fake_container(base, unterminated_etc=True) as container:
        report = await run_in(container, tmp_path, spec, fast_retry_store)
    # The container's /etc: its changed files are in the overlay's upper directory (or, without
    # overlayfs, in the copy under its root).
    changed = base / "etc-upper" / "passwd"
    passwd = (changed if changed.exists() else base / "root" / "etc" / "passwd").read_text()
    assert report.result.error is None, report.error_text
    objects = trial_objects(fast_retry_store, spec)
    assert objects["logs/agent/whoami.txt"] == b"rollout-agent\n"
    lines = passwd.splitlines()
    assert lines[-1].startswith("rollout-agent:x:10001:10001:")
    assert lines[-2].startswith("agent:x:1000:1000:")  # the image's last user is intact


async def test_a_task_declared_agent_user_wins_over_isolation(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    # hello-agent-user gives reward 1 only when the agent ran as its declared user `agent`.
    content_hash = publish_task(fast_retry_store, "hello-agent-user")
    spec = make_spec(fast_retry_store, "hello-agent-user", content_hash, isolateAgent=True)
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
