"""`rollout login`: asks (or takes flags), checks as `rollout check` does, and keeps the settings in
the CLI's config file, owner-only; every later command reads the context, namespace and storage
credentials from it, and refuses credentials in a file others may read."""

from __future__ import annotations

import getpass
import io
import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import helm_python as helm
import pytest
import yaml
from cli_kit import Cli, Outcome, create_job, rollout_job, write_task
from s3_kit import S3Settings

from kubeharness.kube import Kube
from loopback import HOST, free_port
from paths import REPO
from s3server import S3Server, new_bucket_name

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "rollout-operator"
DEPLOYMENTS = "apps/v1/deployments"
AWS_VARIABLES = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}


class Terminal(io.StringIO):
    """Typed answers, on what looks like a terminal to the CLI."""

    def isatty(self) -> bool:
        return True


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def two_contexts(kube: Kube, path: Path) -> Path:
    """A kubeconfig whose current context `broken` names a server that is not there, and whose
    context `test` is the test's API (namespace: the test's)."""
    kube.write_kubeconfig(path)
    document = read_yaml(path)
    user = document["users"][0]["name"]
    gone = {"name": "gone", "cluster": {"server": f"http://{HOST}:{free_port()}"}}
    document["clusters"].append(gone)
    document["contexts"].insert(0, {"name": "broken", "context": {"cluster": "gone", "user": user}})
    document["current-context"] = "broken"
    path.write_text(yaml.safe_dump(document))
    return path


async def install_operator_deployment(kube: Kube, namespace: str) -> None:
    """The chart's operator Deployment with one ready replica, as its controller would say."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(
            values={}, name="rollout-operator", namespace=namespace, is_install=True
        )
    deployment = yaml.safe_load(rendered["rollout-operator/templates/deployment.yaml"])
    await kube.create(DEPLOYMENTS, deployment, namespace)
    ready = {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1}
    await kube.patch_status(DEPLOYMENTS, deployment["metadata"]["name"], ready, namespace)


@pytest.fixture
def xdg_cli(cli: Cli, tmp_path: Path) -> Cli:
    """The CLI with the default config file location (XDG_CONFIG_HOME), not $ROLLOUT_CONFIG,
    and no AWS variables: the credentials are what login stores."""
    cli.environ.pop("ROLLOUT_CONFIG")
    cli.environ.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    for name in AWS_VARIABLES:
        cli.environ.pop(name)
    return cli


def config_file(cli: Cli) -> Path:
    return Path(cli.environ["XDG_CONFIG_HOME"]) / "rollout" / "config.yaml"


def never_shows(outcome: Outcome, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in outcome.stdout + outcome.stderr


def write_existing(path: Path, text: str, file_mode: int, dir_mode: int) -> None:
    path.parent.mkdir(parents=True)
    path.parent.chmod(dir_mode)
    path.write_text(text)
    path.chmod(file_mode)


# --- writing the file -------------------------------------------------------------------------


async def test_login_from_flags_writes_an_owner_only_file_merged_with_what_was_there(
    kube: Kube,
    xdg_cli: Cli,
    s3_settings: S3Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli, path = xdg_cli, config_file(xdg_cli)
    existing = (
        "storage:\n  prefix: team-a\n  credentialsSecret: rollout-storage\n"
        "runnerImage: registry.example.com/rollout-runner:1.0\n"
    )
    write_existing(path, existing, file_mode=0o644, dir_mode=0o755)
    secret = "login-secret-never-print-me"
    monkeypatch.setattr(sys, "stdin", io.StringIO(secret + "\n"))  # not a terminal: no questions
    endpoint = s3_settings.location.endpoint
    assert endpoint is not None

    outcome = await cli.run(
        capsys,
        "login",
        *cli.cluster_args(),
        "--context", "test",
        "--namespace", "evals",
        "--storage-endpoint", endpoint,
        "--storage-path-style",
        "--storage-bucket", s3_settings.location.bucket,
        "--storage-region", "eu-west-1",
        "--access-key-id", "AKIAFROMLOGIN",
        "--secret-access-key", "-",
        "--no-check",
    )  # fmt: skip

    assert outcome.code == 0, outcome.stderr
    assert outcome.stdout.splitlines()[-1] == (
        f"saved to {path} (readable by you only), with storage credentials"
    )
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert read_yaml(path) == {
        "storage": {
            "prefix": "team-a",
            "credentialsSecret": "rollout-storage",
            "endpoint": endpoint,
            "pathStyle": True,
            "bucket": s3_settings.location.bucket,
            "region": "eu-west-1",
            "credentials": {"accessKeyId": "AKIAFROMLOGIN", "secretAccessKey": secret},
        },
        "runnerImage": "registry.example.com/rollout-runner:1.0",
        "kube": {"context": "test", "namespace": "evals"},
    }
    assert not list(path.parent.glob(".*tmp"))  # the temporary file was renamed
    never_shows(outcome, secret)

    # One value changed: the rest, credentials included, stays.
    other = new_bucket_name()
    again = await cli.run(
        capsys, "login", *cli.cluster_args(), "--storage-bucket", other, "--no-check"
    )
    assert again.code == 0, again.stderr
    stored = read_yaml(path)
    assert stored["storage"]["bucket"] == other
    assert stored["storage"]["credentials"]["secretAccessKey"] == secret
    assert stored["kube"] == {"context": "test", "namespace": "evals"}
    assert mode(path) == 0o600


async def test_login_without_a_bucket_says_so_and_writes_nothing(
    kube: Kube, xdg_cli: Cli, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    outcome = await xdg_cli.run(capsys, "login", *xdg_cli.cluster_args(), "--no-check")
    assert outcome.code == 1
    assert "error: no bucket: pass --storage-bucket (none is stored to keep)" in outcome.stderr
    assert not config_file(xdg_cli).exists()

    half = await xdg_cli.run(
        capsys,
        "login",
        *xdg_cli.cluster_args(),
        "--storage-bucket", "b",
        "--access-key-id", "AKIAONLYHALF",
        "--no-check",
    )  # fmt: skip
    assert half.code == 1
    assert "--secret-access-key is needed too" in half.stderr
    assert not config_file(xdg_cli).exists()


# --- asking -------------------------------------------------------------------------------------


async def test_login_asks_lists_the_contexts_checks_and_saves(
    kube: Kube,
    xdg_cli: Cli,
    s3_settings: S3Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = xdg_cli
    kubeconfig = two_contexts(kube, tmp_path / "two-contexts")
    await install_operator_deployment(kube, kube.namespace)
    endpoint = s3_settings.location.endpoint
    bucket = s3_settings.location.bucket
    key_id = s3_settings.credentials.access_key_id.get_secret_value()
    secret = s3_settings.credentials.secret_access_key.get_secret_value()
    answers = [
        "2",  # the context `test`, by its number
        "",  # the namespace: the context's
        str(endpoint),
        "",  # path-style: yes
        bucket,
        "",  # region: none
        key_id,
    ]
    monkeypatch.setattr(sys, "stdin", Terminal("\n".join(answers) + "\n"))
    asked: list[str] = []

    def fake_getpass(prompt: str = "") -> str:
        asked.append(prompt)
        return secret

    monkeypatch.setattr(getpass, "getpass", fake_getpass)

    outcome = await cli.run(
        capsys,
        "login",
        "--kubeconfig", str(kubeconfig),
        "--storage-cluster-endpoint", "http://minio.rollout-system:9000",
    )  # fmt: skip

    assert outcome.code == 0, outcome.stdout + outcome.stderr
    out = outcome.stdout
    assert f"Contexts of {kubeconfig}:\n  1) broken (current)\n  2) test\n" in out
    assert "Kube context (name or number) [broken]: " in out
    assert f"Namespace [{kube.namespace}]: " in out
    assert asked == ["Secret access key: "]
    checks = [line for line in out.splitlines() if line[:4] in ("ok  ", "FAIL", "warn", "skip")]
    assert [line.split(":")[0].split(maxsplit=1) for line in checks] == [
        ["ok", "cluster"],
        ["ok", "CRDs"],
        ["ok", "operator"],
        ["ok", "storage"],
        ["ok", "runner image"],
    ], out
    assert f"credentials: storage.credentials in {config_file(cli)}" in out
    assert "all 5 checks passed" in out
    stored = read_yaml(config_file(cli))
    assert stored["kube"] == {"context": "test", "namespace": kube.namespace}
    assert stored["storage"]["credentials"] == {"accessKeyId": key_id, "secretAccessKey": secret}
    assert stored["storage"]["pathStyle"] is True
    assert "region" not in stored["storage"]
    never_shows(outcome, secret)

    # A later command: the stored context and namespace, not the kubeconfig's current ones.
    await create_job(kube, rollout_job("nightly"))
    status = await cli.run(capsys, "status", "--kubeconfig", str(kubeconfig))
    assert status.code == 0, status.stderr
    assert status.stdout.splitlines()[1].split()[0] == "nightly"
    # A flag still wins over the file.
    broken = await cli.run(capsys, "status", "--kubeconfig", str(kubeconfig), "--context", "broken")
    assert broken.code == 1
    assert "did not answer" in broken.stderr


# --- later commands ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checking_s3(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[S3Server, str, dict[str, str]]]:
    """An S3 server that checks signatures (moto with IAM on), a bucket, an IAM user's key."""
    server = S3Server(log_dir=tmp_path_factory.mktemp("checking-s3"))
    bucket = new_bucket_name()
    server.start(buckets=[bucket])
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="cli")
        allow = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        policy = {"Version": "2012-10-17", "Statement": [allow]}
        iam.put_user_policy(UserName="cli", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="cli")["AccessKey"]
        server.enable_auth()
        yield server, bucket, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    finally:
        server.stop()


async def test_commands_use_the_stored_namespace_and_credentials_and_refuse_an_open_file(
    kube: Kube,
    xdg_cli: Cli,
    tmp_path: Path,
    checking_s3: tuple[S3Server, str, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli, path = xdg_cli, config_file(xdg_cli)
    server, bucket, key = checking_s3
    evals = await kube.new_namespace("evals")
    await create_job(kube, rollout_job("in-evals", namespace=evals))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    dataset = write_task(tmp_path / "alpha" / "hello", "Say hello.\n").parent

    # A wrong secret: the check says so, and the settings are saved all the same (exit 1).
    login = [
        "login",
        *cli.cluster_args(),
        "--namespace", evals,
        "--storage-endpoint", server.endpoint_url,
        "--storage-path-style",
        "--storage-bucket", bucket,
        "--access-key-id", key["id"],
    ]  # fmt: skip
    wrong = await cli.run(capsys, *login, "--secret-access-key", "wrong-secret-never-print-me")
    assert wrong.code == 1
    assert "FAIL  storage: the credentials (storage.credentials in " in wrong.stdout
    assert "(SignatureDoesNotMatch)" in wrong.stdout
    assert "saved to" in wrong.stdout
    never_shows(wrong, "wrong-secret-never-print-me", key["secret"])

    right = await cli.run(capsys, *login, "--secret-access-key", key["secret"])
    assert "ok    storage: " in right.stdout, right.stdout
    never_shows(right, key["secret"])

    # The namespace of the file, with no flag.
    status = await cli.run(capsys, "status", *cli.cluster_args())
    assert status.code == 0, status.stderr
    assert status.stdout.splitlines()[1].split()[0] == "in-evals"

    # The credentials of the file reach a server that checks them.
    published = await cli.run(capsys, "publish", str(dataset))
    assert published.code == 0, published.stderr
    never_shows(published, key["secret"])

    # The AWS variables win over the file.
    with_env = await cli.run(
        capsys,
        "publish",
        str(dataset),
        environ={"AWS_ACCESS_KEY_ID": key["id"], "AWS_SECRET_ACCESS_KEY": "env-secret-wrong"},
    )
    assert with_env.code == 1
    assert "the credentials were refused" in with_env.stderr

    # Readable by the group: the credentials are refused, saying how to fix it.
    path.chmod(0o640)
    refused = await cli.run(capsys, "publish", str(dataset))
    assert refused.code == 1
    assert refused.stderr.strip() == (
        f"error: {path}: storage.credentials: holds storage credentials but other users may read "
        f"it (mode 0640), so they are not used: run `chmod 600 {path}` (rollout login writes it "
        "so)"
    )
    checked = await cli.run(capsys, "check", *cli.cluster_args())
    assert f"FAIL  storage: {path}: storage.credentials: holds storage credentials" in (
        checked.stdout
    )
    # What needs no credentials still works.
    assert (await cli.run(capsys, "status", *cli.cluster_args())).code == 0
    never_shows(refused, key["secret"])
    never_shows(checked, key["secret"])

    path.chmod(0o600)
    assert (await cli.run(capsys, "publish", str(dataset))).code == 0
