"""In-cluster builds as a job sees them: which trials need a build and which cannot have one, the
image's hash and names, the RolloutImage a job makes (valid for its model and its CRD), the
operator's build settings, and the environment's content hash and archive the build starts from."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from crd_rules import validate_object
from paths import REPO
from rollout.api.dataset import load_local_dataset
from rollout.api.errors import InvalidInput, Problem
from rollout.api.failures import FailureClass
from rollout.api.images import image_hash, pinned_reference
from rollout.api.plan import PlannedTrial, ResolvedTask
from rollout.api.resources import Builder, BuilderType, RolloutImage, RolloutJob, StorageSpec
from rollout.api.task import parse_task_config
from rollout.api.taskdir import environment_hash, load_task, tree_hash
from rollout.api.trials import TrialKey
from rollout.controller.builds import (
    DEFAULT_BUILD_PLATFORM,
    DEFAULT_BUILDER_IMAGES,
    BuildRefused,
    BuildSettings,
    ImageBuild,
    check_registry,
    check_repository,
    image_manifest,
    plan_image,
)
from rollout.controller.config import ENVIRONMENT, OperatorConfig
from rollout.datasets.bundle import build_manifest, environment_archive
from rollout_runner.archive import extract_task_archive

IMAGE_CRD = REPO / "crds" / "rollout.dev_rolloutimages.yaml"
RUNNER_IMAGE = "registry.example.com/rollout-runner:0.3.0"
ENV_HASH = "0123456789abcdef" * 4
OTHER_ENV_HASH = "fedcba9876543210" * 4
JOB_UID = "3f2a1b0c-9d8e-4f7a-b6c5-d4e3f2a1b0c9"
OTHER_JOB_UID = "7e6d5c4b-3a29-4180-9f8e-7d6c5b4a3928"
STORAGE = StorageSpec(bucket="evals", prefix="team-a", credentials_secret="team-a-storage")
SETTINGS = OperatorConfig(
    runner_image=RUNNER_IMAGE,
    image_registry="registry.local:5000",
    image_pull_registry="localhost:5001",
    image_repository="evals/rollout-env",
    image_push_secret="registry-push",
    image_registry_plain_http=True,
).builds
assert SETTINGS is not None

BUILD_TOML: dict[str, Any] = {"environment": {"build_timeout_sec": 100.5}}
"""A task that needs a build: no docker_image."""
PULL_TOML: dict[str, Any] = {"environment": {"docker_image": "python:3.12-slim"}}
"""A task whose image is pulled."""


def planned(
    toml: dict[str, Any] = BUILD_TOML,
    *,
    env_hash: str | None = ENV_HASH,
    agent: str = "claude",
    task: str = "fix-the-build",
) -> PlannedTrial:
    config = parse_task_config(toml)
    resolved = ResolvedTask(task, "c" * 64, config, environment_hash=env_hash)
    return PlannedTrial(TrialKey(agent, "d", task, 1), f"nightly-{agent}-d-{task}-1", resolved)


def job(**spec: Any) -> RolloutJob:
    return RolloutJob.model_validate(
        {
            "metadata": {"name": "nightly", "namespace": "evals", "uid": JOB_UID},
            "spec": {
                "jobName": "nightly-evals",
                "agents": [{"name": "oracle"}, {"name": "claude", "execute": "run"}],
                "datasets": [{"name": "d", "digest": "a" * 64}],
                **spec,
            },
        }
    )


def plan(
    trial: PlannedTrial | None = None,
    *,
    force_build: bool = False,
    settings: BuildSettings | None = SETTINGS,
    job_uid: str = JOB_UID,
) -> ImageBuild | BuildRefused | None:
    return plan_image(
        trial or planned(), force_build=force_build, settings=settings, job_uid=job_uid
    )


def built(trial: PlannedTrial | None = None, **kwargs: Any) -> ImageBuild:
    found = plan(trial, **kwargs)
    assert isinstance(found, ImageBuild), found
    return found


def manifest(
    build: ImageBuild, *, rj: RolloutJob | None = None, trial: PlannedTrial | None = None
) -> dict[str, Any]:
    assert SETTINGS is not None
    return image_manifest(
        build,
        trial or planned(),
        job=rj or job(),
        job_uid=JOB_UID,
        namespace="evals",
        storage=STORAGE,
        settings=SETTINGS,
    )


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(IMAGE_CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


# --- plan_image -----------------------------------------------------------------------------------


def test_a_task_with_its_own_image_needs_no_build() -> None:
    assert plan(planned(PULL_TOML)) is None
    assert plan(planned(PULL_TOML), settings=None) is None
    assert plan(planned(PULL_TOML, env_hash=None)) is None


def test_without_a_registry_a_build_is_refused_as_the_infrastructures() -> None:
    refused = plan(settings=None)
    assert isinstance(refused, BuildRefused)
    assert refused.failure_class is FailureClass.INFRASTRUCTURE
    assert "'fix-the-build'" in refused.message
    assert "ROLLOUT_IMAGE_REGISTRY" in refused.message
    assert "docker_image" in refused.message
    forced = plan(planned(PULL_TOML), settings=None, force_build=True)
    assert isinstance(forced, BuildRefused)
    assert forced.failure_class is FailureClass.INFRASTRUCTURE
    assert "force_build" in forced.message


@pytest.mark.parametrize("agent", ["claude", "oracle"])
def test_without_a_dockerfile_a_build_is_refused_as_the_tasks(agent: str) -> None:
    refused = plan(planned(env_hash=None, agent=agent))
    assert isinstance(refused, BuildRefused)
    assert refused.failure_class is FailureClass.TASK
    assert "'fix-the-build'" in refused.message
    assert "environment/Dockerfile" in refused.message


def test_a_build_names_the_image_by_its_hash() -> None:
    assert SETTINGS is not None
    build = built()
    expected = image_hash(ENV_HASH, SETTINGS.builder, SETTINGS.platform)
    assert build.image_hash == expected
    assert build.environment_hash == ENV_HASH
    assert build.image == f"registry.local:5000/evals/rollout-env:{expected}"
    assert build.pull_image == f"localhost:5001/evals/rollout-env:{expected}"
    assert build.name == f"env-{expected[:51]}"
    assert build.forced is False


def test_two_jobs_share_an_unforced_build() -> None:
    assert built(job_uid=JOB_UID) == built(job_uid=OTHER_JOB_UID)


def test_a_forced_build_is_one_per_job() -> None:
    mine = built(force_build=True)
    again = built(force_build=True)
    theirs = built(force_build=True, job_uid=OTHER_JOB_UID)
    unforced = built()
    assert mine.forced is True
    assert mine.name == again.name
    assert mine.name != theirs.name
    assert mine.name != unforced.name
    # The same image all the same: a forced build pushes the tag that everyone pulls.
    assert mine.image == theirs.image == unforced.image
    assert mine.image_hash == unforced.image_hash
    for build in (mine, theirs, unforced):
        assert build.name.startswith("env-")
        assert len(build.name) <= 63


def test_a_task_with_its_own_image_is_built_when_the_job_forces_it() -> None:
    build = built(planned(PULL_TOML), force_build=True)
    assert build.forced is True
    assert build.environment_hash == ENV_HASH


# --- image_hash -----------------------------------------------------------------------------------


BUILDKIT = Builder(type=BuilderType.BUILDKIT, image="moby/buildkit:v0.23.2-rootless")


def test_the_image_hash_is_stable() -> None:
    first = image_hash(ENV_HASH, BUILDKIT, "linux/amd64")
    again = image_hash(ENV_HASH, Builder(type="buildkit", image=BUILDKIT.image), "linux/amd64")
    assert first == again
    assert len(first) == 64
    assert int(first, 16) >= 0  # hex


def test_the_image_hash_changes_with_everything_it_depends_on() -> None:
    hashes = {
        "base": image_hash(ENV_HASH, BUILDKIT, "linux/amd64"),
        "environment": image_hash(OTHER_ENV_HASH, BUILDKIT, "linux/amd64"),
        "builder type": image_hash(
            ENV_HASH, Builder(type=BuilderType.BUILDAH, image=BUILDKIT.image), "linux/amd64"
        ),
        "builder image": image_hash(
            ENV_HASH,
            Builder(type=BuilderType.BUILDKIT, image="moby/buildkit:v0.24.0-rootless"),
            "linux/amd64",
        ),
        "platform": image_hash(ENV_HASH, BUILDKIT, "linux/arm64"),
    }
    assert len(set(hashes.values())) == len(hashes), hashes


# --- image_manifest -------------------------------------------------------------------------------


def test_the_rollout_image_is_valid_for_its_model_and_its_crd() -> None:
    for build in (built(), built(force_build=True)):
        made = manifest(build)
        image = RolloutImage.model_validate(made)
        assert image.metadata.name == build.name
        validate_object(crd_schema(), made)


def test_the_rollout_image_carries_what_the_build_needs() -> None:
    build = built()
    made = manifest(build, rj=job(timeoutMultiplier=1.5))
    spec = RolloutImage.model_validate(made).spec
    assert made["apiVersion"] == "rollout.dev/v1alpha1"
    assert made["kind"] == "RolloutImage"
    assert made["metadata"]["namespace"] == "evals"
    assert spec.environment_hash == ENV_HASH
    assert spec.image_hash == build.image_hash
    assert spec.image == build.image
    assert spec.pull_image == build.pull_image
    assert spec.context.storage == STORAGE
    assert spec.context.key == f"team-a/environments/{ENV_HASH}.tar.gz"
    assert spec.log_key == f"team-a/jobs/nightly-evals/builds/{build.image_hash}.log"
    assert spec.builder == Builder(
        type=BuilderType.BUILDKIT, image=DEFAULT_BUILDER_IMAGES[BuilderType.BUILDKIT]
    )
    assert spec.platform == DEFAULT_BUILD_PLATFORM
    assert spec.plain_http is True
    assert spec.push_secret == "registry-push"
    assert spec.force_build is False
    assert spec.timeout_seconds == 151  # ceil(100.5 x 1.5)
    assert spec.requested_by == "nightly"


@pytest.mark.parametrize(
    ("build_timeout", "multiplier", "expected"),
    [(600, 1.0, 600), (100.5, 1.5, 151), (10, 0.25, 3), (0.2, 1.0, 1), (90, 2.0, 180)],
)
def test_the_build_timeout_is_the_tasks_times_the_jobs_multiplier_rounded_up(
    build_timeout: float, multiplier: float, expected: int
) -> None:
    trial = planned({"environment": {"build_timeout_sec": build_timeout}})
    made = manifest(built(trial), rj=job(timeoutMultiplier=multiplier), trial=trial)
    assert made["spec"]["timeoutSeconds"] == expected


def test_a_cached_image_belongs_to_no_job() -> None:
    made = manifest(built())
    assert "ownerReferences" not in made["metadata"]
    assert "rollout.dev/job" not in made["metadata"]["labels"]


def test_a_forced_image_belongs_to_its_job() -> None:
    made = manifest(built(force_build=True))
    assert made["metadata"]["ownerReferences"] == [
        {"apiVersion": "rollout.dev/v1alpha1", "kind": "RolloutJob", "name": "nightly",
         "uid": JOB_UID, "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert made["metadata"]["labels"]["rollout.dev/job"] == "nightly"
    assert made["spec"]["forceBuild"] is True


def test_the_keys_without_a_storage_prefix_start_at_the_bucket_root() -> None:
    assert SETTINGS is not None
    build = built()
    made = image_manifest(
        build,
        planned(),
        job=job(),
        job_uid=JOB_UID,
        namespace="evals",
        storage=StorageSpec(bucket="evals"),
        settings=SETTINGS,
    )
    assert made["spec"]["context"]["key"] == f"environments/{ENV_HASH}.tar.gz"
    assert made["spec"]["logKey"] == f"jobs/nightly-evals/builds/{build.image_hash}.log"


# --- registry and repository checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["registry.example.com", "localhost:5001", "10.0.0.1:5000", "registry", "my-registry.internal"],
)
def test_registry_addresses_are_accepted(value: str) -> None:
    assert check_registry(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "https://registry.example.com",
        "registry.example.com/evals",
        "registry.example.com:",
        "registry.example.com:http",
        "registry.example.com:123456",
        "-registry.example.com",
        "registry.example.com.",
        "registry example.com",
    ],
)
def test_what_is_not_a_registry_address_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a registry address"):
        check_registry(value)


@pytest.mark.parametrize(
    "value", ["rollout-env", "evals/rollout-env", "a/b/c", "my_repo", "v1.2", "0abc/x9"]
)
def test_repositories_are_accepted(value: str) -> None:
    assert check_repository(value) == value


@pytest.mark.parametrize("value", ["my__repo", "my--repo", "team/a__b---c"])
def test_repositories_with_the_separators_oci_allows_are_accepted(value: str) -> None:
    # The distribution spec's path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
    assert check_repository(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Evals/env",
        "/evals",
        "evals/",
        "evals//env",
        "-env",
        "env-",
        "env:tag",
        "env@sha256",
        "registry.example.com:5000/env",
        "with space",
    ],
)
def test_what_is_not_a_repository_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a repository"):
        check_repository(value)


# --- pinned_reference -----------------------------------------------------------------------------


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("reference", "pinned"),
    [
        ("host:5000/a/b:tag", f"host:5000/a/b@{DIGEST}"),
        ("host:5000/a/b", f"host:5000/a/b@{DIGEST}"),
        ("localhost:5001/rollout-env", f"localhost:5001/rollout-env@{DIGEST}"),
        (f"localhost:5001/rollout-env:{ENV_HASH}", f"localhost:5001/rollout-env@{DIGEST}"),
        ("registry.example.com/evals/env:v1", f"registry.example.com/evals/env@{DIGEST}"),
        ("python:3.12", f"python@{DIGEST}"),
        (f"host:5000/a/b:tag@sha256:{'0' * 64}", f"host:5000/a/b@{DIGEST}"),
    ],
)
def test_a_pinned_reference_names_the_digest_and_keeps_the_port(
    reference: str, pinned: str
) -> None:
    assert pinned_reference(reference, DIGEST) == pinned


# --- the operator's build settings ----------------------------------------------------------------


def test_without_a_registry_there_are_no_builds() -> None:
    assert OperatorConfig(runner_image=RUNNER_IMAGE).builds is None
    assert OperatorConfig.from_env({"ROLLOUT_RUNNER_IMAGE": RUNNER_IMAGE}).builds is None


def test_a_registry_alone_gives_the_default_build_settings() -> None:
    builds = OperatorConfig(runner_image=RUNNER_IMAGE, image_registry="registry.local:5000").builds
    assert builds == BuildSettings(
        registry="registry.local:5000",
        repository="rollout-env",
        pull_registry="registry.local:5000",
        plain_http=False,
        push_secret=None,
        pull_secret=None,
        builder=Builder(
            type=BuilderType.BUILDKIT, image=DEFAULT_BUILDER_IMAGES[BuilderType.BUILDKIT]
        ),
        platform="linux/amd64",
    )


def test_buildah_without_an_image_gets_buildahs_pinned_image() -> None:
    builds = OperatorConfig(
        runner_image=RUNNER_IMAGE, image_registry="r.example", builder=BuilderType.BUILDAH
    ).builds
    assert builds is not None
    assert builds.builder == Builder(
        type=BuilderType.BUILDAH, image=DEFAULT_BUILDER_IMAGES[BuilderType.BUILDAH]
    )
    # Both defaults are pinned to a version: the builder's version is part of every image hash.
    for image in DEFAULT_BUILDER_IMAGES.values():
        name, _, tag = image.rpartition(":")
        assert name
        assert tag not in ("", "latest")


def test_the_build_settings_are_read_from_the_environment() -> None:
    config = OperatorConfig.from_env(
        {
            "ROLLOUT_RUNNER_IMAGE": RUNNER_IMAGE,
            "ROLLOUT_IMAGE_REGISTRY": "kind-registry:5000",
            "ROLLOUT_IMAGE_REPOSITORY": "evals/rollout-env",
            "ROLLOUT_IMAGE_PULL_REGISTRY": "localhost:5001",
            "ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP": "true",
            "ROLLOUT_IMAGE_PUSH_SECRET": "registry-push",
            "ROLLOUT_IMAGE_PULL_SECRET": "registry-pull",
            "ROLLOUT_IMAGE_REGISTRY_CONFIG": "/var/run/secrets/registry/.dockerconfigjson",
            "ROLLOUT_BUILDER": "Buildah",
            "ROLLOUT_BUILDER_IMAGE": "quay.io/containers/buildah:v1.40.0",
            "ROLLOUT_BUILD_PLATFORM": "linux/arm64",
            "ROLLOUT_BUILD_POLL_SEC": "0.5",
        }
    )
    assert config.builds == BuildSettings(
        registry="kind-registry:5000",
        repository="evals/rollout-env",
        pull_registry="localhost:5001",
        plain_http=True,
        push_secret="registry-push",
        pull_secret="registry-pull",
        builder=Builder(type=BuilderType.BUILDAH, image="quay.io/containers/buildah:v1.40.0"),
        platform="linux/arm64",
    )
    assert config.image_registry_config == "/var/run/secrets/registry/.dockerconfigjson"
    assert config.build_poll_sec == 0.5


def test_empty_build_variables_are_unset() -> None:
    config = OperatorConfig.from_env(
        {
            "ROLLOUT_RUNNER_IMAGE": RUNNER_IMAGE,
            "ROLLOUT_IMAGE_REGISTRY": "registry.local:5000",
            "ROLLOUT_IMAGE_PULL_REGISTRY": "",
            "ROLLOUT_IMAGE_PUSH_SECRET": "",
            "ROLLOUT_BUILDER_IMAGE": "",
        }
    )
    builds = config.builds
    assert builds is not None
    assert builds.pull_registry == "registry.local:5000"
    assert builds.push_secret is None
    assert builds.builder.image == DEFAULT_BUILDER_IMAGES[BuilderType.BUILDKIT]


def test_every_bad_build_variable_is_named() -> None:
    with pytest.raises(InvalidInput) as caught:
        OperatorConfig.from_env(
            {
                "ROLLOUT_RUNNER_IMAGE": RUNNER_IMAGE,
                "ROLLOUT_IMAGE_REGISTRY": "https://registry.example.com",
                "ROLLOUT_IMAGE_REPOSITORY": "Evals/Env",
                "ROLLOUT_IMAGE_PULL_REGISTRY": "localhost:5001/evals",
                "ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP": "sometimes",
                "ROLLOUT_BUILDER": "kaniko",
                "ROLLOUT_BUILD_POLL_SEC": "0",
            }
        )
    problems: list[Problem] = caught.value.problems
    by_variable = {p.field: p.message for p in problems}
    assert all(p.file == ENVIRONMENT for p in problems)
    assert set(by_variable) == {
        "ROLLOUT_IMAGE_REGISTRY",
        "ROLLOUT_IMAGE_REPOSITORY",
        "ROLLOUT_IMAGE_PULL_REGISTRY",
        "ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP",
        "ROLLOUT_BUILDER",
        "ROLLOUT_BUILD_POLL_SEC",
    }
    assert "is not a registry address" in by_variable["ROLLOUT_IMAGE_REGISTRY"]
    assert "is not a repository" in by_variable["ROLLOUT_IMAGE_REPOSITORY"]
    assert "'kaniko' is not one of buildkit, buildah" in by_variable["ROLLOUT_BUILDER"]


# --- the environment's content hash and archive ---------------------------------------------------


ENVIRONMENT_FILES: dict[str, bytes] = {
    "environment/Dockerfile": b"FROM python:3.12-slim\nCOPY app /app\nRUN pip install -e /app\n",
    "environment/app/setup.py": b"from setuptools import setup\nsetup(name='app')\n",
    "environment/app/run.sh": b"#!/bin/sh\nexec python -m app\n",
    "environment/app/data/seed.bin": bytes(range(256)),
}
OTHER_FILES: dict[str, bytes] = {
    "instruction.md": b"Fix the build.\n",
    "task.toml": b"[environment]\nbuild_timeout_sec = 300\n",
    "tests/test.sh": b"#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    "solution/solve.sh": b"#!/bin/sh\ntrue\n",
}
EXECUTABLE = {"environment/app/run.sh", "tests/test.sh", "solution/solve.sh"}


def make_task(
    root: Path,
    files: dict[str, bytes] | None = None,
    *,
    order: list[str] | None = None,
    mtime: int = 1_700_000_000,
) -> Path:
    """A task directory written file by file in `order`, every entry's mtime `mtime`."""
    files = files if files is not None else {**ENVIRONMENT_FILES, **OTHER_FILES}
    for rel in order or list(files):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[rel])
        path.chmod(0o755 if rel in EXECUTABLE else 0o644)
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def test_the_environment_hash_ignores_creation_order_and_times(tmp_path: Path) -> None:
    names = list({**ENVIRONMENT_FILES, **OTHER_FILES})
    one = make_task(tmp_path / "one", order=names, mtime=1_000_000)
    two = make_task(tmp_path / "elsewhere" / "two", order=names[::-1], mtime=1_700_000_000)
    (two / "environment" / "Dockerfile").chmod(0o600)  # only the executable bit is content
    assert environment_hash(one) == environment_hash(two)
    assert environment_hash(one) == tree_hash(one / "environment")


@pytest.mark.parametrize("rel", list(ENVIRONMENT_FILES))
def test_any_byte_of_any_environment_file_changes_the_hash(tmp_path: Path, rel: str) -> None:
    task = make_task(tmp_path / "t")
    before = environment_hash(task)
    data = bytearray(ENVIRONMENT_FILES[rel])
    data[len(data) // 2] ^= 0x01
    (task / rel).write_bytes(bytes(data))
    assert environment_hash(task) != before


def test_the_executable_bit_changes_the_hash(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t")
    before = environment_hash(task)
    (task / "environment" / "app" / "run.sh").chmod(0o644)
    assert environment_hash(task) != before


def test_a_renamed_or_added_file_changes_the_hash(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t")
    before = environment_hash(task)
    (task / "environment/app/setup.py").rename(task / "environment/app/setup2.py")
    renamed = environment_hash(task)
    assert renamed != before
    (task / "environment/app/empty").write_bytes(b"")
    assert environment_hash(task) not in (before, renamed)


def test_files_outside_environment_do_not_change_the_hash(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t")
    before = environment_hash(task)
    (task / "tests" / "test.sh").write_bytes(b"#!/bin/sh\nexit 1\n")
    (task / "instruction.md").write_text("Something else entirely.\n")
    (task / "solution" / "solve.sh").chmod(0o644)
    assert environment_hash(task) == before


def dataset_of_three(root: Path) -> Path:
    """A dataset: a task to build, one with an image and a Dockerfile, one with an image only."""
    make_task(root / "build-me")
    with_image = {**ENVIRONMENT_FILES, **OTHER_FILES}
    with_image["task.toml"] = b'[environment]\ndocker_image = "python:3.12-slim"\n'
    make_task(root / "image-and-dockerfile", with_image)
    image_only = {k: v for k, v in with_image.items() if not k.startswith("environment/")}
    make_task(root / "image-only", image_only)
    (root / "image-only" / "environment").mkdir()
    return root


def test_a_manifest_has_an_environment_hash_only_where_there_is_a_dockerfile(
    tmp_path: Path,
) -> None:
    root = dataset_of_three(tmp_path / "dataset")
    manifest_ = build_manifest(load_local_dataset(root))
    by_name = {task.name: task for task in manifest_.tasks}
    assert by_name["build-me"].environment_hash == environment_hash(root / "build-me")
    assert by_name["image-and-dockerfile"].environment_hash == environment_hash(
        root / "image-and-dockerfile"
    )
    assert by_name["image-only"].environment_hash is None
    assert "environment_hash" not in by_name["image-only"].model_dump()
    # The same environment/ gives the same hash whatever else the task holds.
    assert by_name["build-me"].environment_hash == by_name["image-and-dockerfile"].environment_hash


def archive_members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return {member.name: member for member in tar.getmembers()}


def test_the_environment_archive_holds_the_environment_alone(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t"))
    data = environment_archive(task)
    members = archive_members(data)
    assert set(members) == {
        "Dockerfile",
        "app",
        "app/setup.py",
        "app/run.sh",
        "app/data",
        "app/data/seed.bin",
    }
    assert members["app/run.sh"].mode & 0o100
    assert not members["app/setup.py"].mode & 0o100
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        extracted = tar.extractfile("app/data/seed.bin")
        assert extracted is not None
        assert extracted.read() == ENVIRONMENT_FILES["environment/app/data/seed.bin"]


def test_the_environment_archive_unpacks_to_the_tree_its_hash_names(tmp_path: Path) -> None:
    # The archive is stored as environments/<environment hash>.tar.gz: what a build unpacks is
    # exactly what the hash covers.
    task = load_task(make_task(tmp_path / "t"))
    destination = tmp_path / "context"
    extract_task_archive(environment_archive(task), destination)
    assert tree_hash(destination) == environment_hash(task.path)


def test_the_environment_archive_is_deterministic(tmp_path: Path) -> None:
    names = list({**ENVIRONMENT_FILES, **OTHER_FILES})
    one = load_task(make_task(tmp_path / "one", order=names, mtime=1))
    two = load_task(make_task(tmp_path / "two", order=names[::-1], mtime=1_700_000_000))
    assert environment_archive(one) == environment_archive(two)
