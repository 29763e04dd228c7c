"""examples/: the job file and the offline task pass `rollout validate`, and the hand-written
RolloutJob fits the CRD schema and the model and names the example dataset by its current
content address."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from crd_rules import validate_object
from paths import REPO
from rollout.api.dataset import load_local_dataset
from rollout.api.job import load_job
from rollout.api.manifest import manifest_digest
from rollout.api.resources import DatasetRef, RolloutJob
from rollout.api.taskdir import load_task
from rollout.api.translate import job_to_rollout_job
from rollout.cli.main import main
from rollout.datasets.bundle import build_manifest

EXAMPLES = REPO / "examples"
JOB_FILE = EXAMPLES / "job.yaml"
DATASET = EXAMPLES / "tasks"
TASK = DATASET / "hello-offline"
ROLLOUT_JOB_FILE = EXAMPLES / "rolloutjob.yaml"
JOB_CRD = REPO / "crds" / "rollout.dev_rolloutjobs.yaml"


def rollout_job_manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(ROLLOUT_JOB_FILE.read_text())
    return manifest


def example_digest() -> str:
    return manifest_digest(build_manifest(load_local_dataset(DATASET)))


def test_job_task_and_dataset_pass_rollout_validate(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", str(JOB_FILE), str(TASK), str(DATASET)])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("image ")]
    assert (code, lines) == (
        0,
        [f"ok {JOB_FILE} (job)", f"ok {TASK} (task)", f"ok {DATASET} (dataset)"],
    )


def test_job_runs_the_oracle_on_kubernetes_over_the_example_dataset() -> None:
    job = load_job(JOB_FILE)
    assert [agent.name for agent in job.agents] == ["oracle"]
    assert job.environment.type == "kubernetes"
    assert [Path(d.path or "") for d in job.datasets] == [DATASET]
    assert [t.name for t in load_local_dataset(DATASET).tasks] == ["hello-offline"]


def test_task_needs_no_build_and_has_a_solution() -> None:
    task = load_task(TASK)
    assert task.config.environment.docker_image == "debian:bookworm-slim"
    assert task.has_solution
    # `bash /tests/test.sh` and `bash /oracle/solve.sh`: both scripts are bash scripts.
    for script in (TASK / "tests" / "test.sh", TASK / "solution" / "solve.sh"):
        assert script.read_text().startswith("#!/bin/bash\n")
        assert script.stat().st_mode & 0o111, f"{script} is not executable"


BUILD_JOB_FILE = EXAMPLES / "build-job.yaml"
BUILT_TASK = EXAMPLES / "built" / "hello-built"


def test_the_build_example_is_a_task_whose_image_is_built_and_validate_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["validate", str(BUILD_JOB_FILE)])
    assert (code, capsys.readouterr().out.splitlines()) == (
        0,
        [f"image {BUILT_TASK}: build environment/Dockerfile", f"ok {BUILD_JOB_FILE} (job)"],
    )
    task = load_task(BUILT_TASK)
    assert task.config.environment.docker_image is None  # nothing lifts: a RUN step
    assert not task.lifted
    assert task.has_solution
    # Its verifier tells the built image from its base: the Dockerfile's marker file.
    dockerfile = (BUILT_TASK / "environment" / "Dockerfile").read_text()
    assert "/etc/rollout-built" in dockerfile
    assert "/etc/rollout-built" in (BUILT_TASK / "tests" / "test.sh").read_text()
    job = load_job(BUILD_JOB_FILE)
    assert (job.environment.type, [a.name for a in job.agents]) == ("kubernetes", ["oracle"])


def test_rolloutjob_fits_the_crd_schema() -> None:
    crd = yaml.safe_load(JOB_CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    # forbid_unknown: a key the schema does not declare would be pruned by the apiserver.
    validate_object(schema, rollout_job_manifest(), forbid_unknown=True)


def test_rolloutjob_fits_the_model() -> None:
    job = RolloutJob.model_validate(rollout_job_manifest())
    assert job.metadata.name == "hello-offline-gitops"
    assert job.job_name == "hello-offline-gitops"
    assert [agent.name for agent in job.spec.agents] == ["oracle"]
    assert job.spec.storage is None  # the operator's default storage applies
    assert job.spec.runner_image is None


def test_rolloutjob_names_the_example_dataset_by_its_current_digest() -> None:
    refs = RolloutJob.model_validate(rollout_job_manifest()).spec.datasets
    current = example_digest()
    assert [(ref.name, ref.digest) for ref in refs] == [("tasks", current)], (
        f"examples/tasks changed: set spec.datasets[0].digest in {ROLLOUT_JOB_FILE} to {current}"
    )


def test_a_changed_task_changes_the_digest(tmp_path: Path) -> None:
    # The digest check above can fail: any change to a task's files changes the digest.
    copy = tmp_path / "tasks"
    shutil.copytree(DATASET, copy)
    assert manifest_digest(build_manifest(load_local_dataset(copy))) == example_digest()
    (copy / "hello-offline" / "instruction.md").write_text("Something else.\n")
    assert manifest_digest(build_manifest(load_local_dataset(copy))) != example_digest()


def test_rolloutjob_is_what_the_cli_makes_of_job_yaml() -> None:
    # The hand-written resource and `rollout run examples/job.yaml` describe the same evaluation:
    # the same agents, dataset, environment and metrics (the name and attempts differ on purpose).
    job = load_job(JOB_FILE)
    ref = DatasetRef(name="tasks", digest=example_digest())
    translated, secret = job_to_rollout_job(
        job, namespace="rollout-system", datasets=[ref], environ={}, file=JOB_FILE
    )
    assert secret is None
    written = RolloutJob.model_validate(rollout_job_manifest())
    for field in ("agents", "environment", "verifier", "metrics", "instruction_path"):
        assert getattr(written.spec, field) == getattr(translated.spec, field), field
    assert [(d.name, d.digest) for d in written.spec.datasets] == [
        (d.name, d.digest) for d in translated.spec.datasets
    ]


LOCAL_JOB_FILE = EXAMPLES / "local-job.yaml"


def test_the_local_job_passes_validate_local_and_a_cluster_refuses_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", "--local", str(LOCAL_JOB_FILE)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [ln for ln in printed if not ln.startswith("image ")] == [f"ok {LOCAL_JOB_FILE} (job)"]
    assert main(["validate", str(LOCAL_JOB_FILE)]) == 1
    said = capsys.readouterr()
    assert "environment.type: is 'local'" in said.out + said.err
    assert "never on a cluster" in said.out + said.err


def test_the_local_job_is_the_oracle_and_a_scripted_agent_in_the_host_sandbox() -> None:
    job = load_job(LOCAL_JOB_FILE)
    assert [agent.name for agent in job.agents] == ["oracle", "scripted"]
    assert job.environment.type == "local"
    assert [Path(d.path or "") for d in job.datasets] == [DATASET]


DATA_JOB_FILE = EXAMPLES / "data-job.yaml"
DATA_SET = EXAMPLES / "benchmarks" / "arith"


def test_the_data_benchmark_example_validates_and_says_how_its_rows_are_scored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["validate", "--local", str(DATA_JOB_FILE), str(DATA_SET)])
    lines = capsys.readouterr().out.splitlines()
    rows = (
        f"rows arith: 20 rows of split test ({DATA_SET / 'data' / 'test.jsonl'}), scored by "
        "metric numeric_match (dataset.toml)"
    )
    assert (code, lines) == (
        0,
        [rows, f"ok {DATA_JOB_FILE} (job)", rows, f"ok {DATA_SET} (dataset)"],
    )
    job = load_job(DATA_JOB_FILE)
    assert (job.shard_size, job.environment.type) == (10, "local")
