"""`rollout render`: manifests that fit the CRD, datasets by content address, no secret value
unless asked, and a `kubectl create secret` command that a real shell makes the Secret with."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from crd_rules import validate_object
from paths import DATA, REPO
from rollout.api.dataset import load_local_dataset
from rollout.api.manifest import manifest_digest
from rollout.cli.main import main
from rollout.datasets.bundle import build_manifest

JOB_CRD = REPO / "crds" / "rollout.dev_rolloutjobs.yaml"
SECRET_VALUE = "sk-render-5d1e-never-in-git"
JOB = """\
name: Render Me
environment:
  type: docker
agents:
  - name: coder
    execute: run-agent
    env:
      MY_API_KEY: ${MY_API_KEY}
      AUTH: "Bearer ${TOKEN} (not $HOME)"
      MODEL: small
  - name: oracle
datasets:
  - path: ./tasks
"""


def copy_task(dataset: Path) -> None:
    """hello-offline, with an image named (a task without one would need a build, which
    render warns about)."""
    task = shutil.copytree(DATA / "tasks" / "hello-offline", dataset / "hello-offline")
    with (task / "task.toml").open("a") as toml:  # its last table is [environment]
        toml.write('docker_image = "debian:bookworm-slim"\n')


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    copy_task(tmp_path / "tasks")
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    return path


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text("")
    return {
        "HOME": str(tmp_path),
        "ROLLOUT_CONFIG": str(config),
        "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),  # render never reads it
        "MY_API_KEY": SECRET_VALUE,
        "TOKEN": "tok-123",
    }


def render(
    capsys: pytest.CaptureFixture[str], environ: dict[str, str], *args: str
) -> tuple[list[dict[str, Any]], str, str]:
    code = main(["render", *args], environ)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return list(yaml.safe_load_all(captured.out)), captured.out, captured.err


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(JOB_CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_renders_a_rolloutjob_that_fits_the_crd_and_holds_no_secret(
    job_file: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    documents, out, err = render(capsys, environ, str(job_file))
    assert len(documents) == 1
    (job,) = documents
    validate_object(crd_schema(), job, forbid_unknown=True)
    assert SECRET_VALUE not in out + err
    assert "tok-123" not in out + err

    digest = manifest_digest(build_manifest(load_local_dataset(job_file.parent / "tasks")))
    assert job["spec"]["datasets"] == [
        {"name": "tasks", "digest": digest, "source": {"path": "./tasks"}}
    ]
    assert job["metadata"]["name"].startswith("render-me-")
    assert "namespace" not in job["metadata"]
    assert job["spec"]["jobName"] == "Render Me"
    assert job["spec"]["environment"]["type"] == "kubernetes"
    assert "storage" not in job["spec"]  # no bucket configured: the operator's default storage
    assert "runnerImage" not in job["spec"]
    secret = f"{job['metadata']['name']}-agent-env"

    def from_secret(name: str) -> dict[str, Any]:
        ref = {"name": secret, "key": f"coder.{name}"}
        return {"name": name, "valueFrom": {"secretKeyRef": ref}}

    assert job["spec"]["agents"][0]["env"] == [
        from_secret("MY_API_KEY"),
        from_secret("AUTH"),
        {"name": "MODEL", "value": "small"},
    ]
    assert out.startswith(f"# This RolloutJob reads agent env values from the Secret {secret}")


def test_the_printed_command_makes_the_secret_from_the_shell_environment(
    job_file: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, err = render(capsys, environ, str(job_file), "--namespace", "evals")
    command = err.splitlines()[-1].strip()
    assert command.startswith("kubectl create secret generic render-me-")
    assert command in out  # the same command in the manifest's comment
    # A real shell runs it, with `kubectl` replaced by a function that prints its arguments.
    script = f'kubectl() {{ printf "%s\\n" "$@"; }}\n{command}\n'
    shell_env = {"MY_API_KEY": SECRET_VALUE, "TOKEN": "tok-123", "HOME": "/home/x"}
    result = subprocess.run(
        ["sh", "-c", script], env=shell_env, capture_output=True, text=True, check=True
    )
    name = command.split()[4]
    assert result.stdout.splitlines() == [
        "create",
        "secret",
        "generic",
        name,
        "--namespace",
        "evals",
        "--from-literal=coder.AUTH=Bearer tok-123 (not $HOME)",
        f"--from-literal=coder.MY_API_KEY={SECRET_VALUE}",
    ]


def test_include_secrets_renders_the_secret_with_its_values(
    job_file: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    documents, _, err = render(capsys, environ, str(job_file), "--include-secrets", "-n", "evals")
    secret, job = documents
    assert secret["kind"] == "Secret"
    assert secret["metadata"]["namespace"] == job["metadata"]["namespace"] == "evals"
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values == {"coder.AUTH": "Bearer tok-123 (not $HOME)", "coder.MY_API_KEY": SECRET_VALUE}
    assert SECRET_VALUE not in yaml.safe_dump(job)
    assert err == ""
    validate_object(crd_schema(), job, forbid_unknown=True)


def test_storage_and_runner_image_come_from_flags_environment_and_config(
    job_file: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    Path(environ["ROLLOUT_CONFIG"]).write_text(
        "storage:\n  bucket: from-file\n  region: eu-west-1\n  pathStyle: true\n"
        "  endpoint: http://127.0.0.1:9000\n"
        "  clusterEndpoint: http://minio.rollout-system:9000\n"
        "  credentials:\n    existingSecret: storage-creds\n"
        "runnerImage: example.com/runner:file\n"
    )
    env = {**environ, "ROLLOUT_STORAGE_PREFIX": "evals/", "ROLLOUT_RUNNER_IMAGE": "ex/r:env"}
    (job,), _, _ = render(capsys, env, str(job_file), "--storage-bucket", "from-flag")
    assert job["spec"]["storage"] == {
        "bucket": "from-flag",
        "prefix": "evals",
        "endpoint": "http://minio.rollout-system:9000",
        "region": "eu-west-1",
        "pathStyle": True,
        "credentialsSecret": "storage-creds",
    }
    assert job["spec"]["runnerImage"] == "ex/r:env"
    validate_object(crd_schema(), job, forbid_unknown=True)


def test_a_job_without_variables_renders_no_secret_and_no_comment(
    tmp_path: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    copy_task(tmp_path / "tasks")
    job_file = tmp_path / "plain.yaml"
    job_file.write_text("name: plain\nagents:\n  - name: oracle\ndatasets:\n  - path: ./tasks\n")
    documents, out, err = render(capsys, environ, str(job_file))
    assert [d["kind"] for d in documents] == ["RolloutJob"]
    assert out.startswith("apiVersion: rollout.dev/v1alpha1\nkind: RolloutJob\n")
    assert err == ""


def test_an_invalid_job_renders_nothing(
    job_file: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    job_file.write_text(JOB.replace("./tasks", "./missing"))
    code = main(["render", str(job_file)], environ)
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert captured.err == (
        f"error: {job_file}: datasets[0]: {job_file.parent / 'missing'}: dataset directory does "
        "not exist\n"
    )


def test_values_of_variables_are_needed_only_to_render_the_secret(
    job_file: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --include-secrets no value is rendered, so none is needed: the Secret is made
    later, where the values are (`kubectl create secret`, a secrets manager)."""
    _, with_values, _ = render(capsys, environ, str(job_file))
    del environ["TOKEN"], environ["MY_API_KEY"]
    _, without, err = render(capsys, environ, str(job_file))
    assert without == with_values
    assert "kubectl create secret generic" in err

    code = main(["render", str(job_file), "--include-secrets"], environ)
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"error: {job_file}: agents[0].env.MY_API_KEY: environment variable MY_API_KEY is not "
        "set (agent 'coder' takes MY_API_KEY from ${MY_API_KEY})",
        f"error: {job_file}: agents[0].env.AUTH: environment variable TOKEN is not set "
        "(agent 'coder' takes AUTH from ${TOKEN})",
    ]


def test_render_lists_the_tasks_that_cannot_run_as_rollout_run_does(
    tmp_path: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    copy_task(tmp_path / "tasks")
    shutil.rmtree(tmp_path / "tasks" / "hello-offline" / "solution")
    job_file = tmp_path / "plain.yaml"
    job_file.write_text("name: plain\nagents:\n  - name: oracle\ndatasets:\n  - path: ./tasks\n")
    documents, _, err = render(capsys, environ, str(job_file))
    assert [d["kind"] for d in documents] == ["RolloutJob"]  # rendered: the job still runs
    assert err.splitlines() == [
        f"warning: {job_file}: datasets[0]: task_invalid for the oracle agent: Task "
        "'hello-offline' is invalid: the oracle agent needs solution/solve.sh (or, as in seed "
        "004, solve.sh at the task root), and the task has neither"
    ]


def test_endpoint_headers_and_a_model_key_get_the_same_secret_treatment(
    tmp_path: Path, environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    copy_task(tmp_path / "tasks")
    job_file = tmp_path / "service-job.yaml"
    job_file.write_text(
        """\
name: services
agents:
  - name: svc
    endpoint: https://agent.example.com/rollout/eval
    headers:
      Authorization: "Bearer ${TOKEN}"
      X-Team: evals
  - name: gpt
    model: {name: gpt-4.1-mini, api_key: "${MY_API_KEY}"}
datasets:
  - path: ./tasks
"""
    )
    documents, out, err = render(capsys, environ, str(job_file))
    (job,) = documents
    validate_object(crd_schema(), job, forbid_unknown=True)
    assert SECRET_VALUE not in out + err
    assert "tok-123" not in out + err
    secret = "services-agent-env"
    svc, gpt = job["spec"]["agents"]
    assert svc["headers"] == [
        {
            "name": "Authorization",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "svc.header.Authorization"}},
        },
        {"name": "X-Team", "value": "evals"},
    ]
    assert gpt["model"]["apiKey"] == {"name": secret, "key": "gpt.model.api-key"}
    assert out.startswith(f"# This RolloutJob reads agent env values from the Secret {secret}")
    # The printed command, run by a real shell, makes exactly those keys.
    command = err.splitlines()[-1].strip()
    script = f'kubectl() {{ printf "%s\\n" "$@"; }}\n{command}\n'
    result = subprocess.run(
        ["sh", "-c", script],
        env={"MY_API_KEY": SECRET_VALUE, "TOKEN": "tok-123"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines()[4:] == [
        f"--from-literal=gpt.model.api-key={SECRET_VALUE}",
        "--from-literal=svc.header.Authorization=Bearer tok-123",
    ]
