"""The image build Pod: valid for Kubernetes, the build contract's env as the processes see it,
each Secret only where it is needed, the builders' security settings, and the builder's script
run for real with a stand-in builder."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from pydantic import ValidationError

from kubeharness.kubelet import container_argv, container_env, remap
from rollout.api.images import image_resource_name
from rollout.api.resources import BuilderType
from rollout.api.wire import build as wire
from rollout.controller.build_pod import (
    BUILDAH_STATE_DIR,
    BUILDKIT_STATE_DIR,
    DEADLINE_MARGIN_SEC,
    build_pod_name,
    builder_script,
    render_build_pod,
)
from rollout.controller.config import OperatorConfig
from rollout.storage import storage_from_env

KUBERNETES_VERSIONS = ("1.25", ".".join(kubernetes_validate.latest_version().split(".")[:2]))
"""The oldest schema kubernetes-validate ships (the project targets 1.24+, whose schema it does
not ship) and the newest it has."""

BUILDERS = (BuilderType.BUILDKIT, BuilderType.BUILDAH)
BUILDER_IMAGES = {
    BuilderType.BUILDKIT: "moby/buildkit:v0.23.2-rootless",
    BuilderType.BUILDAH: "quay.io/containers/buildah:v1.38.1",
}
RUNNER_IMAGE = "registry.example.com/rollout-runner:0.3.0"
ENVIRONMENT_HASH = "e" * 64
IMAGE_HASH = "0123456789abcdef" * 4
IMAGE_NAME = image_resource_name(IMAGE_HASH)
IMAGE_UID = "0f6b2a3c-1d4e-4f5a-8b6c-7d8e9f0a1b2c"
REGISTRY_HOST = "registry.local:5000"
PUSHED = f"{REGISTRY_HOST}/evals/rollout-env:{IMAGE_HASH}"
DIGEST = "sha256:" + "fedcba9876543210" * 4

RUNNER_USER = 65532
BUILDKIT_USER = 1000
STORAGE_CREDENTIALS_ENV = "ROLLOUT_STORAGE_CREDENTIALS_DIR"
APPARMOR_BUILD = "container.apparmor.security.beta.kubernetes.io/build"


def image_body(builder: BuilderType = BuilderType.BUILDKIT, **spec: Any) -> dict[str, Any]:
    """A RolloutImage as the API returns it (what kopf hands a handler as `body`)."""
    body: dict[str, Any] = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutImage",
        "metadata": {
            "name": IMAGE_NAME,
            "namespace": "evals",
            "uid": IMAGE_UID,
            "resourceVersion": "4711",
            "generation": 1,
            "creationTimestamp": "2025-01-15T10:30:00Z",
            "labels": {"rollout.dev/component": "image"},
        },
        "spec": {
            "environmentHash": ENVIRONMENT_HASH,
            "imageHash": IMAGE_HASH,
            "image": PUSHED,
            "pullImage": f"localhost:5001/evals/rollout-env:{IMAGE_HASH}",
            "context": {
                "storage": {
                    "bucket": "evals",
                    "prefix": "team-a",
                    "endpoint": "http://minio.rollout-system:9000",
                    "pathStyle": True,
                },
                "key": f"team-a/environments/{ENVIRONMENT_HASH}.tar.gz",
            },
            "builder": {"type": builder.value, "image": BUILDER_IMAGES[builder]},
            "platform": "linux/amd64",
            "plainHttp": False,
            "forceBuild": False,
            "timeoutSeconds": 600,
            "logKey": f"team-a/jobs/nightly/builds/{IMAGE_HASH}.log",
            "requestedBy": "nightly",
        },
    }
    body["spec"].update(spec)
    return body


def make_config(**changes: Any) -> OperatorConfig:
    values: dict[str, Any] = {"runner_image": RUNNER_IMAGE}
    values.update(changes)
    return OperatorConfig(**values)


def render(
    image: dict[str, Any] | None = None, *, attempt: int = 1, **config: Any
) -> dict[str, Any]:
    return render_build_pod(image or image_body(), config=make_config(**config), attempt=attempt)


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container of the Pod by name, init containers included."""
    spec = pod["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def env_seen(container: dict[str, Any]) -> dict[str, str]:
    """The container's env as its process sees it, after the kubelet's expansion."""
    return container_env(container)


def argv_seen(container: dict[str, Any]) -> list[str]:
    return container_argv(container, env_seen(container))


def mounts(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The container's volume mounts by volume name."""
    return {m["name"]: m for m in container.get("volumeMounts", [])}


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"].get("volumes", [])}


def secret_volumes(pod: dict[str, Any]) -> dict[str, str]:
    """Volume name -> the Secret it mounts."""
    return {
        name: volume["secret"]["secretName"]
        for name, volume in volumes(pod).items()
        if "secret" in volume
    }


def volume_of_secret(pod: dict[str, Any], secret: str) -> str:
    (name,) = [v for v, s in secret_volumes(pod).items() if s == secret]
    return name


def variants(builder: BuilderType) -> list[dict[str, Any]]:
    """Build Pods of the shapes a build takes: minimal, and with every option."""
    full = image_body(
        builder,
        plainHttp=True,
        pushSecret="registry-push",
        platform="linux/arm64",
        timeoutSeconds=7200,
        context={
            "storage": {
                "bucket": "evals",
                "prefix": "a/b",
                "region": "eu-west-1",
                "credentialsSecret": "team-a-storage",
            },
            "key": f"a/b/environments/{ENVIRONMENT_HASH}.tar.gz",
        },
    )
    return [
        render(image_body(builder)),
        render(
            full,
            attempt=3,
            trial_service_account="rollout-trial",
            storage_credentials_secret="rollout-storage",
            runner_image_pull_policy="Always",
            pod_termination_grace_sec=0,
            default_pod_overrides={
                "nodeSelector": {"pool": "builds"},
                "tolerations": [{"key": "builds", "operator": "Exists", "effect": "NoSchedule"}],
                "imagePullSecrets": [{"name": "regcred"}],
                "priorityClassName": "evals-low",
            },
        ),
    ]


# --- the manifest as a whole ----------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_every_build_pod_is_a_valid_kubernetes_pod(builder: BuilderType, version: str) -> None:
    for pod in variants(builder):
        # Raises kubernetes_validate.ValidationError on an unknown field or a wrong type.
        assert kubernetes_validate.validate(pod, version, strict=True) == version


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_pod_is_context_then_build_and_report(builder: BuilderType) -> None:
    pod = render(image_body(builder), runner_image_pull_policy="Always")
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["context"]
    assert [c["name"] for c in spec["containers"]] == ["build", "report"]
    by_name = containers(pod)
    assert by_name["context"]["image"] == RUNNER_IMAGE
    assert by_name["report"]["image"] == RUNNER_IMAGE
    assert by_name["build"]["image"] == BUILDER_IMAGES[builder]
    # The runner's pull policy is the operator's; a pinned builder is pulled once per node.
    assert by_name["context"]["imagePullPolicy"] == "Always"
    assert by_name["report"]["imagePullPolicy"] == "Always"
    assert by_name["build"]["imagePullPolicy"] == "IfNotPresent"
    assert argv_seen(by_name["context"]) == ["python", "-m", "rollout_runner.build", "context"]
    assert argv_seen(by_name["report"]) == ["python", "-m", "rollout_runner.build", "report"]
    # The script reaches sh byte for byte: its `$$`, `$?` and `${VAR%%/*}` survive the kubelet.
    assert argv_seen(by_name["build"]) == ["sh", "-c", builder_script(builder), "build"]
    for container in by_name.values():
        assert container["resources"]["requests"]
        assert container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("builder", BUILDERS)
def test_pod_level_settings(builder: BuilderType) -> None:
    pod = render(image_body(builder, timeoutSeconds=1234), attempt=2, pod_termination_grace_sec=7)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["activeDeadlineSeconds"] == 1234 + DEADLINE_MARGIN_SEC
    assert spec["terminationGracePeriodSeconds"] == 7
    assert "serviceAccountName" not in spec
    metadata = pod["metadata"]
    assert metadata["name"] == f"{IMAGE_NAME}-build-2" == build_pod_name(IMAGE_NAME, 2)
    assert metadata["namespace"] == "evals"
    assert metadata["ownerReferences"] == [
        {"apiVersion": "rollout.dev/v1alpha1", "kind": "RolloutImage", "name": IMAGE_NAME,
         "uid": IMAGE_UID, "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    assert metadata["labels"] == {
        "rollout.dev/component": "image-build",
        "rollout.dev/image": IMAGE_NAME,
    }


def test_no_service_account_token_reaches_any_container() -> None:
    for builder in BUILDERS:
        for pod in variants(builder):
            assert pod["spec"]["automountServiceAccountToken"] is False
            for volume in pod["spec"]["volumes"]:
                assert set(volume) & {"projected", "serviceAccountToken"} == set()
            for container in containers(pod).values():
                assert "envFrom" not in container
                for mount in container["volumeMounts"]:
                    assert not mount["mountPath"].startswith("/var/run/secrets/kubernetes.io")


def test_the_attempt_names_the_pod() -> None:
    names = {render(attempt=n)["metadata"]["name"] for n in (1, 2, 3)}
    assert names == {f"{IMAGE_NAME}-build-{n}" for n in (1, 2, 3)}


HOST_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A DNS-1123 label: what a Pod's host name (its name) must be."""


@pytest.mark.parametrize("forced_by", [None, "8d7c6b5a-0000-4000-8000-000000000000"])
def test_a_build_pods_name_is_a_host_name_for_every_image_name(forced_by: str | None) -> None:
    # rollout.api.images: "`env-` and 52 make 56 characters, so `<name>-build-<n>` is still a
    # valid Pod host name (63 at most)".
    name = image_resource_name("f" * 64, forced_by=forced_by)
    for attempt in range(1, 10):
        pod_name = build_pod_name(name, attempt)
        assert HOST_NAME.fullmatch(pod_name), (pod_name, len(pod_name))


# --- the build contract's env, as the processes see it --------------------------------------------


TRICKY_PREFIX = "team$$a/$(HOME)/x$y"
TRICKY_IMAGE = "registry.local:5000/evals/env$(HOME):tag$$-$PATH"
TRICKY_LOG_KEY = f"{TRICKY_PREFIX}/jobs/$(JOB)/builds/{IMAGE_HASH}.log"
TRICKY_CONTEXT_KEY = f"{TRICKY_PREFIX}/environments/{ENVIRONMENT_HASH}.tar.gz"


def tricky_image(builder: BuilderType) -> dict[str, Any]:
    """Every string the user's settings reach with a `$` the kubelet would rewrite."""
    return image_body(
        builder,
        image=TRICKY_IMAGE,
        platform="linux/arm64",
        plainHttp=True,
        timeoutSeconds=900,
        logKey=TRICKY_LOG_KEY,
        context={
            "storage": {
                "bucket": "evals",
                "prefix": TRICKY_PREFIX,
                "endpoint": "http://minio.rollout-system:9000",
                "region": "eu-west-1",
                "pathStyle": True,
            },
            "key": TRICKY_CONTEXT_KEY,
        },
    )


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_context_container_sees_the_contract_byte_for_byte(builder: BuilderType) -> None:
    env = env_seen(containers(render(tricky_image(builder)))["context"])
    assert env[wire.CONTEXT_KEY_ENV] == TRICKY_CONTEXT_KEY
    assert env[wire.CONTEXT_DIR_ENV] == wire.CONTEXT_DIR
    location, credentials = storage_from_env(env)
    assert location.bucket == "evals"
    assert location.prefix == TRICKY_PREFIX
    assert location.endpoint == "http://minio.rollout-system:9000"
    assert location.region == "eu-west-1"
    assert location.path_style is True
    assert credentials is None  # no Secret named anywhere: the ambient credentials
    assert env["HOME"] == "/tmp"  # a writable place, the root filesystem being read-only


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_report_container_sees_the_contract_byte_for_byte(builder: BuilderType) -> None:
    env = env_seen(containers(render(tricky_image(builder)))["report"])
    assert env[wire.OUT_DIR_ENV] == wire.OUT_DIR
    assert env[wire.LOG_KEY_ENV] == TRICKY_LOG_KEY
    assert env[wire.TIMEOUT_ENV] == "900"
    location, _ = storage_from_env(env)
    assert location.prefix == TRICKY_PREFIX
    assert wire.CONTEXT_KEY_ENV not in env


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_build_container_sees_the_contract_byte_for_byte(builder: BuilderType) -> None:
    env = env_seen(containers(render(tricky_image(builder)))["build"])
    assert env[wire.IMAGE_ENV] == TRICKY_IMAGE
    assert env[wire.PLATFORM_ENV] == "linux/arm64"
    assert env[wire.PLAIN_HTTP_ENV] == "true"
    assert env[wire.CONTEXT_DIR_ENV] == wire.CONTEXT_DIR
    assert env[wire.OUT_DIR_ENV] == wire.OUT_DIR
    if builder is BuilderType.BUILDAH:
        assert env[wire.STORAGE_ENV] == BUILDAH_STATE_DIR
    else:
        assert env["BUILDKITD_FLAGS"] == "--oci-worker-no-process-sandbox"
        assert wire.STORAGE_ENV not in env
    # Storage is none of the builder's business: no location, no credentials.
    assert not [name for name in env if name.startswith(("ROLLOUT_STORAGE_", "AWS_"))]
    assert wire.LOG_KEY_ENV not in env
    assert wire.CONTEXT_KEY_ENV not in env


@pytest.mark.parametrize("builder", BUILDERS)
def test_plain_http_is_false_unless_asked(builder: BuilderType) -> None:
    env = env_seen(containers(render(image_body(builder)))["build"])
    assert env[wire.PLAIN_HTTP_ENV] == "false"


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_shared_directories_are_one_volume_in_all_three_containers(
    builder: BuilderType,
) -> None:
    pod = render(image_body(builder))
    by_name = containers(pod)

    def volume_holding(container: dict[str, Any], path: str) -> str:
        """The volume that `path` lies in, in this container (the deepest mount)."""
        found: list[tuple[int, str]] = [
            (len(m["mountPath"]), m["name"])
            for m in container["volumeMounts"]
            if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
        ]
        assert found, f"{path} is on {container['name']}'s root filesystem"
        return max(found)[1]

    context_volume = volume_holding(
        by_name["context"], env_seen(by_name["context"])[wire.CONTEXT_DIR_ENV]
    )
    assert volume_holding(by_name["build"], env_seen(by_name["build"])[wire.CONTEXT_DIR_ENV]) == (
        context_volume
    )
    out_volume = volume_holding(by_name["build"], env_seen(by_name["build"])[wire.OUT_DIR_ENV])
    assert volume_holding(by_name["report"], env_seen(by_name["report"])[wire.OUT_DIR_ENV]) == (
        out_volume
    )
    assert "emptyDir" in volumes(pod)[context_volume]
    assert "emptyDir" in volumes(pod)[out_volume]
    # The builder keeps its state on a volume too, not in the container's writable layer.
    state = BUILDKIT_STATE_DIR if builder is BuilderType.BUILDKIT else BUILDAH_STATE_DIR
    assert "emptyDir" in volumes(pod)[volume_holding(by_name["build"], state)]


# --- Secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize(
    ("own", "operators", "expected"),
    [
        ("team-a-storage", "rollout-storage", "team-a-storage"),
        (None, "rollout-storage", "rollout-storage"),
        ("team-a-storage", None, "team-a-storage"),
    ],
)
def test_storage_credentials_reach_context_and_report_only(
    builder: BuilderType, own: str | None, operators: str | None, expected: str
) -> None:
    image = image_body(builder)
    if own is not None:
        image["spec"]["context"]["storage"]["credentialsSecret"] = own
    pod = render(image, storage_credentials_secret=operators)
    assert set(secret_volumes(pod).values()) == {expected}
    volume_name = volume_of_secret(pod, expected)
    volume = volumes(pod)[volume_name]["secret"]
    by_name = containers(pod)
    for name in ("context", "report"):
        mount = mounts(by_name[name])[volume_name]
        assert mount["readOnly"] is True
        env = env_seen(by_name[name])
        assert env[STORAGE_CREDENTIALS_ENV] == mount["mountPath"]
        # The runner's group can read the Secret's files: the Pod's fsGroup owns them.
        user = by_name[name]["securityContext"]
        assert pod["spec"]["securityContext"]["fsGroup"] == user["runAsGroup"] == RUNNER_USER
        assert volume["defaultMode"] & 0o040
        assert volume["defaultMode"] & 0o007 == 0  # and no one else
    assert volume_name not in mounts(by_name["build"])
    assert STORAGE_CREDENTIALS_ENV not in env_seen(by_name["build"])


@pytest.mark.parametrize("builder", BUILDERS)
def test_no_storage_credentials_mount_without_a_secret(builder: BuilderType) -> None:
    pod = render(image_body(builder))
    assert secret_volumes(pod) == {}
    for container in containers(pod).values():
        assert STORAGE_CREDENTIALS_ENV not in env_seen(container)
        assert all("secret" not in volumes(pod)[m["name"]] for m in container["volumeMounts"])


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_push_secret_reaches_the_builder_only_as_config_json(builder: BuilderType) -> None:
    pod = render(image_body(builder, pushSecret="registry-push"))
    volume_name = volume_of_secret(pod, "registry-push")
    secret = volumes(pod)[volume_name]["secret"]
    assert secret["items"] == [{"key": ".dockerconfigjson", "path": "config.json"}]
    by_name = containers(pod)
    mount = mounts(by_name["build"])[volume_name]
    assert mount["readOnly"] is True
    env = env_seen(by_name["build"])
    # BuildKit reads $DOCKER_CONFIG/config.json, Buildah $REGISTRY_AUTH_FILE.
    assert env["DOCKER_CONFIG"] == mount["mountPath"]
    assert env["REGISTRY_AUTH_FILE"] == f"{mount['mountPath']}/config.json"
    # The builder (uid 1000 or root) can read it.
    mode = secret.get("defaultMode", 0o644)
    assert mode & 0o004 or (mode & 0o040 and pod["spec"]["securityContext"].get("fsGroup"))
    for name in ("context", "report"):
        assert volume_name not in mounts(by_name[name])
        assert "DOCKER_CONFIG" not in env_seen(by_name[name])
        assert "REGISTRY_AUTH_FILE" not in env_seen(by_name[name])


@pytest.mark.parametrize("builder", BUILDERS)
def test_no_push_secret_no_registry_credentials(builder: BuilderType) -> None:
    pod = render(image_body(builder), storage_credentials_secret="rollout-storage")
    assert set(secret_volumes(pod).values()) == {"rollout-storage"}
    env = env_seen(containers(pod)["build"])
    assert "DOCKER_CONFIG" not in env
    assert "REGISTRY_AUTH_FILE" not in env
    assert ".dockerconfigjson" not in repr(pod)


# --- security -------------------------------------------------------------------------------------


RESTRICTED = {
    "runAsUser": RUNNER_USER,
    "runAsGroup": RUNNER_USER,
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_runners_containers_are_restricted(builder: BuilderType) -> None:
    by_name = containers(render(image_body(builder)))
    for name in ("context", "report"):
        security = by_name[name]["securityContext"]
        assert {k: security.get(k) for k in RESTRICTED} == RESTRICTED
        assert security.get("privileged") in (None, False)
        # A read-only root: the runner writes only to its mounts.
        writable = {m["mountPath"] for m in by_name[name]["volumeMounts"] if not m.get("readOnly")}
        assert {"/tmp", wire.WORKSPACE_DIR} <= writable


def test_buildkit_runs_rootless_and_unconfined() -> None:
    pod = render(image_body(BuilderType.BUILDKIT))
    security = containers(pod)["build"]["securityContext"]
    assert security["runAsUser"] == BUILDKIT_USER
    assert security["runAsGroup"] == BUILDKIT_USER
    assert security["seccompProfile"] == {"type": "Unconfined"}
    assert not security.get("privileged")
    assert pod["metadata"]["annotations"] == {APPARMOR_BUILD: "unconfined"}
    # The state directory of the rootless daemon is a volume of its own.
    assert "builder-state" in mounts(containers(pod)["build"])
    assert mounts(containers(pod)["build"])["builder-state"]["mountPath"] == BUILDKIT_STATE_DIR


def test_buildah_runs_as_root_with_setfcap() -> None:
    pod = render(image_body(BuilderType.BUILDAH))
    security = containers(pod)["build"]["securityContext"]
    assert security["runAsUser"] == 0
    assert security["capabilities"]["add"] == ["SETFCAP"]
    assert "drop" not in security["capabilities"]
    assert not security.get("privileged")
    assert APPARMOR_BUILD not in pod["metadata"].get("annotations", {})
    assert mounts(containers(pod)["build"])["builder-state"]["mountPath"] == BUILDAH_STATE_DIR


# --- the operator's settings ----------------------------------------------------------------------


@pytest.mark.parametrize("builder", BUILDERS)
def test_the_default_pod_overrides_apply(builder: BuilderType) -> None:
    pod = render(
        image_body(builder),
        default_pod_overrides={
            "nodeSelector": {"pool": "builds"},
            "tolerations": [{"key": "builds", "operator": "Exists", "effect": "NoSchedule"}],
            "imagePullSecrets": [{"name": "regcred"}],
        },
        trial_service_account="rollout-trial",
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"pool": "builds"}
    assert spec["tolerations"] == [{"key": "builds", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["serviceAccountName"] == "rollout-trial"
    assert spec["automountServiceAccountToken"] is False  # a service account, still no token


def test_without_overrides_the_pod_has_no_scheduling_fields() -> None:
    spec = render()["spec"]
    for field in ("nodeSelector", "tolerations", "imagePullSecrets", "runtimeClassName"):
        assert field not in spec


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["uid", "name", "namespace"])
def test_an_image_without_its_identity_is_refused(missing: str) -> None:
    image = image_body()
    del image["metadata"][missing]
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        render(image)


def test_an_image_with_an_invalid_spec_is_refused() -> None:
    image = image_body()
    image["spec"]["timeoutSeconds"] = 0
    with pytest.raises(ValidationError):
        render(image)


def test_rendering_does_not_change_the_image() -> None:
    image = image_body(BuilderType.BUILDAH, pushSecret="p")
    before = copy.deepcopy(image)
    render(image)
    assert image == before


# --- the builder's script -------------------------------------------------------------------------


SHELLS: dict[str, list[str]] = {
    "sh": ["sh"],
    "dash": ["dash"],
    "busybox": ["busybox", "sh"],
    "bash-posix": ["bash", "--posix"],
}
"""The shells a builder image may have as /bin/sh: Alpine's busybox (BuildKit's rootless
image), bash (Buildah's Fedora image), and dash."""


def shell(name: str) -> list[str]:
    command = SHELLS[name]
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed here")
    return command


@pytest.mark.parametrize("name", SHELLS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_the_script_parses(builder: BuilderType, name: str) -> None:
    done = subprocess.run(
        [*shell(name), "-n", "-c", builder_script(builder)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr


FAKE_BUILDER = r"""#!/bin/sh
# A stand-in for the builder: it says what it was asked (on stdout, its calls file) and what
# it saw, writes the digest where the real one would, and exits as told.
me="$(basename "$0")"
sub=""
for arg in "$@"; do
    case "$arg" in build|push) sub="$arg"; break ;; esac
done
{ printf 'call %s %s\n' "$me" "$sub"; for arg in "$@"; do printf 'arg %s\n' "$arg"; done
  printf 'env BUILDKITD_FLAGS=%s\n' "${BUILDKITD_FLAGS-<unset>}"
  printf 'env CONTAINERS_REGISTRIES_CONF=%s\n' "${CONTAINERS_REGISTRIES_CONF-<unset>}"
  printf 'end\n'; } >> "$FAKE_CALLS"
echo "$me $sub: step 1/2 on stdout"
echo "$me $sub: a warning on stderr" >&2
case "$sub" in
    push) code="${FAKE_PUSH_EXIT:-0}" ;;
    *) code="${FAKE_BUILD_EXIT:-0}" ;;
esac
last=""
if [ "$code" = 0 ]; then
    for arg in "$@"; do
        case "$last" in
            --digestfile) printf '%s\n' "$FAKE_DIGEST" > "$arg" ;;
            --metadata-file) printf '{"containerimage.digest": "%s"}\n' "$FAKE_DIGEST" > "$arg" ;;
        esac
        last="$arg"
    done
fi
final=""
if [ "$me" = buildctl-daemonless.sh ] || [ "$sub" = push ] || [ "$code" != 0 ]; then
    final=yes
fi
if [ -n "${FAKE_LATE:-}" ] && [ -n "$final" ]; then
    # A process the builder left behind writes its last words after the builder exited: the
    # log is complete only once it is gone. It waits for the builder's exit status to be
    # recorded (or its caller to end), then says whether `exit` was already there.
    caller=$PPID
    (
        while [ ! -e "$ROLLOUT_BUILD_OUT/status" ] && [ ! -e "$ROLLOUT_BUILD_OUT/exit" ] \
            && kill -0 "$caller" 2>/dev/null; do :; done
        if [ -e "$ROLLOUT_BUILD_OUT/exit" ]; then echo "EXIT BEFORE THE END OF THE LOG"; fi
        echo "the builder's last words"
    ) &
fi
echo "$me $sub: step 2/2, exit $code"
exit "$code"
"""


@dataclass
class Call:
    """One call of the stand-in builder."""

    program: str
    subcommand: str
    args: list[str]
    env: dict[str, str]

    def after(self, flag: str) -> str:
        """The argument after `flag`."""
        return self.args[self.args.index(flag) + 1]


@dataclass
class BuildRun:
    exit_code: int
    stdout: str
    stderr: str
    out: Path
    context: Path
    state: Path
    calls: list[Call]

    @property
    def log(self) -> str:
        return (self.out / wire.LOG_FILE).read_text()

    def exit_file(self) -> int:
        return int((self.out / wire.EXIT_FILE).read_text())


def read_calls(path: Path) -> list[Call]:
    calls: list[Call] = []
    if not path.exists():
        return calls
    current: Call | None = None
    for line in path.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "call":
            program, _, sub = rest.partition(" ")
            current = Call(program, sub, [], {})
        elif kind == "arg" and current is not None:
            current.args.append(rest)
        elif kind == "env" and current is not None:
            key, _, value = rest.partition("=")
            current.env[key] = value
        elif kind == "end" and current is not None:
            calls.append(current)
            current = None
    return calls


def run_build_container(
    tmp_path: Path,
    image: dict[str, Any],
    *,
    shell_name: str = "sh",
    build_exit: int = 0,
    push_exit: int = 0,
    late: bool = False,
) -> BuildRun:
    """Run the build container's command as the kubelet would start it, its volumes as host
    directories, with the stand-in builder on PATH."""
    pod = render(image)
    build = containers(pod)["build"]
    workspace = tmp_path / "workspace"
    state = tmp_path / "builder-state"
    bin_dir = tmp_path / "bin"
    for directory in (workspace, state, bin_dir):
        directory.mkdir()
    on_host = {m["mountPath"]: tmp_path / m["name"] for m in build["volumeMounts"]}
    for host in on_host.values():
        host.mkdir(exist_ok=True)
    assert on_host[wire.WORKSPACE_DIR] == workspace
    context = Path(remap(wire.CONTEXT_DIR, on_host))
    context.mkdir()
    (context / "Dockerfile").write_text("FROM alpine:3.20\nRUN echo built\n")
    for program in ("buildah", "buildctl-daemonless.sh"):
        fake = bin_dir / program
        fake.write_text(FAKE_BUILDER)
        fake.chmod(0o755)
    env = {name: remap(value, on_host) for name, value in env_seen(build).items()}
    argv = [remap(arg, on_host) for arg in container_argv(build, env_seen(build))]
    assert argv[0] == "sh"
    calls = tmp_path / "calls.txt"
    process_env = {
        **env,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_CALLS": str(calls),
        "FAKE_DIGEST": DIGEST,
        "FAKE_BUILD_EXIT": str(build_exit),
        "FAKE_PUSH_EXIT": str(push_exit),
    }
    if late:
        process_env["FAKE_LATE"] = "1"
    done = subprocess.run(
        [*shell(shell_name), *argv[1:]],
        env=process_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return BuildRun(
        done.returncode,
        done.stdout,
        done.stderr,
        Path(env[wire.OUT_DIR_ENV]),
        context,
        state,
        read_calls(calls),
    )


def buildah_calls(run: BuildRun) -> dict[str, Call]:
    assert all(call.program == "buildah" for call in run.calls)
    return {call.subcommand: call for call in run.calls}


@pytest.mark.parametrize("name", SHELLS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_a_successful_build_leaves_its_log_exit_status_and_digest(
    tmp_path: Path, builder: BuilderType, name: str
) -> None:
    run = run_build_container(tmp_path, image_body(builder), shell_name=name)
    assert run.exit_code == 0, run.stderr
    assert run.exit_file() == 0
    log = run.log
    assert "step 1/2 on stdout" in log
    assert "a warning on stderr" in log  # the builder's stderr is in the log too
    assert "step 2/2, exit 0" in log
    assert run.stdout == log  # and on the container's stdout, for `kubectl logs`
    # The digest is where the `report` container reads it.
    digest_file = run.out / wire.DIGEST_FILE
    metadata_file = run.out / wire.METADATA_FILE
    found = wire.pushed_digest(
        digest_file.read_text() if digest_file.exists() else None,
        metadata_file.read_text() if metadata_file.exists() else None,
    )
    assert found == DIGEST
    if builder is BuilderType.BUILDAH:
        assert [c.subcommand for c in run.calls] == ["build", "push"]
        assert digest_file.exists()
    else:
        assert [(c.program, c.subcommand) for c in run.calls] == [
            ("buildctl-daemonless.sh", "build")
        ]
        assert metadata_file.exists()


@pytest.mark.parametrize("name", ["sh", "busybox", "bash-posix"])
@pytest.mark.parametrize("builder", BUILDERS)
def test_the_exit_status_is_the_builders(tmp_path: Path, builder: BuilderType, name: str) -> None:
    run = run_build_container(tmp_path, image_body(builder), shell_name=name, build_exit=3)
    assert run.exit_code == 0, run.stderr  # the script reports; `report` judges
    assert run.exit_file() == 3
    assert "step 2/2, exit 3" in run.log
    assert not (run.out / wire.DIGEST_FILE).exists()
    assert not (run.out / wire.METADATA_FILE).exists()
    if builder is BuilderType.BUILDAH:
        assert [c.subcommand for c in run.calls] == ["build"]  # nothing pushed after a failure


def test_a_failed_push_is_buildahs_exit_status(tmp_path: Path) -> None:
    run = run_build_container(tmp_path, image_body(BuilderType.BUILDAH), push_exit=125)
    assert [c.subcommand for c in run.calls] == ["build", "push"]
    assert run.exit_file() == 125
    assert "step 2/2, exit 125" in run.log
    assert not (run.out / wire.DIGEST_FILE).exists()


@pytest.mark.parametrize("name", ["sh", "busybox", "bash-posix"])
@pytest.mark.parametrize("builder", BUILDERS)
@pytest.mark.parametrize("code", [0, 7])
def test_the_exit_file_appears_only_once_the_log_is_complete(
    tmp_path: Path, builder: BuilderType, name: str, code: int
) -> None:
    run = run_build_container(
        tmp_path, image_body(builder), shell_name=name, build_exit=code, late=True
    )
    log = run.log
    assert "EXIT BEFORE THE END OF THE LOG" not in log
    assert log.rstrip("\n").splitlines()[-1] == "the builder's last words"
    assert run.exit_file() == code


def test_buildkit_builds_the_context_for_the_platform_and_pushes_the_image(
    tmp_path: Path,
) -> None:
    image = image_body(BuilderType.BUILDKIT, image=TRICKY_IMAGE, platform="linux/arm64")
    run = run_build_container(tmp_path, image)
    (call,) = run.calls
    assert call.args[0] == "build"
    assert f"context={run.context}" in call.args
    assert f"dockerfile={run.context}" in call.args
    assert call.after("--opt") == "platform=linux/arm64"
    assert call.after("--frontend") == "dockerfile.v0"
    # The image name reaches the builder byte for byte, `$` and all.
    assert call.after("--output") == f"type=image,name={TRICKY_IMAGE},push=true"
    assert call.after("--metadata-file") == str(run.out / wire.METADATA_FILE)
    assert call.env["BUILDKITD_FLAGS"] == "--oci-worker-no-process-sandbox"
    assert not (run.out / "buildkitd.toml").exists()


def test_buildah_builds_the_context_for_the_platform_and_pushes_the_image(tmp_path: Path) -> None:
    image = image_body(BuilderType.BUILDAH, image=TRICKY_IMAGE, platform="linux/arm64")
    run = run_build_container(tmp_path, image)
    calls = buildah_calls(run)
    build, push = calls["build"], calls["push"]
    assert build.after("--platform") == "linux/arm64"
    assert build.after("-f") == str(run.context / "Dockerfile")
    assert build.after("-t") == TRICKY_IMAGE
    assert build.args[-1] == str(run.context)
    assert build.after("--isolation") == "chroot"
    for call in (build, push):
        assert call.after("--storage-driver") == "vfs"
        assert Path(call.after("--root")).is_relative_to(run.state)
        assert Path(call.after("--runroot")).is_relative_to(run.state)
        assert call.env["CONTAINERS_REGISTRIES_CONF"] == "<unset>"
    assert push.args[-1] == TRICKY_IMAGE
    assert push.after("--digestfile") == str(run.out / wire.DIGEST_FILE)
    assert "--tls-verify=true" in push.args
    assert not (run.out / "registries.conf").exists()


def test_buildkit_over_plain_http_trusts_the_registry_host_alone(tmp_path: Path) -> None:
    run = run_build_container(tmp_path, image_body(BuilderType.BUILDKIT, plainHttp=True))
    (call,) = run.calls
    assert call.after("--output") == f"type=image,name={PUSHED},push=true,registry.insecure=true"
    config_file = run.out / "buildkitd.toml"
    flags = call.env["BUILDKITD_FLAGS"].split()
    assert flags == ["--oci-worker-no-process-sandbox", f"--config={config_file}"]
    config = tomllib.loads(config_file.read_text())
    assert config == {"registry": {REGISTRY_HOST: {"http": True, "insecure": True}}}
    assert run.exit_file() == 0


def test_buildah_over_plain_http_trusts_the_registry_host_alone(tmp_path: Path) -> None:
    run = run_build_container(tmp_path, image_body(BuilderType.BUILDAH, plainHttp=True))
    calls = buildah_calls(run)
    config_file = run.out / "registries.conf"
    config = tomllib.loads(config_file.read_text())
    assert config["registry"] == [{"location": REGISTRY_HOST, "insecure": True}]
    assert config["unqualified-search-registries"] == ["docker.io"]
    for call in calls.values():
        assert call.env["CONTAINERS_REGISTRIES_CONF"] == str(config_file)
    assert "--tls-verify=false" in calls["push"].args
    assert "--tls-verify=true" not in calls["push"].args
    # Base images are still pulled over TLS: the build itself turns no check off.
    assert not [a for a in calls["build"].args if a.startswith("--tls-verify")]
    assert run.exit_file() == 0


@pytest.mark.parametrize("builder", BUILDERS)
def test_a_registry_without_a_port_is_named_as_it_is(tmp_path: Path, builder: BuilderType) -> None:
    image = image_body(builder, plainHttp=True, image=f"registry.internal/a/b/c:{IMAGE_HASH}")
    run = run_build_container(tmp_path, image)
    if builder is BuilderType.BUILDAH:
        config = tomllib.loads((run.out / "registries.conf").read_text())
        assert [r["location"] for r in config["registry"]] == ["registry.internal"]
    else:
        config = tomllib.loads((run.out / "buildkitd.toml").read_text())
        assert list(config["registry"]) == ["registry.internal"]
