"""`environment.docker_host` through the CLI, run for real: validate and render take it (the job
stays `docker`, with its `dockerHost`, for the bridge), `--local` refuses it naming the field,
and a data dataset beside it is refused (the bridge runs no rows)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rollout.cli.main import main

pytestmark = pytest.mark.integration

TASK = Path(__file__).resolve().parents[1] / "data" / "tasks" / "hello-offline"
REMOTE = "environment:\n  type: docker\n  docker_host: tcp://10.1.2.3:2376\n"


def rollout(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), {"HOME": "/nonexistent"})
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(TASK, tmp_path / "tasks" / "hello-offline")
    path = tmp_path / "job.yaml"
    path.write_text(
        f"name: remote\n{REMOTE}agents:\n  - name: oracle\ndatasets:\n  - path: ./tasks\n"
    )
    monkeypatch.chdir(tmp_path)
    return path


def test_validate_and_render_keep_the_remote_engine_for_the_bridge(
    capsys: pytest.CaptureFixture[str], job: Path
) -> None:
    code, out, err = rollout(capsys, "validate", "--offline", str(job))
    assert code == 0, err
    assert f"ok {job} (job)" in out.splitlines()
    code, out, err = rollout(capsys, "render", str(job))
    assert code == 0, err
    [rollout_job] = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "RolloutJob"]
    environment = rollout_job["spec"]["environment"]
    assert environment["type"] == "docker"  # not submitted as kubernetes: the bridge's
    assert environment["dockerHost"] == "tcp://10.1.2.3:2376"


def test_local_mode_refuses_a_remote_engine_naming_the_field(
    capsys: pytest.CaptureFixture[str], job: Path
) -> None:
    expected = (
        f"{job}: environment.docker_host: is a remote Docker engine, which a cluster's bridge "
        "controller runs trials on; --local runs containers on this machine's engine "
        "(DOCKER_HOST): leave docker_host out"
    )
    validated = rollout(capsys, "validate", "--local", str(job))
    ran = rollout(capsys, "run", str(job), "--local")
    assert (validated[0], ran[0]) == (1, 1)
    assert validated[1].splitlines() == [f"error {expected}"]
    assert ran[2].splitlines() == [f"error: {expected}"]
    assert not (job.parent / "jobs").exists()


def test_a_data_dataset_on_a_remote_engine_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "qa.jsonl").write_text('{"id": "r1", "question": "2+2?", "answer": "4"}\n')
    job = tmp_path / "job.yaml"
    job.write_text(
        f"name: rows\n{REMOTE}agents:\n  - name: oracle\ndatasets:\n  - path: ./qa.jsonl\n"
    )
    monkeypatch.chdir(tmp_path)
    code, out, _ = rollout(capsys, "validate", "--offline", str(job))
    assert code == 1
    assert (
        f"error {job}: datasets[0]: dataset qa is a data dataset, whose rows run as Pods only: "
        "the bridge controller does not run shards of data rows yet (leave docker_host out)"
    ) in out.splitlines()
