"""The config file `rollout login` writes and every command reads: its `kube:` section and the
CLI's own storage credentials (precedence, refusal while others may read the file, never shown),
writing it merged and owner-only; and the pure parts of `rollout check` (schema field paths, kopf
peering keep-alives, the chart's operator Deployment, the operator verdict)."""

from __future__ import annotations

import argparse
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from paths import REPO
from rollout.api.errors import InvalidInput, Problem
from rollout.cli import config
from rollout.cli.check import (
    OperatorDeployment,
    Peering,
    Status,
    _operator_verdict,
    field_paths,
    peering_of,
)

SECRET = "file-secret-never-print-me"
WITH_CREDENTIALS = f"""\
kube:
  context: kind-rollout
  namespace: evals
storage:
  bucket: b
  credentials:
    existingSecret: rollout-storage
    accessKeyId: AKIAFROMFILE
    secretAccessKey: {SECRET}
"""


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_storage_arguments(parser)
    config.add_runner_image_argument(parser)
    return parser.parse_args(list(flags))


def private_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_files_credentials_when_the_environment_gives_none(tmp_path: Path) -> None:
    path = private_file(tmp_path, WITH_CREDENTIALS)
    environ = {"ROLLOUT_CONFIG": str(path)}
    settings = config.resolve(parse(), environ)
    credentials = settings.storage_credentials(environ)
    assert credentials is not None
    assert credentials.secrets() == ["AKIAFROMFILE", SECRET]
    assert settings.credentials_source(environ) == f"storage.credentials in {path}"
    assert settings.credentials_secret == "rollout-storage"  # the Pods' Secret, as before
    assert SECRET not in repr(settings)
    spec = settings.storage_spec()
    assert spec is not None
    assert SECRET not in spec.model_dump_json()

    # Both AWS variables win; one alone does not.
    both = environ | {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "env"}
    from_env = settings.storage_credentials(both)
    assert from_env is not None
    assert from_env.secrets() == ["AKIAENV", "env"]
    assert settings.credentials_source(both).startswith("AWS_ACCESS_KEY_ID and")
    half = settings.storage_credentials(environ | {"AWS_ACCESS_KEY_ID": "AKIAENV"})
    assert half is not None
    assert half.secrets() == ["AKIAFROMFILE", SECRET]


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660])
def test_credentials_in_a_file_others_may_read_are_refused(tmp_path: Path, mode: int) -> None:
    path = private_file(tmp_path, WITH_CREDENTIALS, mode)
    environ = {"ROLLOUT_CONFIG": str(path)}
    settings = config.resolve(parse(), environ)  # settings without credentials still load
    assert settings.bucket == "b"
    with pytest.raises(InvalidInput) as raised:
        settings.storage_credentials(environ)
    assert raised.value.problems == [
        Problem(
            str(path),
            "storage.credentials",
            f"holds storage credentials but other users may read it (mode {mode:04o}), so they "
            f"are not used: run `chmod 600 {path}` (rollout login writes it so)",
        )
    ]
    assert SECRET not in str(raised.value)
    # The environment's credentials need nothing of the file.
    env = environ | {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "env"}
    assert settings.storage_credentials(env) is not None
    # A file without credentials may be read by anyone.
    path.write_text("storage:\n  bucket: b\n")
    assert config.resolve(parse(), environ).storage_credentials(environ) is None


def test_a_key_without_its_secret_and_bad_kube_keys_are_named(tmp_path: Path) -> None:
    path = private_file(tmp_path, "storage:\n  credentials:\n    accessKeyId: AKIAHALF\n")
    with pytest.raises(InvalidInput) as raised:
        config.resolve(parse(), {"ROLLOUT_CONFIG": str(path)})
    assert raised.value.problems == [
        Problem(
            str(path),
            "storage.credentials",
            "accessKeyId and secretAccessKey go together: give both or neither",
        )
    ]
    path.write_text(
        f"storage:\n  credentials:\n    accessKeyId: 5\n    secretAccessKey: {SECRET}\n"
    )
    with pytest.raises(InvalidInput) as raised:
        config.resolve(parse(), {"ROLLOUT_CONFIG": str(path)})
    assert [(p.field, p.message) for p in raised.value.problems] == [
        ("storage.credentials.accessKeyId", "Input should be a valid string")
    ]
    assert SECRET not in str(raised.value)

    path.write_text("kube:\n  contxt: typo\n  namespace: [a]\n")
    with pytest.raises(InvalidInput) as raised:
        config.kube_defaults({"ROLLOUT_CONFIG": str(path)})
    assert [(p.field, p.message) for p in raised.value.problems] == [
        ("kube.namespace", "Input should be a valid string"),
        ("kube.contxt", "unknown key"),
    ]
    # Storage settings do not repeat the kube section's problems.
    assert config.resolve(parse(), {"ROLLOUT_CONFIG": str(path)}).bucket is None


def test_the_stored_namespace_goes_with_its_context(tmp_path: Path) -> None:
    path = private_file(tmp_path, WITH_CREDENTIALS)
    defaults = config.kube_defaults({"ROLLOUT_CONFIG": str(path)})
    assert (defaults.context, defaults.namespace) == ("kind-rollout", "evals")
    assert defaults.namespace_for("kind-rollout") == "evals"
    assert defaults.namespace_for("prod") is None  # another context: its own namespace
    assert config.KubeDefaults(namespace="evals").namespace_for("prod") == "evals"
    assert defaults.source("context") == f"kube.context in {path}"
    assert config.kube_defaults({"HOME": str(tmp_path / "nobody")}) == config.KubeDefaults(
        path=tmp_path / "nobody" / ".config" / "rollout" / "config.yaml"
    )


def test_saving_merges_removes_and_keeps_the_file_private(tmp_path: Path) -> None:
    directory = tmp_path / "rollout"
    directory.mkdir(mode=0o755)
    real = private_file(directory, "storage:\n  prefix: a\n  endpoint: http://old\n", 0o644)
    link = tmp_path / "link.yaml"
    link.symlink_to(real)

    written = config.save_config(
        link,
        {
            "kube": {"context": "c", "namespace": "n"},
            "storage": {
                "endpoint": None,
                "bucket": "b",
                "credentials": {"accessKeyId": "AKIA", "secretAccessKey": SECRET},
            },
        },
        private_directory=True,
    )

    assert written == real
    assert link.is_symlink()  # the link's target was written, not the link replaced
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert yaml.safe_load(real.read_text()) == {
        "storage": {
            "prefix": "a",
            "bucket": "b",
            "credentials": {"accessKeyId": "AKIA", "secretAccessKey": SECRET},
        },
        "kube": {"context": "c", "namespace": "n"},
    }
    assert sorted(p.name for p in directory.iterdir()) == ["config.yaml"]

    # What would make the file invalid is refused, and the file stays as it was.
    before = real.read_text()
    with pytest.raises(InvalidInput, match=r"kube\.context"):
        config.save_config(real, {"kube": {"context": ["a"]}}, private_directory=False)
    assert real.read_text() == before

    # A new file in a new directory.
    fresh = tmp_path / "new" / "dir" / "config.yaml"
    config.save_config(fresh, {"runnerImage": "r:1"}, private_directory=False)
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700 & ~_umask()
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


# --- rollout check's pure parts -------------------------------------------------------------------


def test_field_paths_of_a_structural_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "agents": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        },
    }
    assert field_paths(schema) == {"spec", "spec.agents", "spec.agents[].name", "spec.env"}


def test_kopf_keep_alives_are_alive_within_their_lifetime() -> None:
    now = datetime(2025, 1, 15, 10, 0, tzinfo=UTC)
    body = {
        "metadata": {"name": "rollout-operator"},
        "status": {
            "fresh@pod": {"priority": 0, "lifetime": 60, "lastseen": _ago(now, 5)},
            "old@pod": {"priority": 0, "lifetime": 60, "lastseen": _ago(now, 300)},
            "gone@pod": None,  # kopf's own removal on a clean exit
        },
    }
    peering = peering_of("ClusterKopfPeering", body, now)
    assert peering.alive == (("fresh@pod", 5.0),)
    assert peering.last_seen == 5.0
    assert peering.where == "ClusterKopfPeering rollout-operator"
    empty = peering_of("KopfPeering", {"metadata": {"name": "p", "namespace": "n"}}, now)
    assert (empty.alive, empty.last_seen, empty.where) == ((), None, "KopfPeering n/p")


def _ago(now: datetime, seconds: float) -> str:
    return (now - timedelta(seconds=seconds)).isoformat()


def chart_deployment(values: dict[str, object]) -> OperatorDeployment:
    with helm.Chart.load(REPO / "charts" / "rollout-operator") as chart:
        rendered = chart.render(
            values=values, name="rollout-operator", namespace="rollout-system", is_install=True
        )
    body = yaml.safe_load(rendered["rollout-operator/templates/deployment.yaml"])
    return OperatorDeployment.from_body(body | {"status": {"readyReplicas": 1}})


def test_the_charts_deployment_says_what_it_watches_and_its_runner_image() -> None:
    everywhere = chart_deployment({"runner": {"image": {"repository": "r.example.com/runner"}}})
    assert everywhere.watched == ()
    assert everywhere.serves("anything")
    assert everywhere.runner_image == "r.example.com/runner:0.1.0"
    assert (everywhere.replicas, everywhere.ready) == (1, 1)
    listed = chart_deployment({"watchNamespaces": ["evals", "rl"]})
    assert listed.watched == ("evals", "rl")
    assert listed.serves("rl")
    assert not listed.serves("default")


def test_the_operator_verdict() -> None:
    ready = OperatorDeployment("rs", "op", 1, 1, (), None)
    down = OperatorDeployment("rs", "op", 1, 0, (), None)
    zero = OperatorDeployment("rs", "op", 0, 0, (), None)
    elsewhere = OperatorDeployment("rs", "op", 1, 1, ("evals",), None)
    live = Peering("ClusterKopfPeering", "rollout-operator", None, (("me@pod", 3.0),), 3.0)
    stale = Peering("ClusterKopfPeering", "rollout-operator", None, (), 120.0)

    def verdict(*args: object, every: bool = True, refused: tuple[str, ...] = ()) -> Status:
        peerings = [a for a in args if isinstance(a, Peering)]
        deployments = [a for a in args if isinstance(a, OperatorDeployment)]
        check = _operator_verdict("ns", peerings, deployments, every, list(refused))
        return check.status

    assert verdict(ready) is Status.OK
    assert verdict(down, live) is Status.OK  # a live keep-alive (a developer's operator)
    assert verdict(down) is Status.FAIL
    assert verdict(zero) is Status.FAIL
    assert verdict(elsewhere) is Status.FAIL
    assert verdict(stale, every=False, refused=("list Deployments",)) is Status.FAIL
    assert verdict() is Status.FAIL
    assert verdict(every=False, refused=("list Deployments in all namespaces",)) is Status.WARN
    message = _operator_verdict("ns", [], [zero], True, []).message
    assert (
        message
        == "Deployment rs/op is scaled to zero: kubectl -n rs scale deployment op --replicas=1"
    )


@pytest.mark.parametrize("command", ["check", "login"])
def test_check_and_login_have_help_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from rollout.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main([command, "--help"], {})
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"rollout {command}" in out


def test_the_cluster_of_the_flags_else_of_the_file_else_the_kubeconfigs(tmp_path: Path) -> None:
    from rollout.cli.kube import Cluster
    from rollout.cli.kubeconfig import ClusterError

    kubeconfig = tmp_path / "kubeconfig"
    clusters = [
        {"name": name, "cluster": {"server": f"https://{name}.example.com"}} for name in "ab"
    ]
    contexts = [
        {"name": name, "context": {"cluster": name, "user": "u", "namespace": f"ns-{name}"}}
        for name in "ab"
    ]
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": clusters,
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": contexts,
                "current-context": "a",
            }
        )
    )
    path = private_file(tmp_path, "kube:\n  context: b\n  namespace: stored\n")
    environ = {"ROLLOUT_CONFIG": str(path)}

    def cluster(context: str | None = None, namespace: str | None = None) -> tuple[str, str]:
        args = argparse.Namespace(kubeconfig=str(kubeconfig), context=context, namespace=namespace)
        found = Cluster.from_args(args, environ)
        return str(found.context), found.namespace

    assert cluster() == ("b", "stored")
    assert cluster(namespace="flag") == ("b", "flag")
    assert cluster(context="a") == ("a", "ns-a")  # the stored namespace goes with context b
    assert cluster(context="b") == ("b", "stored")

    path.write_text("kube:\n  context: gone\n")
    with pytest.raises(ClusterError) as raised:
        cluster()
    assert str(raised.value) == (
        f"no context 'gone' in the kubeconfig {kubeconfig} (it has: a, b) (kube.context in "
        f"{path}: pass --context, or run `rollout login` again)"
    )
    path.write_text("kube:\n  context: [a]\n")
    with pytest.raises(ClusterError, match=r"kube\.context: Input should be a valid string"):
        cluster()


def test_a_file_with_the_benchmarks_registry_key_loads_and_keeps_it(tmp_path: Path) -> None:
    path = private_file(tmp_path, "registry: ./registry.json\nstorage:\n  bucket: b\n")
    assert config.resolve(parse(), {"ROLLOUT_CONFIG": str(path)}).bucket == "b"
    config.save_config(path, {"storage": {"bucket": "c"}}, private_directory=False)
    assert yaml.safe_load(path.read_text()) == {
        "registry": "./registry.json",
        "storage": {"bucket": "c"},
    }
