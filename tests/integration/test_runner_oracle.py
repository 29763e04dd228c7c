"""The runner end to end: the oracle passes its offline tasks, and every file lands at its key."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from runner_kit import (
    DATASET,
    JOB,
    fast_store,
    make_spec,
    publish_task,
    run_in_fake_container,
    traced,
    trial_objects,
    trial_prefix_of,
)
from s3_kit import S3Settings

from fakecontainer import requires_fake_container, shell_params
from rollout.api.results import TrialResult

pytestmark = [pytest.mark.integration, requires_fake_container()]

SEED_RESULT = Path(__file__).resolve().parents[1] / "data" / "seed" / "trial_result_success.json"


@pytest.mark.parametrize("shell", shell_params())
async def test_the_oracle_passes_and_every_object_lands_at_its_key(
    tmp_path: Path, s3_settings: S3Settings, shell: str
) -> None:
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "hello-offline")
    spec = make_spec(store, "hello-offline", content_hash)

    report = await run_in_fake_container(tmp_path, spec, store, shell=shell)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    assert report.upload_error is None
    prefix = f"jobs/{JOB}/oracle/{DATASET}/hello-offline__1/"
    assert trial_prefix_of(store, spec) == prefix
    objects = trial_objects(store, spec)
    assert sorted(objects) == [
        "command/stderr.txt",
        "command/stdout.txt",
        "logs/agent/oracle.log",
        "logs/verifier/reward.txt",
        "logs/verifier/stderr.txt",
        "logs/verifier/stdout.txt",
        "result.json",
    ]
    assert report.uploaded[-1] == prefix + "result.json"
    assert objects["command/stdout.txt"] == b"solved\n"
    assert objects["logs/agent/oracle.log"] == b"oracle was here\n"
    assert objects["logs/verifier/reward.txt"] == b"1\n"
    assert objects["logs/verifier/stdout.txt"] == b"checking /app/hello.txt from /app\n"
    assert objects["logs/verifier/stderr.txt"] == b"a line on stderr\n"
    assert report.result_uri == f"s3://{store.bucket}/{prefix}result.json"

    # result.json has the seed's keys in the seed's order, then the project's one key.
    document = json.loads(objects["result.json"])
    seed = json.loads(SEED_RESULT.read_text())
    assert list(document) == [*seed, "rollout"]
    assert traced(document["rollout"]) == {"failure_class": None}  # no error
    assert list(document["durations"]) == list(seed["durations"])
    assert list(document["timestamps"]) == list(seed["timestamps"])
    result = TrialResult.from_json(objects["result.json"])
    assert result == report.result
    assert (result.task_name, result.dataset_name, result.agent_name, result.attempt) == (
        "hello-offline",
        DATASET,
        "oracle",
        1,
    )
    assert result.cost is None
    # The oracle's solution copy is its agent setup; there is no install, so no setup/ files.
    durations = result.durations
    for value in (
        durations.total_sec,
        durations.environment_setup_sec,
        durations.agent_setup_sec,
        durations.agent_execution_sec,
        durations.verifier_sec,
    ):
        assert value is not None
        assert value >= 0
    assert durations.total_sec is not None
    assert durations.total_sec >= (durations.verifier_sec or 0) + (
        durations.agent_execution_sec or 0
    )
    stamps = result.timestamps
    ordered: list[datetime | None] = [
        stamps.started_at,
        stamps.environment_setup_started_at,
        stamps.environment_setup_ended_at,
        stamps.agent_setup_started_at,
        stamps.agent_setup_ended_at,
        stamps.agent_execution_started_at,
        stamps.agent_execution_ended_at,
        stamps.verifier_started_at,
        stamps.verifier_ended_at,
        stamps.ended_at,
    ]
    assert all(stamp is not None for stamp in ordered)
    assert ordered == sorted(ordered)  # type: ignore[type-var]
    assert document["timestamps"]["started_at"].endswith("Z")


async def test_the_oracle_passes_a_task_with_an_agent_user(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "hello-agent-user")
    spec = make_spec(store, "hello-agent-user", content_hash)

    report = await run_in_fake_container(tmp_path, spec, store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    objects = trial_objects(store, spec)
    assert objects["logs/agent/whoami.txt"] == b"agent\n"
    assert objects["logs/verifier/stdout.txt"] == b"verifier runs as root\n"


async def test_a_reward_json_is_read_before_reward_txt(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "reward-from-answer")
    spec = make_spec(
        store,
        "reward-from-answer",
        content_hash,
        agent="answers",
        execute="""echo '{"score": 0.25, "note": "partial"}' > /app/answer.txt""",
    )

    report = await run_in_fake_container(tmp_path, spec, store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 0.25
    assert b'"score": 0.25' in trial_objects(store, spec)["logs/verifier/reward.json"]


async def test_without_a_shared_logs_volume_logs_are_copied_out_of_the_environment(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    # As for environments that share no volume with the runner (a remote sandbox): /logs is
    # fetched with get_files, for the reward and for the upload.
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "hello-offline")
    spec = make_spec(store, "hello-offline", content_hash)

    report = await run_in_fake_container(tmp_path, spec, store, logs_dir=None)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    objects = trial_objects(store, spec)
    assert objects["logs/verifier/reward.txt"] == b"1\n"
    assert objects["logs/agent/oracle.log"] == b"oracle was here\n"


async def test_the_oracle_runs_a_solve_sh_at_the_task_root(
    tmp_path: Path, s3_settings: S3Settings
) -> None:
    # Seed 004: a task with solve.sh at its root and no solution/; it runs, as solution/solve.sh
    # does, as /oracle/solve.sh in the working directory (it writes hello.txt by a relative path).
    store = fast_store(s3_settings)
    content_hash = publish_task(store, "hello-root-solve")
    spec = make_spec(store, "hello-root-solve", content_hash)

    report = await run_in_fake_container(tmp_path, spec, store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    objects = trial_objects(store, spec)
    assert objects["command/stdout.txt"] == b"solved in /app\n"
    assert objects["logs/verifier/reward.txt"] == b"1\n"
