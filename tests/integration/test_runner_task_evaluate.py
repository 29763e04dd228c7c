"""A task directory verified by Python (seed 004: tests/evaluate.py without tests/test.sh, or
task.toml's `[verifier] python`), with the real runner and the real shim: the agent's answer
(answer.txt, else stdout) and the task's metadata reach `evaluate(metadata, trajectory)`, whose
return is the reward; its failures are the seed's error types, its output the trial's
logs/verifier/stdout.txt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runner_kit import make_spec, run_in_fake_container, trial_objects

from fakecontainer import requires_fake_container
from rollout.api.errors import ErrorType
from rollout.api.layout import task_archive_key
from rollout.api.taskdir import load_task, task_content_hash
from rollout.api.verifiers import VerifierKind, VerifierSource
from rollout.datasets.bundle import task_archive
from rollout.storage import ObjectStore

pytestmark = [pytest.mark.integration, requires_fake_container()]

EVALUATE = """\
def evaluate(metadata, trajectory):
    print("answer:", trajectory["final_answer"], "workdir:", metadata["workdir"])
    expected = metadata["metadata"]["expected"]
    return (1.0 if trajectory["final_answer"] == expected else 0.0, True)
"""


def make_task(root: Path, *, evaluate: str = EVALUATE, declared: str | None = None) -> Path:
    """A task whose only verifier is a Python file: tests/evaluate.py, or `declared`."""
    (root / "run").mkdir()
    task = root / "py-verified"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM busybox\n")
    (task / "instruction.md").write_text("Say the magic word.\n")
    toml = '[metadata]\nexpected = "xyzzy"\n\n[environment]\ndocker_image = "busybox"\n'
    toml += 'workdir = "/app"\n'
    script = "tests/evaluate.py"
    if declared is not None:
        toml += f'\n[verifier]\npython = "{declared}"\n'
        script = declared
    (task / "task.toml").write_text(toml)
    (task / script).parent.mkdir(parents=True, exist_ok=True)
    (task / script).write_text(evaluate)
    return task


def publish(store: ObjectStore, task: Path) -> str:
    content_hash = task_content_hash(task)
    store.put_bytes(task_archive_key(store.prefix, content_hash), task_archive(task))
    return content_hash


@pytest.mark.parametrize(
    ("execute", "reward"),
    [
        ("echo xyzzy", 1.0),
        ("echo plugh", 0.0),
        ("echo noise; mkdir -p /logs/agent; echo xyzzy > /logs/agent/answer.txt", 1.0),
    ],
    ids=["stdout-right", "stdout-wrong", "answer-file"],
)
async def test_the_python_verifier_scores_the_agents_answer(
    tmp_path: Path, fast_retry_store: ObjectStore, execute: str, reward: float
) -> None:
    task = make_task(tmp_path)
    assert load_task(task).verifier.kind is VerifierKind.PYTHON
    spec = make_spec(fast_retry_store, "py-verified", publish(fast_retry_store, task),
                     agent="speaker", execute=execute)  # fmt: skip
    report = await run_in_fake_container(tmp_path / "run", spec, fast_retry_store)

    assert report.result.error is None, report.error_text
    assert report.result.reward == reward
    files = trial_objects(fast_retry_store, spec)
    log = files["logs/verifier/stdout.txt"].decode()
    assert "answer: " in log
    assert "workdir: /app" in log
    assert report.result.rollout.rewards == {"reward": reward, "is_correct": True}


async def test_a_declared_python_verifier_and_its_failure(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    failing = "def evaluate(metadata, trajectory):\n    raise ValueError('no judge today')\n"
    task = make_task(tmp_path, evaluate=failing, declared="checks/score.py")
    verifier = load_task(task).verifier
    assert (verifier.script, verifier.source) == ("checks/score.py", VerifierSource.TASK)
    spec = make_spec(fast_retry_store, "py-verified", publish(fast_retry_store, task),
                     agent="speaker", execute="echo xyzzy")  # fmt: skip
    report = await run_in_fake_container(tmp_path / "run", spec, fast_retry_store)

    assert report.result.error is not None
    assert report.result.error.type is ErrorType.VERIFIER_FAILED
    assert report.result.reward is None
    log = trial_objects(fast_retry_store, spec)["logs/verifier/stdout.txt"].decode()
    assert "ValueError: no judge today" in log
    assert json.loads(trial_objects(fast_retry_store, spec)["result.json"])["reward"] is None


async def test_an_agent_cannot_plant_the_verifiers_output(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    task = make_task(tmp_path)
    plant = "mkdir -p /logs/verifier; echo 'score: 1' > /logs/verifier/stdout.txt; echo plugh"
    spec = make_spec(fast_retry_store, "py-verified", publish(fast_retry_store, task),
                     agent="planter", execute=plant)  # fmt: skip
    report = await run_in_fake_container(tmp_path / "run", spec, fast_retry_store)

    assert report.result.reward == 0.0
    log = trial_objects(fast_retry_store, spec)["logs/verifier/stdout.txt"].decode()
    assert "score: 1" not in log
