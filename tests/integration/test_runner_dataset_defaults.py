"""dataset.toml's defaults reach the runner: a dataset published as the CLI publishes it, run by
the real runner in the shim's fake container. The runner loads the task from its archive, so the
defaults must travel in it (`rollout.api.taskdir.DEFAULTS_FILE`): an `[environment.env]` default
reaches the agent's commands and a `[verifier] env` default the verifier's."""

from __future__ import annotations

from pathlib import Path

import pytest
from runner_kit import DATASET, make_spec, run_in_fake_container, trial_objects

from fakecontainer import requires_fake_container
from rollout.api.job import JobDataset
from rollout.api.manifest import ManifestTask
from rollout.api.taskdir import DEFAULTS_FILE
from rollout.cli.prepare import PreparedDataset, prepare_dataset
from rollout.cli.publish import publish_datasets
from rollout.storage import ObjectStore
from rollout_runner.spec import AgentEnv

pytestmark = [pytest.mark.integration, requires_fake_container()]

DATASET_TOML = f"""\
name = "{DATASET}"

[verifier.env]
JUDGE = "from the dataset's verifier"

[environment.env]
GREETING = "hello from the dataset"
SHARED = "dataset"
FROM_JOB = "job said ${{JOB_VALUE}}"
"""
PRINT = (
    "printf 'GREETING=%s\\nSHARED=%s\\nFROM_JOB=%s\\nJUDGE=%s\\n' "
    '"$GREETING" "$SHARED" "$FROM_JOB" "$JUDGE"'
)
TEST_SH = f"#!/bin/bash\n{PRINT} > /logs/verifier/env.txt\necho 1 > /logs/verifier/reward.txt\n"


def make_dataset(root: Path) -> Path:
    """A Shape B dataset: dataset.toml's defaults, and two tasks, one setting its own SHARED."""
    root.mkdir()
    (root / "dataset.toml").write_text(DATASET_TOML)
    for name, task_toml in (
        ("inherits", ""),
        ("overrides", '[environment.env]\nSHARED = "task"\n'),
    ):
        task = root / name
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "instruction.md").write_text("Write your environment to /logs/agent/env.txt.\n")
        (task / "task.toml").write_text(task_toml)
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
        (task / "tests" / "test.sh").write_text(TEST_SH)
        (task / "tests" / "test.sh").chmod(0o755)
    return root


def published(tmp_path: Path, store: ObjectStore) -> PreparedDataset:
    prepared = prepare_dataset(
        JobDataset(path=str(make_dataset(tmp_path / "ds"))), tmp_path / "cache"
    )
    (report,) = publish_datasets(store, [prepared], build_contexts=False)
    assert (report.archives_uploaded, report.manifest_uploaded) == (2, True)
    return prepared


def entry(prepared: PreparedDataset, name: str) -> ManifestTask:
    (found,) = (task for task in prepared.manifest.tasks if task.name == name)
    assert found.content_hash is not None
    return found


@pytest.mark.parametrize(
    ("task", "shared"), [("inherits", "dataset"), ("overrides", "task")], ids=lambda v: v
)
async def test_the_agent_and_the_verifier_see_the_dataset_defaults(
    tmp_path: Path, fast_retry_store: ObjectStore, task: str, shared: str
) -> None:
    prepared = published(tmp_path, fast_retry_store)
    manifest_task = entry(prepared, task)
    assert manifest_task.config is not None
    assert manifest_task.config["environment"]["env"]["GREETING"] == "hello from the dataset"
    execute = f"{PRINT} > /logs/agent/env.txt"
    spec = make_spec(
        fast_retry_store, task, manifest_task.content_hash, agent="printer", execute=execute
    )
    agent_env = AgentEnv(values={"JOB_VALUE": "42"})
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store, agent_env=agent_env)

    assert report.result.error is None, report.error_text
    assert report.result.reward == 1.0
    objects = trial_objects(fast_retry_store, spec)
    # [environment.env] reaches the agent (the verifier's env is the verifier's alone) ...
    assert (
        objects["logs/agent/env.txt"]
        == (
            f"GREETING=hello from the dataset\nSHARED={shared}\nFROM_JOB=job said 42\nJUDGE=\n"
        ).encode()
    )
    # ... and the verifier, with [verifier] env over it.
    assert (
        objects["logs/verifier/env.txt"]
        == (
            f"GREETING=hello from the dataset\nSHARED={shared}\nFROM_JOB=job said 42\n"
            "JUDGE=from the dataset's verifier\n"
        ).encode()
    )


async def test_a_default_s_variable_the_agent_does_not_set_is_task_invalid(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    """The runner resolves the inherited `${JOB_VALUE}` as a task's own: the default is there."""
    prepared = published(tmp_path, fast_retry_store)
    spec = make_spec(
        fast_retry_store,
        "inherits",
        entry(prepared, "inherits").content_hash,
        agent="printer",
        execute=f"{PRINT} > /logs/agent/env.txt",
    )
    report = await run_in_fake_container(tmp_path, spec, fast_retry_store)

    assert report.result.error is not None
    assert "environment.env.FROM_JOB: takes ${JOB_VALUE}" in report.result.error.message
    assert report.result.timestamps.agent_execution_started_at is None


def test_the_authors_directories_are_left_as_they_are(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    published(tmp_path, fast_retry_store)
    assert not list((tmp_path / "ds").rglob(DEFAULTS_FILE))
