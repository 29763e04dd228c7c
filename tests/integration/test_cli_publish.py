"""`rollout publish` and `rollout render --publish` against a real S3 endpoint: bundles named by
their content, each object written once, and nothing written when any dataset is bad."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml
from cli_kit import Cli, Workspace, s3_client, versions_by_key
from s3_kit import S3Settings

from rollout.api.taskdir import environment_hash, task_content_hash

pytestmark = pytest.mark.integration


@pytest.fixture
def storage_cli(tmp_path: Path, s3_settings: S3Settings) -> Cli:
    """The CLI with storage settings and no kubeconfig (publishing needs no cluster), unlike
    conftest's `cli`."""
    (tmp_path / "home").mkdir()
    return Cli(tmp_path / "no-kubeconfig", s3_settings, tmp_path / "home")


async def test_publish_prints_addresses_and_uploads_each_object_once(
    storage_cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    s3_client(s3_settings).put_bucket_versioning(
        Bucket=s3_settings.location.bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    registry = f"{workspace.root / 'registry.json'}#beta@1.0"
    args = ["publish", str(workspace.root / "alpha"), registry, *storage_cli.storage_args()]
    first = await storage_cli.run(capsys, *args)
    assert first.code == 0, first.stderr
    entries = yaml.safe_load(first.stdout)
    assert [e["name"] for e in entries] == ["alpha", "beta"]
    store = s3_settings.store()
    for entry in entries:  # content-addressed: the digest is the manifest's sha256
        manifest = store.get_bytes(f"datasets/{entry['digest']}.json")
        assert hashlib.sha256(manifest).hexdigest() == entry["digest"]
    hashes = {task_content_hash(workspace.root / "alpha" / name) for name in ("hello", "count")} | {
        task_content_hash(workspace.root / "beta-repo" / "tasks" / "sort")
    }
    assert set(store.list_keys("tasks/")) == {f"tasks/{h}.tar.gz" for h in hashes}
    # Each task's environment/ alone too, the context of an image build: one per distinct
    # environment (alpha's two tasks share theirs), named by its own content hash.
    environments = {
        environment_hash(workspace.root / "alpha" / name) for name in ("hello", "count")
    } | {environment_hash(workspace.root / "beta-repo" / "tasks" / "sort")}
    assert set(store.list_keys("environments/")) == {
        f"environments/{h}.tar.gz" for h in environments
    }
    contexts = len(environments - {environment_hash(workspace.root / "alpha" / "hello")})
    assert first.stderr.splitlines() == [
        f"dataset alpha (2 tasks): uploaded 2 task archives, 1 build context and the manifest "
        f"s3://{s3_settings.location.bucket}/datasets/{entries[0]['digest']}.json",
        "dataset beta (2 tasks): uploaded 1 task archive"
        + (f", {contexts} build context" if contexts else "")
        + " and the manifest "
        f"s3://{s3_settings.location.bucket}/datasets/{entries[1]['digest']}.json",
    ]

    again = await storage_cli.run(capsys, *args)
    assert again.code == 0, again.stderr
    assert yaml.safe_load(again.stdout) == entries
    assert "uploaded" not in again.stderr
    assert set(versions_by_key(s3_settings).values()) == {1}
    assert len(versions_by_key(s3_settings)) == 5 + len(environments)


async def test_a_broken_task_is_published_with_its_error_and_no_archive(
    storage_cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alpha = workspace.root / "alpha"
    (alpha / "count" / "instruction.md").unlink()
    outcome = await storage_cli.run(capsys, "publish", str(alpha), *storage_cli.storage_args())
    assert outcome.code == 0, outcome.stderr
    (entry,) = yaml.safe_load(outcome.stdout)
    assert outcome.stderr == (
        "dataset alpha (2 tasks, 1 of them broken: count): uploaded 1 task archive, 1 build "
        f"context and the manifest s3://{s3_settings.location.bucket}/datasets/{entry['digest']}"
        ".json\n"
    )
    store = s3_settings.store()
    count, hello = json.loads(store.get_bytes(f"datasets/{entry['digest']}.json"))["tasks"]
    assert count == {
        "name": "count",
        "has_solution": False,
        "error": {
            "type": "task_invalid",
            "message": "Task 'count' is invalid: instruction.md: missing (the agent's instruction)",
        },
    }
    assert store.list_keys("tasks/") == [f"tasks/{hello['content_hash']}.tar.gz"]


async def test_a_bad_dataset_stops_the_publish_before_anything_is_written(
    storage_cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = workspace.root / "missing"
    registry = workspace.root / "registry.json"
    args = ["publish", str(workspace.root / "alpha"), str(missing), str(registry)]
    outcome = await storage_cli.run(capsys, *args, *storage_cli.storage_args())
    assert outcome.code == 1
    assert outcome.stderr.splitlines() == [
        f"error: {missing}: dataset directory does not exist",
        f"error: {registry}: a registry file needs the dataset's name: REGISTRY#NAME or "
        "REGISTRY#NAME@VERSION",
    ]
    assert s3_settings.store().list_keys("") == []


async def test_a_task_that_cannot_be_archived_is_broken_and_the_rest_is_published(
    storage_cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alpha = workspace.root / "alpha"
    os.symlink("../../../../../etc", alpha / "hello" / "environment" / "secrets")  # leaves it
    outcome = await storage_cli.run(capsys, "publish", str(alpha), *storage_cli.storage_args())
    assert outcome.code == 0, outcome.stderr
    (entry,) = yaml.safe_load(outcome.stdout)
    assert outcome.stderr.startswith("dataset alpha (2 tasks, 1 of them broken: hello): ")
    store = s3_settings.store()
    count, hello = json.loads(store.get_bytes(f"datasets/{entry['digest']}.json"))["tasks"]
    assert hello["error"] == {
        "type": "task_invalid",
        "message": "Task 'hello' is invalid: environment/secrets: symbolic link to "
        "'../../../../../etc' points outside the task",
    }
    assert store.list_keys("tasks/") == [f"tasks/{count['content_hash']}.tar.gz"]


async def test_render_publish_uploads_the_bundles_the_manifest_names(
    storage_cli: Cli,
    workspace: Workspace,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = workspace.job_file()
    outcome = await storage_cli.run(
        capsys, "render", str(job), "--publish", *storage_cli.storage_args()
    )
    assert outcome.code == 0, outcome.stderr
    (rollout_job,) = yaml.safe_load_all(outcome.stdout)
    digests = [d["digest"] for d in rollout_job["spec"]["datasets"]]
    store = s3_settings.store()
    assert sorted(store.list_keys("datasets/")) == sorted(f"datasets/{d}.json" for d in digests)
    assert rollout_job["spec"]["storage"]["bucket"] == s3_settings.location.bucket
    assert "uploaded 2 task archives, 1 build context and the manifest" in outcome.stderr


async def test_publish_without_credentials_says_where_they_come_from(
    storage_cli: Cli,
    workspace: Workspace,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # boto3's own chain reads this process's environment and files: none of them here.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    outcome = await storage_cli.run(
        capsys,
        "publish",
        str(workspace.root / "alpha"),
        *storage_cli.storage_args(),
        environ={"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None},
    )
    assert outcome.code == 1
    assert "NoCredentialsError" in outcome.stderr
    assert "no credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in (
        outcome.stderr
    )
    assert "ROLLOUT_STORAGE_CREDENTIALS_DIR" in outcome.stderr


async def test_publish_to_a_bucket_that_does_not_exist_says_how_to_make_it(
    storage_cli: Cli, workspace: Workspace, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["publish", str(workspace.root / "alpha"), *storage_cli.storage_args()]
    bucket_index = args.index("--storage-bucket") + 1
    args[bucket_index] = "rollout-no-such-bucket"
    outcome = await storage_cli.run(capsys, *args)
    assert outcome.code == 1
    assert "the bucket rollout-no-such-bucket does not exist: create it" in outcome.stderr
    assert "aws s3 mb s3://rollout-no-such-bucket" in outcome.stderr
