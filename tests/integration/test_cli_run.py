"""`rollout run JOB.yaml` end to end against a loopback Kubernetes API and a real S3 endpoint.

The test plays the operator: once the CLI has applied the RolloutJob, it writes trial and job
result files into storage and sets the RolloutJob's status, and the CLI follows, downloads and
exits as a user would see it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import yaml
from cli_kit import (
    SECRET_VALUE,
    TRIALS,
    Cli,
    Workspace,
    job_status,
    job_tree,
    local_tree,
    rewards_of,
    s3_client,
    versions_by_key,
    wait_for_job,
    wait_for_watch,
    write_results,
)
from s3_kit import S3Settings

from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS, SECRETS
from rollout.api.dataset import load_local_dataset
from rollout.api.layout import job_config_key
from rollout.api.manifest import manifest_digest
from rollout.api.taskdir import task_content_hash
from rollout.cli.kube import WATCH_TIMEOUT_SEC
from rollout.datasets.bundle import build_manifest
from rollout.storage import ObjectStore

pytestmark = pytest.mark.integration

JOB = "two-by-two"
SECRET = f"{JOB}-agent-env"


def run_args(cli: Cli, job_file: Path, *extra: str) -> list[str]:
    """`rollout run` of `job_file`, downloading beside it (never into the working directory:
    config.json is in storage from the start, so every run downloads something); `extra` may
    name another --jobs-dir (the last one counts)."""
    jobs_dir = str(job_file.parent / "jobs")
    return ["run", str(job_file), *cli.cluster_args(), *cli.storage_args(), "--jobs-dir", jobs_dir,
            *extra]  # fmt: skip


async def test_run_applies_publishes_follows_and_downloads(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    store: ObjectStore,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s3_client(s3_settings).put_bucket_versioning(
        Bucket=s3_settings.location.bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    monkeypatch.chdir(workspace.root)  # jobs_dir "jobs" is relative to the working directory
    job_file = workspace.job_file(environment={"type": "docker"})
    # `rollout JOB.yaml` is `rollout run JOB.yaml`; the file is named relative to the directory.
    args = [f"{JOB}.yaml", *cli.cluster_args(), *cli.storage_args()]
    run = asyncio.create_task(cli.run(capsys, *args))

    body = await wait_for_job(kube, JOB)
    secret = await kube.wait_for(
        lambda: _owned_secret(kube), what="the Secret owned by the RolloutJob"
    )

    # config.json: the job file as written, as JSON, in storage before the RolloutJob was made.
    config = store.get_bytes(job_config_key("", JOB))
    submitted = yaml.safe_load(job_file.read_text())
    assert json.loads(config) == submitted
    assert submitted["environment"] == {"type": "docker"}  # not the kubernetes it runs as
    assert submitted["datasets"][0] == {"path": "./alpha"}  # relative, as written
    assert submitted["agents"][0]["env"]["MY_API_KEY"] == "${MY_API_KEY}"
    assert "n_concurrent_trials" not in submitted  # no default filled in
    assert SECRET_VALUE.encode() not in config

    # The RolloutJob: job.yaml's content, datasets by content address, no secret value.
    assert SECRET_VALUE not in json.dumps(body)
    alpha = manifest_digest(build_manifest(load_local_dataset(workspace.root / "alpha")))
    beta = body["spec"]["datasets"][1]["digest"]
    assert body["metadata"]["labels"] == {"rollout.dev/job": JOB}
    assert body["metadata"]["annotations"] == {
        "rollout.dev/agent-env": '{"coder":{"MY_API_KEY":"${MY_API_KEY}"}}'
    }
    spec = body["spec"]
    assert spec["jobName"] == JOB
    assert spec["environment"]["type"] == "kubernetes"  # job.yaml's default docker, as Pods
    assert spec["metrics"] == [{"type": "mean"}, {"type": "max"}]
    assert spec["agents"] == [
        {
            "name": "coder",
            "install": "echo install",
            "execute": "echo execute",
            "env": [
                {
                    "name": "MY_API_KEY",
                    "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "coder.MY_API_KEY"}},
                },
                {"name": "MODEL", "value": "small"},
            ],
        },
        {"name": "oracle", "env": []},
    ]
    assert spec["datasets"] == [
        {"name": "alpha", "digest": alpha, "source": {"path": "./alpha"}},
        {
            "name": "beta",
            "digest": beta,
            "source": {"registry": {"path": "./registry.json"}, "name": "beta", "version": "1.0"},
        },
    ]
    assert spec["storage"] == {
        "bucket": s3_settings.location.bucket,
        "prefix": "",
        "endpoint": s3_settings.location.endpoint,
        "pathStyle": True,
    }
    assert "runnerImage" not in spec

    # The Secret holds the value, owned by the RolloutJob; three writes in all, in this order.
    assert base64.b64decode(secret["data"]["coder.MY_API_KEY"]).decode() == SECRET_VALUE
    assert set(secret["data"]) == {"coder.MY_API_KEY"}  # MODEL is literal: in the RolloutJob
    assert (secret["type"], secret["metadata"]["labels"]) == ("Opaque", {"rollout.dev/job": JOB})
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "rollout.dev/v1alpha1",
            "kind": "RolloutJob",
            "name": JOB,
            "uid": body["metadata"]["uid"],
        }
    ]
    writes = [(c.method, c.resource, c.subresource) for c in kube.writes()]
    assert writes == [
        ("POST", SECRETS, None),
        ("POST", ROLLOUT_JOBS, None),
        ("PATCH", SECRETS, None),
    ]

    # The bundles: two manifests named by their digest, three task archives (hello is shared).
    hashes = {
        task_content_hash(workspace.root / "alpha" / "hello"),
        task_content_hash(workspace.root / "alpha" / "count"),
        task_content_hash(workspace.root / "beta-repo" / "tasks" / "sort"),
    }
    bundle_keys = {f"datasets/{alpha}.json", f"datasets/{beta}.json"}
    bundle_keys |= {f"tasks/{h}.tar.gz" for h in hashes}
    assert set(store.list_keys("datasets/")) | set(store.list_keys("tasks/")) == bundle_keys
    beta_manifest = json.loads(store.get_bytes(f"datasets/{beta}.json"))
    assert hashlib.sha256(store.get_bytes(f"datasets/{beta}.json")).hexdigest() == beta
    assert [t["name"] for t in beta_manifest["tasks"]] == ["hello", "sort"]

    # The operator's part: trials run, results written, the job completes.
    await wait_for_watch(kube)
    rewards = rewards_of(TRIALS)
    await kube.patch_status(ROLLOUT_JOBS, JOB, job_status("Running", rewards, finished=3))
    written = await asyncio.to_thread(write_results, store, JOB, rewards, config=False)
    await kube.patch_status(ROLLOUT_JOBS, JOB, job_status("Completed", rewards))
    outcome = await run

    assert outcome.code == 0, outcome.stderr
    local = local_tree(workspace.root / "jobs" / JOB)
    assert local == job_tree(store, JOB)
    assert local.pop("config.json") == config  # downloaded byte for byte
    assert local == {key.removeprefix(f"jobs/{JOB}/"): data for key, data in written.items()}
    assert {"result.json", "coder/beta/sort__1/error.txt"} <= set(local)
    for trial in ("coder/alpha/count__1", "oracle/beta/hello__1"):
        for name in (
            "result.json",
            "setup/stdout.txt",
            "command/stderr.txt",
            "logs/agent/trace.jsonl",
            "logs/verifier/reward.txt",
        ):
            assert f"{trial}/{name}" in local

    lines = outcome.stdout.splitlines()
    assert lines[:3] == [
        f"{JOB} Pending: 0/0 trials done, 0 running, 0 errors, pass rate -, mean reward -, "
        "mean -, max -",
        f"{JOB} Running: 3/8 trials done, 5 running, 0 errors, pass rate 66.7%, "
        "mean reward 0.667, mean 0.667, max 1.000",
        f"{JOB} Completed: 8/8 trials done, 0 running, 1 error, pass rate 85.7%, "
        "mean reward 0.857, mean 0.857, max 1.000",
    ]
    table = "\n".join(lines[3:])
    assert _row(table, "coder") == ["coder", "4", "3", "1", "66.7%", "0.667"]
    assert _row(table, "oracle") == ["oracle", "4", "4", "0", "100.0%", "1.000"]
    assert _row(table, "all") == ["all", "8", "7", "1", "85.7%", "0.857"]
    assert "Metrics: mean 0.857, max 1.000" in table
    assert f"created RolloutJob {JOB} in namespace {kube.namespace}" in outcome.stderr
    assert "environment.type docker: each trial runs as a Pod in the cluster" in outcome.stderr
    assert "uploaded 2 task archives, 1 build context and the manifest" in outcome.stderr
    assert "uploaded 1 task archive and the manifest" in outcome.stderr
    assert SECRET_VALUE not in outcome.stdout + outcome.stderr

    # A second job on the same datasets uploads nothing: every bundle object has one version.
    second = await cli.run(capsys, *run_args(cli, workspace.job_file("second"), "--detach"))
    assert second.code == 0, second.stderr
    assert "dataset alpha (2 tasks): already in storage" in second.stderr
    assert "dataset beta (2 tasks): already in storage" in second.stderr
    versions = versions_by_key(s3_settings)
    assert {key: versions[key] for key in bundle_keys} == dict.fromkeys(bundle_keys, 1)
    assert await kube.find(ROLLOUT_JOBS, "second") is not None


async def _owned_secret(kube: Kube) -> dict[str, object] | None:
    secret = await kube.find(SECRETS, SECRET)
    if secret and secret["metadata"].get("ownerReferences"):
        return secret
    return None


def _row(table: str, first: str) -> list[str]:
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│|┃ ").replace("┃", "│").split("│")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in\n{table}")


async def test_broken_tasks_are_listed_and_published_with_their_errors_and_the_job_runs(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    store: ObjectStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alpha = workspace.root / "alpha"
    (alpha / "count" / "task.toml").write_text("version = \n")  # task_invalid
    shutil.rmtree(alpha / "hello" / "solution")  # the oracle's trial of it: task_invalid
    job_file = workspace.job_file()
    outcome = await cli.run(capsys, *run_args(cli, job_file, "--detach"))

    assert outcome.code == 0, outcome.stderr
    lines = outcome.stderr.splitlines()
    heading = lines.index(
        "warning: 2 tasks cannot run; the trials below fail with these errors, without starting, "
        "and the other trials run (--strict refuses such a job):"
    )
    assert lines[heading + 1].startswith(
        f"  {job_file}: datasets[0]: task_invalid: Task 'count' is invalid: task.toml: not valid "
        "TOML"
    )
    assert lines[heading + 2] == (
        f"  {job_file}: datasets[0]: task_invalid for the oracle agent: Task 'hello' is invalid: "
        "the oracle agent needs solution/solve.sh (or, as in seed 004, solve.sh at the task "
        "root), and the task has neither"
    )
    body = await wait_for_job(kube, JOB)
    digest = body["spec"]["datasets"][0]["digest"]
    manifest = json.loads(store.get_bytes(f"datasets/{digest}.json"))
    count, hello = manifest["tasks"]
    assert count["error"]["type"] == "task_invalid"
    assert count["error"]["message"].startswith("Task 'count' is invalid: task.toml: not valid")
    assert "content_hash" not in count
    assert "error" not in hello
    assert hello["has_solution"] is False
    # No archive for the broken task: only alpha's hello, and beta's two (its hello has a
    # solution now that alpha's has none).
    beta = workspace.root / "beta-repo" / "tasks"
    archives = {task_content_hash(d) for d in (alpha / "hello", beta / "hello", beta / "sort")}
    assert set(store.list_keys("tasks/")) == {f"tasks/{h}.tar.gz" for h in archives}


async def test_a_job_that_fails_exits_1_with_the_reason(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    store: ObjectStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs_dir = workspace.root / "out"
    args = run_args(cli, workspace.job_file(), "--jobs-dir", str(jobs_dir))
    run = asyncio.create_task(cli.run(capsys, *args))
    await wait_for_job(kube, JOB)
    message = "dataset beta is not in storage (datasets/abc.json)"
    await kube.patch_status(ROLLOUT_JOBS, JOB, job_status("Failed", {}, message=message))
    outcome = await run
    assert outcome.code == 1
    assert f"{JOB} Failed: 0/0 trials done" in outcome.stdout
    assert f"job {JOB} failed: {message}" in outcome.stderr
    # No trial ran: what there is is the job as submitted.
    assert local_tree(jobs_dir / JOB) == {"config.json": store.get_bytes(f"jobs/{JOB}/config.json")}


async def test_a_deleted_job_exits_3_and_says_where_results_are(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    store: ObjectStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube.needs_garbage_collector()  # owner references cascade
    job_file = workspace.job_file()
    run = asyncio.create_task(cli.run(capsys, *run_args(cli, job_file)))
    await wait_for_job(kube, JOB)
    await kube.wait_for(lambda: _owned_secret(kube), what="owned Secret")
    await kube.delete(ROLLOUT_JOBS, JOB)
    outcome = await run
    assert outcome.code == 3
    assert f"RolloutJob {JOB} was deleted before it finished" in outcome.stderr
    assert f"rollout download {JOB}" in outcome.stderr
    # The ownerReference cascades (the garbage collector's work).
    await kube.wait_for(lambda: kube.gone(SECRETS, SECRET), what="the job's Secret deleted")

    # The cancelled job keeps its config.json, and `rollout download` brings it down.
    config = store.get_bytes(job_config_key("", JOB))
    assert json.loads(config) == yaml.safe_load(job_file.read_text())
    out = workspace.root / "out"
    download = ["download", JOB, "--jobs-dir", str(out), *cli.cluster_args(), *cli.storage_args()]
    downloaded = await cli.run(capsys, *download)
    assert downloaded.code == 0, downloaded.stderr
    assert local_tree(out / JOB) == {"config.json": config}


async def test_the_watch_is_made_again_when_the_server_ends_it(
    kube: Kube, cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    args = run_args(cli, workspace.job_file(), "--watch-timeout", "1")
    run = asyncio.create_task(cli.run(capsys, *args))
    await wait_for_job(kube, JOB)

    def watches() -> list[dict[str, str]]:
        return [
            dict(c.params)
            for c in kube.calls()
            if c.is_watch and c.resource == ROLLOUT_JOBS and c.user_agent.startswith("OpenAPI")
        ]

    await wait_for_watch(kube, count=3)
    await kube.patch_status(ROLLOUT_JOBS, JOB, job_status("Completed", rewards_of(TRIALS)))
    outcome = await run
    assert outcome.code == 0, outcome.stderr
    params = watches()
    assert all(p["timeoutSeconds"] == "1" for p in params)
    assert all(p["fieldSelector"] == f"metadata.name={JOB}" for p in params)
    # Each watch resumes where the last left off: never from scratch (no resourceVersion).
    assert all(p.get("resourceVersion") for p in params)
    lists = [c for c in kube.calls() if c.resource == ROLLOUT_JOBS and c.method == "GET"]
    assert sum(1 for c in lists if not c.is_watch and c.name is None) == 1  # one list only


async def test_ctrl_c_leaves_the_job_running_and_says_how_to_follow_it(
    kube: Kube, cli: Cli, workspace: Workspace, tmp_path: Path
) -> None:
    env = {**os.environ, **cli.environ}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rollout.cli.main",
        *run_args(cli, workspace.job_file()),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await wait_for_job(kube, JOB)
        await wait_for_watch(kube)
        process.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = stderr.decode()
    assert process.returncode == 130, text
    assert "the job keeps running in the cluster" in text
    assert f"rollout status {JOB} --watch" in text
    assert f"rollout download {JOB}" in text
    assert f"rollout cancel {JOB}" in text
    assert "Traceback" not in text
    assert await kube.find(ROLLOUT_JOBS, JOB) is not None


async def test_a_refused_rolloutjob_leaves_no_secret_and_no_config_json_behind(
    kube: Kube,
    cli: Cli,
    workspace: Workspace,
    store: ObjectStore,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kube.fail("POST", ROLLOUT_JOBS, status=403, reason="Forbidden", message="not allowed here")
    outcome = await cli.run(capsys, *run_args(cli, workspace.job_file()))
    assert outcome.code == 1
    assert outcome.stderr.splitlines()[-1] == (
        f"error: cannot create RolloutJob {JOB} in namespace {kube.namespace} ({kube.url}, "
        "context test): not allowed here (403 Forbidden)"
    )
    writes = [(c.method, c.resource, c.name) for c in kube.writes()]
    assert writes == [
        ("POST", SECRETS, SECRET),
        ("POST", ROLLOUT_JOBS, JOB),
        ("DELETE", SECRETS, SECRET),
    ]
    assert await kube.find(SECRETS, SECRET) is None
    # Nor its config.json, which was written first: the same job can be submitted again.
    assert not store.exists(job_config_key("", JOB))
    again = await cli.run(capsys, *run_args(cli, workspace.job_file(), "--detach"))
    assert again.code == 0, again.stderr
    assert store.exists(job_config_key("", JOB))


async def test_a_job_no_operator_picks_up_gets_a_hint_and_the_cli_waits_on(
    kube: Kube, cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    """No operator serves the namespace: the job gets no status. Once the grace is over, the
    CLI says so and where to look, then goes on waiting (an operator may come)."""
    args = run_args(cli, workspace.job_file(), "--operator-grace", "1")
    run = asyncio.create_task(cli.run(capsys, *args))
    await wait_for_job(kube, JOB)
    # The first watch lasts the grace at most; the CLI warns before it opens the second.
    await wait_for_watch(kube, count=2)
    await kube.patch_status(ROLLOUT_JOBS, JOB, job_status("Completed", rewards_of(TRIALS)))
    outcome = await run
    assert outcome.code == 0, outcome.stderr
    hint = (
        f"warning: no operator has picked up RolloutJob {JOB} in namespace {kube.namespace} "
        "after 1 s: check that the operator runs"
    )
    assert hint in outcome.stderr
    assert outcome.stderr.count("no operator has picked up") == 1
    assert "still waiting (--fail-fast stops here instead)" in outcome.stderr
    # Once it has warned, it watches as usual again (not every grace).
    watches = [c for c in kube.calls() if c.is_watch and c.resource == ROLLOUT_JOBS]
    timeouts = [c.params["timeoutSeconds"] for c in watches]
    assert timeouts[:2] == ["1", str(WATCH_TIMEOUT_SEC)]


async def test_with_fail_fast_no_operator_is_an_error(
    kube: Kube, cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    args = run_args(cli, workspace.job_file(), "--operator-grace", "1", "--fail-fast")
    outcome = await cli.run(capsys, *args)
    assert outcome.code == 1
    assert outcome.stderr.splitlines()[-1].startswith(
        f"error: no operator has picked up RolloutJob {JOB} in namespace {kube.namespace}"
    )
    assert "kubectl get deployments --all-namespaces" in outcome.stderr
    assert await kube.find(ROLLOUT_JOBS, JOB) is not None  # left for an operator to come
