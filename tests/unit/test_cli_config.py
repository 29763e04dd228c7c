"""The CLI's storage and runner image settings: flags over environment over the config file, bad
values reported where they were written, and what goes into the RolloutJob's spec.storage."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rollout.api.errors import InvalidInput, Problem
from rollout.api.resources import StorageSpec
from rollout.cli import config

FILE = """\
storage:
  bucket: file-bucket
  endpoint: http://file:9000
  prefix: file/prefix
  region: eu-west-1
  pathStyle: true
  credentialsSecret: file-secret
runnerImage: example.com/runner:file
"""


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_storage_arguments(parser)
    config.add_runner_image_argument(parser)
    return parser.parse_args(list(flags))


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(FILE)
    return path


def test_the_config_file_alone(config_file: Path) -> None:
    settings = config.resolve(parse(), {"ROLLOUT_CONFIG": str(config_file)})
    assert settings.storage_spec() == StorageSpec(
        bucket="file-bucket",
        prefix="file/prefix",
        endpoint="http://file:9000",
        region="eu-west-1",
        path_style=True,
        credentials_secret="file-secret",
    )
    assert settings.runner_image == "example.com/runner:file"
    assert settings.origins["bucket"] == (str(config_file), "storage.bucket")


def test_flags_win_over_the_environment_which_wins_over_the_file(config_file: Path) -> None:
    environ = {
        "ROLLOUT_CONFIG": str(config_file),
        "ROLLOUT_STORAGE_BUCKET": "env-bucket",
        "ROLLOUT_STORAGE_ENDPOINT": "http://env:9000",
        "ROLLOUT_STORAGE_PATH_STYLE": "false",
        "ROLLOUT_RUNNER_IMAGE": "example.com/runner:env",
        "ROLLOUT_STORAGE_PREFIX": "",  # empty counts as unset
    }
    flags = parse("--storage-bucket", "flag-bucket", "--no-storage-path-style")
    settings = config.resolve(flags, environ)
    assert (settings.bucket, settings.endpoint, settings.prefix) == (
        "flag-bucket",
        "http://env:9000",
        "file/prefix",
    )
    assert settings.path_style is False
    assert settings.runner_image == "example.com/runner:env"
    assert settings.origins["bucket"] == ("command line", "--storage-bucket")
    assert settings.origins["endpoint"] == ("environment", "ROLLOUT_STORAGE_ENDPOINT")


def test_the_default_config_file_and_aws_region(tmp_path: Path) -> None:
    default = tmp_path / "xdg" / "rollout" / "config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("storage:\n  bucket: b\n  credentials:\n    existingSecret: chart-secret\n")
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "AWS_REGION": "ap-south-1"}
    settings = config.resolve(parse(), environ)
    assert (settings.bucket, settings.region, settings.credentials_secret) == (
        "b",
        "ap-south-1",
        "chart-secret",
    )
    assert settings.config_file == default
    # No file at all is no settings at all (and no error): render then leaves storage out.
    empty = config.resolve(parse(), {"HOME": str(tmp_path / "nobody")})
    assert empty.storage_spec() is None


def test_the_cli_reaches_storage_with_its_own_endpoint_and_aws_credentials() -> None:
    flags = parse(
        "--storage-bucket", "b",
        "--storage-endpoint", "http://127.0.0.1:9000/",
        "--storage-cluster-endpoint", "http://minio.rollout-system:9000",
        "--storage-path-style",
    )  # fmt: skip
    settings = config.resolve(flags, {"HOME": "/nonexistent"})
    environ = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    store = settings.object_store(environ)
    assert store.location.endpoint == "http://127.0.0.1:9000"
    assert store.location.path_style is True
    assert store.secrets() == ["AKIAEXAMPLE", "s3cr3t"]
    spec = settings.storage_spec()
    assert spec is not None
    assert spec.endpoint == "http://minio.rollout-system:9000"
    assert settings.loopback_warning() is None
    # Without a credential pair: boto3's default chain (profiles, SSO, instance roles).
    assert settings.storage_credentials({"AWS_ACCESS_KEY_ID": "only-half"}) is None


@pytest.mark.parametrize(
    ("endpoint", "warned"),
    [
        ("http://127.0.0.1:9000", True),
        ("http://localhost:9000", True),
        ("http://[::1]:9000", True),
        ("http://minio.example.com", False),
        ("https://s3.amazonaws.com", False),
    ],
)
def test_a_loopback_endpoint_without_a_cluster_endpoint_is_warned_about(
    endpoint: str, warned: bool
) -> None:
    settings = config.resolve(
        parse("--storage-bucket", "b", "--storage-endpoint", endpoint), {"HOME": "/nonexistent"}
    )
    warning = settings.loopback_warning()
    assert (warning is not None) == warned
    if warning:
        assert "--storage-cluster-endpoint" in warning


def test_bad_values_are_reported_where_they_were_written(config_file: Path) -> None:
    config_file.write_text("storage:\n  bucket: 'no spaces allowed'\n  prefix: a//b\n")
    environ = {
        "ROLLOUT_CONFIG": str(config_file),
        "ROLLOUT_STORAGE_PATH_STYLE": "maybe",
    }
    with pytest.raises(InvalidInput) as raised:
        config.resolve(parse(), environ)
    assert raised.value.problems == [
        Problem("environment", "ROLLOUT_STORAGE_PATH_STYLE", "'maybe' is not true or false")
    ]
    with pytest.raises(InvalidInput) as raised:
        config.resolve(
            parse("--storage-endpoint", "minio:9000"), {"ROLLOUT_CONFIG": str(config_file)}
        )
    assert [(p.file, p.field) for p in raised.value.problems] == [
        (str(config_file), "storage.bucket"),
        (str(config_file), "storage.prefix"),
        ("command line", "--storage-endpoint"),
    ]


def test_config_file_problems_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("storage:\n  bucket: b\n  pathstyle: true\n  pathStyle: 'yes'\nrunner: x\n")
    with pytest.raises(InvalidInput) as raised:
        config.resolve(parse(), {"ROLLOUT_CONFIG": str(path)})
    assert [(p.file, p.field, p.message) for p in raised.value.problems] == [
        (str(path), "storage.pathStyle", "Input should be a valid boolean"),
        (str(path), "storage.pathstyle", "unknown key"),
        (str(path), "runner", "unknown key"),
    ]
    path.write_text("- a list\n")
    with pytest.raises(InvalidInput, match="must be a mapping with a `storage:` section"):
        config.resolve(parse(), {"ROLLOUT_CONFIG": str(path)})
    with pytest.raises(InvalidInput, match=r"no such file \(named by \$ROLLOUT_CONFIG\)"):
        config.resolve(parse(), {"ROLLOUT_CONFIG": str(tmp_path / "missing.yaml")})


def test_no_bucket_is_an_error_only_when_storage_is_needed(tmp_path: Path) -> None:
    settings = config.resolve(parse(), {"HOME": str(tmp_path)})
    assert settings.storage_spec() is None
    with pytest.raises(InvalidInput) as raised:
        settings.object_store({})
    (problem,) = raised.value.problems
    assert (problem.file, problem.field) == ("command line", "--storage-bucket")
    assert str(tmp_path / ".config" / "rollout" / "config.yaml") in problem.message
