"""runner-image/slim_botocore.py, run as the runner image's build runs it, on a copy of this
botocore's data directory: what it removes, what it keeps, and that an S3 client is still made
from what is left (the runner's only client)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import botocore
import botocore.loaders
import botocore.session

from paths import REPO

SCRIPT = REPO / "runner-image" / "slim_botocore.py"
DATA = Path(botocore.__file__).parent / "data"
SERVICES = ("s3", "sts", "sso", "sso-oidc", "signin", "ec2", "lambda", "dynamodb")


def data_copy(tmp_path: Path, services: tuple[str, ...] = SERVICES) -> Path:
    """botocore's top-level data files and a few of its services, as botocore lays them out."""
    copy = tmp_path / "data"
    copy.mkdir()
    for entry in DATA.iterdir():
        if entry.is_file():
            shutil.copy2(entry, copy / entry.name)
    for name in services:
        shutil.copytree(DATA / name, copy / name)
    return copy


def slim(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_only_s3_and_the_credential_chains_services_are_left(tmp_path: Path) -> None:
    data = data_copy(tmp_path)
    files = sorted(entry.name for entry in data.iterdir() if entry.is_file())
    done = slim(data)
    assert done.returncode == 0, done.stderr
    assert "removed 3 service models" in done.stdout
    assert sorted(entry.name for entry in data.iterdir() if entry.is_dir()) == [
        "s3",
        "signin",
        "sso",
        "sso-oidc",
        "sts",
    ]
    assert sorted(entry.name for entry in data.iterdir() if entry.is_file()) == files
    assert "endpoints.json" in files
    # Again: nothing more to remove, and still no error.
    again = slim(data)
    assert again.returncode == 0, again.stderr
    assert "removed 0 service models" in again.stdout


def test_an_s3_client_is_made_from_what_is_left(tmp_path: Path) -> None:
    data = data_copy(tmp_path)
    assert slim(data).returncode == 0
    # A loader that reads nothing but the slimmed directory, as the image's botocore does.
    loader = botocore.loaders.Loader(
        extra_search_paths=[str(data)], include_default_search_paths=False
    )
    session = botocore.session.Session()
    session.register_component("data_loader", loader)
    client = session.create_client(
        "s3",
        region_name="eu-west-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="key",
        aws_secret_access_key="secret",
    )
    assert client.meta.service_model.service_name == "s3"
    assert "PutObject" in client.meta.service_model.operation_names
    assert "ec2" not in loader.list_available_services("service-2")
    assert "sts" in loader.list_available_services("service-2")


def test_a_directory_without_s3_is_refused_and_left_alone(tmp_path: Path) -> None:
    data = data_copy(tmp_path, ("sts", "ec2"))
    done = slim(data)
    assert done.returncode != 0
    assert "has no service directory s3" in done.stderr
    assert (data / "ec2").is_dir()  # nothing removed
