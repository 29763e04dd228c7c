"""`rollout logs`, `rollout download` and `rollout cancel` against a loopback Kubernetes API and a
real S3 endpoint, with the results a job's trials left in storage."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cli_kit import (
    TRIALS,
    Cli,
    create_job,
    job_status,
    job_tree,
    local_tree,
    rewards_of,
    rollout_job,
    write_results,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS, ROLLOUT_TRIALS, SECRETS
from rollout.api.translate import resource_name
from rollout.api.trials import file_name, trial_resource_name

pytestmark = pytest.mark.integration

EVAL = "My Eval"
NAME = resource_name(EVAL)
REWARDS = rewards_of(TRIALS)


@pytest.fixture
async def finished(kube: Kube, s3_settings: S3Settings) -> dict[str, bytes]:
    """A finished job `My Eval` whose spec.storage names the test bucket, with its results."""
    storage = {
        "bucket": s3_settings.location.bucket,
        "endpoint": "http://minio.rollout-system:9000",  # what Pods use; the CLI cannot
        "pathStyle": True,
    }
    body = rollout_job(NAME, job_name=EVAL, storage=storage)
    body["status"] = job_status("Completed", REWARDS)
    await create_job(kube, body)
    return await asyncio.to_thread(write_results, s3_settings.store(), EVAL, REWARDS)


def endpoint_only(cli: Cli) -> list[str]:
    """How the CLI reaches storage, without saying which bucket: the job's spec says that."""
    assert cli.storage.location.endpoint is not None
    return ["--storage-endpoint", cli.storage.location.endpoint, "--storage-path-style"]


# --- download ---------------------------------------------------------------------------------


async def test_download_copies_the_jobs_results_from_the_bucket_its_spec_names(
    kube: Kube,
    cli: Cli,
    finished: dict[str, bytes],
    s3_settings: S3Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["download", EVAL, "--jobs-dir", str(tmp_path / "out"), *cli.cluster_args()]
    outcome = await cli.run(capsys, *args, *endpoint_only(cli))
    assert outcome.code == 0, outcome.stderr
    local = local_tree(tmp_path / "out" / EVAL)
    assert local == job_tree(s3_settings.store(), EVAL)
    assert len(local) == len(finished)
    lines = outcome.stdout.splitlines()
    assert lines[0] == f"downloaded {len(finished)} files to {tmp_path / 'out' / EVAL}"
    assert "Metrics: mean 0.857, max 1.000" in lines
    assert kube.writes() == []


async def test_download_of_a_deleted_job_by_its_name_reads_storage_only(
    kube: Kube,
    cli: Cli,
    finished: dict[str, bytes],
    s3_settings: S3Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await kube.delete(ROLLOUT_JOBS, NAME)
    monkeypatch.chdir(tmp_path)
    outcome = await cli.run(capsys, "download", EVAL, *cli.cluster_args(), *cli.storage_args())
    assert outcome.code == 0, outcome.stderr
    assert local_tree(tmp_path / "jobs" / EVAL) == job_tree(s3_settings.store(), EVAL)

    nothing = await cli.run(capsys, "download", "nope", *cli.cluster_args(), *cli.storage_args())
    assert nothing.code == 1
    bucket = s3_settings.location.bucket
    assert nothing.stderr == (
        f"error: no results of job nope in storage at s3://{bucket}/jobs/nope/ "
        "(and no RolloutJob nope was found)\n"
    )
    assert not (tmp_path / "jobs" / "nope").exists()


async def test_download_and_logs_without_any_cluster_read_storage_only(
    cli: Cli,
    finished: dict[str, bytes],
    s3_settings: S3Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nowhere = ["--kubeconfig", str(tmp_path / "no-kubeconfig"), *cli.storage_args()]
    out = tmp_path / "out"
    outcome = await cli.run(capsys, "download", EVAL, "--jobs-dir", str(out), *nowhere)
    assert outcome.code == 0, outcome.stderr
    assert outcome.stderr == (
        f"note: no kubeconfig at {tmp_path / 'no-kubeconfig'}: pass --kubeconfig or set "
        "KUBECONFIG to the cluster's kubeconfig; reading object storage only\n"
    )
    assert local_tree(out / EVAL) == job_tree(s3_settings.store(), EVAL)
    logs = await cli.run(
        capsys, "logs", EVAL, "oracle/alpha/hello__1", "--phase", "install", *nowhere
    )
    assert logs.code == 0, logs.stderr
    assert (
        logs.stdout == "==> setup/stdout.txt <==\ninstalling oracle\n\n==> setup/stderr.txt <==\n"
    )


async def test_names_too_long_for_a_file_name_download_into_cut_directories(
    cli: Cli, s3_settings: S3Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 300-character dataset and task name once ended `rollout download` in a traceback
    (ENAMETOOLONG): its trial's directory is cut, with a hash, in storage and on disk alike."""
    dataset, task = "d" * 300, "t" * 300
    await asyncio.to_thread(
        write_results, s3_settings.store(), "long", {("oracle", dataset, task): 1.0}
    )
    nowhere = ["--kubeconfig", str(tmp_path / "no-kubeconfig"), *cli.storage_args()]
    out = tmp_path / "out"
    outcome = await cli.run(capsys, "download", "long", "--jobs-dir", str(out), *nowhere)
    assert outcome.code == 0, outcome.stderr
    local = local_tree(out / "long")
    assert local == job_tree(s3_settings.store(), "long")
    trial_dir = out / "long" / "oracle" / file_name(dataset) / f"{file_name(task, reserve=12)}__1"
    assert (trial_dir / "result.json").is_file()
    logs = await cli.run(
        capsys, "logs", "long", str(trial_dir.relative_to(out / "long")), "--phase", "agent",
        *nowhere,
    )  # fmt: skip
    assert logs.code == 0, logs.stderr
    assert f"oracle working on {task}" in logs.stdout


async def test_a_file_system_error_is_one_line_naming_the_path(
    cli: Cli,
    finished: dict[str, bytes],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    nowhere = ["--kubeconfig", str(tmp_path / "no-kubeconfig"), *cli.storage_args()]
    outcome = await cli.run(capsys, "download", EVAL, "--jobs-dir", str(blocker), *nowhere)
    assert outcome.code == 1
    assert outcome.stderr.splitlines()[-1] == f"error: {blocker / EVAL}: Not a directory"


# --- logs -------------------------------------------------------------------------------------


async def test_logs_of_one_phase_and_of_all(
    kube: Kube, cli: Cli, finished: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    base = f"jobs/{EVAL}/oracle/beta/sort__1/"
    verifier = await cli.run(
        capsys,
        "logs", EVAL, "oracle/beta/sort__1", "--phase", "verifier",
        *cli.cluster_args(), *endpoint_only(cli),
    )  # fmt: skip
    assert verifier.code == 0, verifier.stderr
    assert verifier.stdout == (
        "==> logs/verifier/stdout.txt <==\n"
        f"{finished[base + 'logs/verifier/stdout.txt'].decode()}"
        "\n==> logs/verifier/stderr.txt <==\n"
    )

    everything = await cli.run(
        capsys, "logs", NAME, "coder/beta/sort__1", *cli.cluster_args(), *endpoint_only(cli)
    )
    assert everything.code == 0, everything.stderr
    headers = [line for line in everything.stdout.splitlines() if line.startswith("==>")]
    assert headers == [
        "==> setup/stdout.txt <==",
        "==> setup/stderr.txt <==",
        "==> command/stdout.txt <==",
        "==> command/stderr.txt <==",
        "==> error.txt <==",
    ]
    assert "coder working on sort" in everything.stdout
    assert "agent_execution_failed: exit 2" in everything.stdout


async def test_logs_of_a_trial_named_by_its_rollouttrial(
    kube: Kube, cli: Cli, finished: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    trial = trial_resource_name(EVAL, "coder", "alpha", "count", 1)
    spec = {
        "jobName": EVAL,
        "agent": {"name": "coder", "execute": "echo run"},
        "datasetName": "alpha",
        "taskName": "count",
        "attempt": 1,
        "taskContentHash": "c" * 64,
        "image": "debian:bookworm-slim",
        "resources": {"cpus": "1", "memory": "1G", "storage": "1G"},
        "timeouts": {"agentInstallSec": 60, "agentSec": 60, "verifierSec": 60, "buildSec": 600},
        "storage": {"bucket": "b"},
        "runnerImage": "runner:1",
    }
    await kube.create(ROLLOUT_TRIALS, {"metadata": {"name": trial}, "spec": spec})
    outcome = await cli.run(
        capsys, "logs", EVAL, trial, "--phase", "agent", *cli.cluster_args(), *endpoint_only(cli)
    )
    assert outcome.code == 0, outcome.stderr
    assert outcome.stdout == (
        "==> command/stdout.txt <==\ncoder working on count\n"
        "\n==> command/stderr.txt <==\nwarning: slow\n"
    )


@pytest.mark.parametrize(
    ("trial", "phase", "error"),
    [
        ("coder/alpha/count", None, "error: command line: TRIAL: 'coder/alpha/count' is not "
         "<agent>/<dataset>/<task>__<n>\n"),
        ("coder/beta/sort__1", "verifier", "error: no verifier output of trial "
         "coder/beta/sort__1 of job My Eval in storage at s3://{bucket}/jobs/My Eval/coder/beta/"
         "sort__1/: the phase has not run, or the trial has not finished yet\n"),
        ("no-such-trial", None, "error: no RolloutTrial no-such-trial in namespace {namespace} "
         "({url}, context test); name the trial as <agent>/<dataset>/<task>__<n> "
         "(e.g. oracle/tasks/hello__1)\n"),
    ],
)  # fmt: skip
async def test_logs_of_what_is_not_there(
    kube: Kube,
    cli: Cli,
    finished: dict[str, bytes],
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
    trial: str,
    phase: str | None,
    error: str,
) -> None:
    args = ["logs", EVAL, trial, *cli.cluster_args(), *endpoint_only(cli)]
    outcome = await cli.run(capsys, *args, *(["--phase", phase] if phase else []))
    assert outcome.code == 1
    expected = error.format(
        bucket=s3_settings.location.bucket, url=kube.url, namespace=kube.namespace
    )
    assert outcome.stderr == expected
    assert outcome.stdout == ""


# --- cancel -----------------------------------------------------------------------------------


async def test_cancel_deletes_the_job_and_says_what_storage_keeps(
    kube: Kube,
    cli: Cli,
    finished: dict[str, bytes],
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube.needs_garbage_collector()  # owner references cascade
    job = await kube.get(ROLLOUT_JOBS, NAME)
    owner = {"apiVersion": "rollout.dev/v1alpha1", "kind": "RolloutJob", "name": NAME,
             "uid": job["metadata"]["uid"]}  # fmt: skip
    secret = {"metadata": {"name": f"{NAME}-agent-env", "ownerReferences": [owner]}, "data": {}}
    await kube.create(SECRETS, secret)
    store = s3_settings.store()
    store.put_bytes("datasets/" + "a" * 64 + ".json", b"{}")

    outcome = await cli.run(capsys, "cancel", EVAL, *cli.cluster_args(), *endpoint_only(cli))
    assert outcome.code == 0, outcome.stderr
    assert [(c.method, c.resource, c.name) for c in kube.writes()] == [
        ("DELETE", ROLLOUT_JOBS, NAME)
    ]
    assert await kube.find(ROLLOUT_JOBS, NAME) is None
    # The garbage collector deletes what the job owned.
    await kube.wait_for(lambda: kube.gone(SECRETS, f"{NAME}-agent-env"), what="Secret deleted")
    where = f"s3://{s3_settings.location.bucket}/jobs/{EVAL}/"
    assert outcome.stdout.splitlines() == [
        f"deleted RolloutJob {NAME} in namespace {kube.namespace}: its RolloutTrials, their Pods "
        "and its agent env Secret are deleted with it",
        f"kept in storage: {len(finished)} objects of results under {where} (download them "
        f"with: rollout download {EVAL}) and the dataset bundles (datasets/, tasks/)",
    ]
    assert len(store.list_keys(f"jobs/{EVAL}/")) == len(finished)

    again = await cli.run(capsys, "cancel", EVAL, *cli.cluster_args(), *endpoint_only(cli))
    assert again.code == 1
    assert again.stderr.startswith(f"error: no RolloutJob {EVAL} in namespace {kube.namespace}")


async def test_cancel_with_delete_results_empties_the_jobs_prefix_only(
    kube: Kube,
    cli: Cli,
    finished: dict[str, bytes],
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = s3_settings.store()
    bundle = "datasets/" + "a" * 64 + ".json"
    store.put_bytes(bundle, b"{}")
    store.put_bytes(f"jobs/{EVAL} 2/result.json", b"{}")  # another job, sharing a name prefix
    args = ["cancel", NAME, "--delete-results", *cli.cluster_args(), *endpoint_only(cli)]
    outcome = await cli.run(capsys, *args)
    assert outcome.code == 0, outcome.stderr
    assert f"deleted {len(finished)} objects of results under" in outcome.stdout
    assert sorted(store.list_keys("")) == [bundle, f"jobs/{EVAL} 2/result.json"]
