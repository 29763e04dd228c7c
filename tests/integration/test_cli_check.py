"""`rollout check`: one line per need of a run, against the loopback Kubernetes API (the
session's, or an emulator of the test's own where the whole cluster must be as the test says) and
moto's S3 server; each missing piece fails clearly and the other lines still print."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import helm_python as helm
import kopf
import pytest
import yaml
from cli_kit import Cli, Outcome
from s3_kit import S3Settings

from kubeharness.emulator.emulated import EmulatedKube, kube_api
from kubeharness.kube import Kube
from loopback import HOST, free_port
from paths import REPO
from rollout.api.resources import StorageSpec
from rollout.storage import StorageCredentials
from s3server import S3Server, new_bucket_name

pytestmark = pytest.mark.integration

CHART = REPO / "charts" / "rollout-operator"
RELEASE = "rollout-operator"
DEPLOYMENTS = "apps/v1/deployments"
KOPF_PEERINGS = "kopf.dev/v1/kopfpeerings"
CLUSTER_ENDPOINT = ["--storage-cluster-endpoint", "http://minio.rollout-system:9000"]


# --- the chart as `helm install` renders it ---------------------------------------------------


def chart_objects(namespace: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(
            values=values or {}, name=RELEASE, namespace=namespace, is_install=True
        )
    return [
        document
        for template, text in sorted(manifests.items())
        if not template.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


async def install_operator_deployment(
    kube: Kube, namespace: str, *, ready: int = 1, values: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The chart's operator Deployment in `namespace`, with the status the Deployment controller
    would give it once `ready` replicas pass their readiness probe (no controller runs here)."""
    [deployment] = of_kind(chart_objects(namespace, values), "Deployment")
    replicas = deployment["spec"]["replicas"]
    created = await kube.create(DEPLOYMENTS, deployment, namespace)
    status: dict[str, Any] = {"observedGeneration": 1, "replicas": replicas}
    if ready:
        status |= {"readyReplicas": ready, "availableReplicas": ready, "updatedReplicas": ready}
    await kube.patch_status(DEPLOYMENTS, created["metadata"]["name"], status, namespace)
    return created


def lines(outcome: Outcome) -> dict[str, tuple[str, str]]:
    """{check name: (status, message)} of the check lines, and the summary under ''."""
    found: dict[str, tuple[str, str]] = {}
    *checks, last = outcome.stdout.splitlines()
    for line in checks:
        match = re.fullmatch(r"(ok|FAIL|warn|skip)\s+([^:]+): (.*)", line)
        assert match, f"not a check line: {line!r}\n{outcome.stdout}"
        found[match[2]] = (match[1], match[3])
    found[""] = ("", last)
    return found


def write_private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def status_of(found: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {name: status for name, (status, _) in found.items() if name}


def never_shows(outcome: Outcome, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in outcome.stdout + outcome.stderr


# --- a cluster of the test's own (the emulator), as the test says ---------------------------------


@pytest.fixture
async def own_kube() -> AsyncIterator[EmulatedKube]:
    """An API server with the chart's CRDs (rollout's and kopf's peering ones) and nothing else:
    no operator, whatever other tests leave in the session's cluster."""
    crds = of_kind(chart_objects("rollout-system"), "CustomResourceDefinition")
    async with kube_api(crds=crds, namespaces=("default", "rollout-system")) as emulated:
        yield emulated


@pytest.fixture
async def bare_kube() -> AsyncIterator[EmulatedKube]:
    """An API server without any CRD of ours: the chart was never installed."""
    async with kube_api(crds=()) as emulated:
        yield emulated


def cli_for(kube: Kube, tmp_path: Path, storage: S3Settings, name: str = "own") -> Cli:
    home = tmp_path / f"home-{name}"
    home.mkdir()
    return Cli(kube.write_kubeconfig(tmp_path / f"kubeconfig-{name}"), storage, home)


async def check(cli: Cli, capsys: pytest.CaptureFixture[str], *extra: str) -> Outcome:
    return await cli.run(
        capsys, "check", *cli.cluster_args(), *cli.storage_args(), *CLUSTER_ENDPOINT, *extra
    )


# --- all there ----------------------------------------------------------------------------------


async def test_everything_a_run_needs_is_there(
    kube: Kube, cli: Cli, s3_settings: S3Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    await install_operator_deployment(kube, kube.namespace)
    config = write_private(
        Path(cli.environ["ROLLOUT_CONFIG"]),
        "runnerImage: registry.example.com/rollout-runner:0.1.0\n",
    )

    outcome = await check(cli, capsys)

    assert outcome.code == 0, outcome.stdout + outcome.stderr
    found = lines(outcome)
    assert status_of(found) == {
        "cluster": "ok",
        "CRDs": "ok",
        "operator": "ok",
        "storage": "ok",
        "runner image": "ok",
    }, outcome.stdout
    cluster = found["cluster"][1]
    assert cluster.startswith(f"context test, server {kube.url}, namespace {kube.namespace} (")
    assert "(Kubernetes v1." in cluster
    assert found["CRDs"][1] == (
        "rollout.dev/v1alpha1 serves rolloutjobs, rollouttrials, rolloutimages (the version this "
        "CLI speaks)"
    )
    assert found["operator"][1] == (
        f"Deployment {kube.namespace}/{RELEASE}: 1/1 ready, watching all namespaces"
    )
    bucket, endpoint = s3_settings.location.bucket, s3_settings.location.endpoint
    assert found["storage"][1] == (
        f"s3://{bucket}/ at {endpoint} answers (credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY of the environment)"
    )
    assert found["runner image"][1] == (
        f"registry.example.com/rollout-runner:0.1.0 (from runnerImage in {config})"
    )
    assert found[""][1] == "all 5 checks passed"
    never_shows(outcome, s3_settings.credentials.secret_access_key.get_secret_value())


async def test_without_a_runner_image_the_operators_default_is_named(
    own_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await install_operator_deployment(own_kube, "rollout-system")
    cli = cli_for(own_kube, tmp_path, s3_settings)

    outcome = await cli.run(capsys, "check", *cli.cluster_args(), *cli.storage_args())

    found = lines(outcome)
    assert found["operator"] == (
        "ok",
        f"Deployment rollout-system/{RELEASE}: 1/1 ready, watching all namespaces",
    )
    assert found["runner image"] == (
        "ok",
        "none set here, so jobs use the operator's default (rollout-runner:0.1.0, from "
        f"Deployment rollout-system/{RELEASE}); to choose one: --runner-image, "
        f"ROLLOUT_RUNNER_IMAGE, or runnerImage in {cli.environ['ROLLOUT_CONFIG']}",
    )
    # The endpoint is loopback and no cluster endpoint is set: trial Pods could not reach it.
    status, message = found["storage for trial Pods"]
    assert status == "warn"
    assert "--storage-cluster-endpoint" in message
    assert outcome.code == 0
    assert found[""][1] == "all 6 checks passed (1 warning)"


# --- each piece missing -----------------------------------------------------------------------


async def test_no_crds_installed(
    bare_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = cli_for(bare_kube, tmp_path, s3_settings)

    outcome = await check(cli, capsys)

    assert outcome.code == 1
    found = lines(outcome)
    assert status_of(found) == {
        "cluster": "ok",
        "CRDs": "FAIL",
        "operator": "FAIL",
        "storage": "ok",
        "runner image": "ok",
    }, outcome.stdout
    assert found["CRDs"][1] == (
        "the API group rollout.dev is not served: the rollout CRDs are not installed in this "
        "cluster: install the chart (helm install rollout-operator charts/rollout-operator, "
        "README: Install), or apply this CLI's CRDs (kubectl apply -f crds/)"
    )
    assert found[""][1] == (
        "2 of 5 checks failed: fix what FAIL says, then run `rollout check` again"
    )


async def test_crds_of_another_version_or_older_than_this_cli(
    bare_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = cli_for(bare_kube, tmp_path, s3_settings)
    crds = of_kind(chart_objects("rollout-system"), "CustomResourceDefinition")
    ours = [crd for crd in crds if crd["spec"]["group"] == "rollout.dev"]

    # The same CRDs, but the RolloutJob's schema of an older chart: no spec.metrics.
    older = json.loads(json.dumps(ours))
    [job_crd] = [crd for crd in older if crd["spec"]["names"]["kind"] == "RolloutJob"]
    spec = job_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["metrics"]
    await bare_kube.install_crds(older)
    outcome = await check(cli, capsys)
    status, message = lines(outcome)["CRDs"]
    assert status == "FAIL", outcome.stdout
    assert "the installed CRDs are older than this CLI: they lack RolloutJob spec.metrics," in (
        message
    )
    assert message.endswith("apply this CLI's CRDs (kubectl apply -f crds/) or upgrade the chart")

    # A later chart that serves only v1beta1.
    renamed = json.loads(json.dumps(ours))
    for crd in renamed:
        crd["spec"]["versions"][0]["name"] = "v1beta1"
    await bare_kube.install_crds(renamed)
    outcome = await check(cli, capsys)
    assert lines(outcome)["CRDs"] == (
        "FAIL",
        "rollout.dev is served in v1beta1, but this CLI speaks v1alpha1: use the CLI of the "
        "installed chart's version, or upgrade the chart (and its CRDs) to this CLI's",
    )
    assert outcome.code == 1


async def test_no_operator_running(
    own_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cli = cli_for(own_kube, tmp_path, s3_settings)

    outcome = await check(cli, capsys)
    assert outcome.code == 1
    found = lines(outcome)
    assert status_of(found) == {
        "cluster": "ok",
        "CRDs": "ok",
        "operator": "FAIL",
        "storage": "ok",
        "runner image": "ok",
    }, outcome.stdout
    assert found["operator"][1] == (
        "no rollout operator in this cluster: no Deployment labelled "
        "app.kubernetes.io/name=rollout-operator,app.kubernetes.io/component=operator in any "
        "namespace, and no live kopf peering: install the chart (README: Install)"
    )

    # Installed, but its Pod is not ready.
    await install_operator_deployment(own_kube, "rollout-system", ready=0)
    outcome = await check(cli, capsys)
    assert lines(outcome)["operator"] == (
        "FAIL",
        f"Deployment rollout-system/{RELEASE} is 0/1 ready: see why with kubectl -n "
        f"rollout-system describe deployment {RELEASE}; kubectl -n rollout-system logs "
        f"deployment/{RELEASE}",
    )
    assert outcome.code == 1


async def test_an_operator_that_watches_other_namespaces(
    own_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await install_operator_deployment(
        own_kube, "rollout-system", values={"watchNamespaces": ["evals", "rl"]}
    )
    cli = cli_for(own_kube, tmp_path, s3_settings)

    outcome = await check(cli, capsys)

    assert lines(outcome)["operator"] == (
        "FAIL",
        f"Deployment rollout-system/{RELEASE} watches evals, rl, not namespace default: add it "
        "to the chart's watchNamespaces (helm upgrade ... --set 'watchNamespaces={evals,rl,"
        "default}'), or run jobs in a namespace it watches",
    )
    assert outcome.code == 1
    await own_kube.create_namespace("evals")
    in_evals = await cli.run(
        capsys, "check", "-n", "evals", *cli.cluster_args(), *cli.storage_args()
    )
    assert lines(in_evals)["operator"][0] == "ok"


async def test_an_operator_found_by_its_kopf_peering(
    own_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real kopf operator keeps the chart's KopfPeering alive; nothing else tells of it."""
    [peering] = of_kind(
        chart_objects("rollout-system", {"watchNamespaces": ["default"]}), "KopfPeering"
    )
    await own_kube.create(KOPF_PEERINGS, peering)
    cli = cli_for(own_kube, tmp_path, s3_settings)

    async with own_kube.operator(registry=kopf.OperatorRegistry(), peering_name=RELEASE):
        await own_kube.wait_for(
            lambda: _peers(own_kube), what="the operator's keep-alive in the peering object"
        )
        outcome = await check(cli, capsys)
    status, message = lines(outcome)["operator"]
    assert status == "ok", outcome.stdout
    assert re.fullmatch(
        rf"alive in kopf peering KopfPeering default/{RELEASE} \(.+, last seen \d+ s ago\)",
        message,
    )
    assert outcome.code == 0

    # An operator that died (no clean exit) leaves its keep-alive to go stale.
    long_ago = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    await own_kube.patch(
        KOPF_PEERINGS,
        RELEASE,
        {"status": {"dead-operator@host": {"priority": 0, "lifetime": 60, "lastseen": long_ago}}},
    )
    outcome = await check(cli, capsys)
    status, message = lines(outcome)["operator"]
    assert status == "FAIL"
    assert message.startswith(
        f"no operator is alive in kopf peering KopfPeering default/{RELEASE} (last keep-alive 30"
    )
    assert outcome.code == 1


async def _peers(kube: Kube) -> dict[str, Any]:
    found = await kube.find(KOPF_PEERINGS, RELEASE)
    return {k: v for k, v in ((found or {}).get("status") or {}).items() if v}


async def test_a_user_who_may_not_look_for_the_operator_gets_a_warning(
    own_kube: EmulatedKube,
    tmp_path: Path,
    s3_settings: S3Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A user with rights in one namespace only (the namespaced operator's account, bound by the
    chart's Roles and enforced by the API) may list neither Deployments nor cluster peering."""
    identity = await own_kube.apply_chart_rbac(watch_namespaces=["default"])
    await install_operator_deployment(own_kube, "rollout-system")
    cli = Cli(
        own_kube.write_kubeconfig(tmp_path / "kubeconfig", identity=identity),
        s3_settings,
        tmp_path,
    )

    outcome = await check(cli, capsys)

    status, message = lines(outcome)["operator"]
    assert status == "warn", outcome.stdout
    assert message.startswith("cannot tell whether an operator serves namespace default: you may ")
    assert "list Deployments in all namespaces" in message
    assert "(403)" in message
    assert outcome.code == 0, outcome.stdout


# --- storage ------------------------------------------------------------------------------------


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
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="cli", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="cli")["AccessKey"]
        server.enable_auth()
        yield server, bucket, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    finally:
        server.stop()


def settings_on(server: S3Server, bucket: str, key_id: str, secret: str) -> S3Settings:
    from pydantic import SecretStr

    return S3Settings(
        StorageSpec(bucket=bucket, endpoint=server.endpoint_url, path_style=True),
        StorageCredentials(access_key_id=SecretStr(key_id), secret_access_key=SecretStr(secret)),
    )


async def test_bad_storage_credentials(
    kube: Kube,
    tmp_path: Path,
    checking_s3: tuple[S3Server, str, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, bucket, key = checking_s3
    wrong_secret = "wrong-secret-never-print-me"
    cli = cli_for(kube, tmp_path, settings_on(server, bucket, key["id"], wrong_secret), "wrong")

    outcome = await check(cli, capsys)

    assert outcome.code == 1
    found = lines(outcome)
    assert found["storage"] == (
        "FAIL",
        "the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY of the environment) were "
        f"refused at {server.endpoint_url}: the secret access key does not match the access key "
        "id (SignatureDoesNotMatch); `rollout login` stores new ones",
    )
    assert found["cluster"][0] == "ok"  # every line printed
    assert found["runner image"][0] == "ok"
    never_shows(outcome, wrong_secret, key["secret"])

    unknown = cli_for(
        kube, tmp_path, settings_on(server, bucket, "AKIANOSUCHKEY", "x" * 40), "unknown"
    )
    outcome = await check(unknown, capsys)
    status, message = lines(outcome)["storage"]
    assert status == "FAIL"
    assert "the access key id is unknown there (InvalidAccessKeyId)" in message

    good = cli_for(kube, tmp_path, settings_on(server, bucket, key["id"], key["secret"]), "good")
    outcome = await check(good, capsys)
    assert lines(outcome)["storage"][0] == "ok", outcome.stdout
    never_shows(outcome, key["secret"])


async def test_a_missing_bucket(
    kube: Kube, tmp_path: Path, make_s3_settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = make_s3_settings()  # never created
    cli = cli_for(kube, tmp_path, missing)

    outcome = await check(cli, capsys)

    bucket = missing.location.bucket
    assert lines(outcome)["storage"] == (
        "FAIL",
        f"the bucket {bucket} does not exist at {missing.location.endpoint}: create it (aws s3 mb "
        f"s3://{bucket}, with --endpoint-url for MinIO or another S3 service; mc mb), or name "
        "another one (`rollout login`, --storage-bucket)",
    )
    assert outcome.code == 1


async def test_no_bucket_configured(
    kube: Kube, cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = await cli.run(capsys, "check", *cli.cluster_args())
    status, message = lines(outcome)["storage"]
    assert status == "FAIL"
    assert message.startswith(
        "no bucket is configured: run `rollout login`, or pass --storage-bucket"
    )
    assert lines(outcome)["runner image"][0] == "ok"
    assert outcome.code == 1


# --- the cluster --------------------------------------------------------------------------------


async def test_an_unreachable_cluster(
    tmp_path: Path, s3_settings: S3Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": f"http://{HOST}:{port}"}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "me"}}],
                "current-context": "gone",
            }
        )
    )
    (tmp_path / "home").mkdir()
    cli = Cli(kubeconfig, s3_settings, tmp_path / "home")

    outcome = await check(cli, capsys)

    assert outcome.code == 1
    found = lines(outcome)
    assert status_of(found) == {
        "cluster": "FAIL",
        "CRDs": "skip",
        "operator": "skip",
        "storage": "ok",
        "runner image": "ok",
    }, outcome.stdout
    message = found["cluster"][1]
    assert message.startswith(
        f"cannot reach the Kubernetes API of namespace default (http://{HOST}:{port}, context "
        f"gone): the Kubernetes API at http://{HOST}:{port} did not answer ("
    )
    assert message.endswith(
        "is the cluster running, and is the kubeconfig's server address right from here? "
        "(`kubectl --context gone cluster-info`)"
    )
    assert found["CRDs"][1] == "needs the cluster"

    # No kubeconfig at all.
    outcome = await cli.run(
        capsys, "check", "--kubeconfig", str(tmp_path / "none"), *cli.storage_args()
    )
    assert lines(outcome)["cluster"] == (
        "FAIL",
        f"no kubeconfig at {tmp_path / 'none'}: pass --kubeconfig or set KUBECONFIG to the "
        "cluster's kubeconfig",
    )


async def test_a_namespace_that_does_not_exist(
    kube: Kube, cli: Cli, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = await cli.run(
        capsys, "check", "-n", "no-such-namespace", *cli.cluster_args(), *cli.storage_args()
    )
    status, message = lines(outcome)["cluster"]
    assert status == "FAIL"
    assert message.endswith(
        "the namespace no-such-namespace does not exist: create it (kubectl create namespace "
        "no-such-namespace) or choose another (--namespace, or `rollout login`)"
    )
    assert outcome.code == 1
