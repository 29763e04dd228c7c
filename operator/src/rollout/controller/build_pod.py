"""The Pod that builds a RolloutImage: fetch the context, build and push, report. A pure builder.

Its layout is the build Pod contract (`rollout.api.wire.build`):

- init container `context` (the runner image) unpacks the environment's archive from storage;
- `build` (the builder's image) runs the builder through a POSIX sh script that keeps its log
  and exit status in the shared workspace (`builder_script`);
- `report` (the runner image) waits for the builder, uploads its log, and leaves a `BuildReport`
  in its termination message.

Only `context` and `report` get the storage credentials, and only `build` the registry's push
credentials (a dockerconfigjson Secret, mounted as `config.json`). No container gets a service
account token. The runner's two containers run as the runner image's own unprivileged user with
a read-only root filesystem; the builder runs as its image requires:

- BuildKit rootless, as its uid 1000, with seccomp and AppArmor unconfined (it makes user and
  mount namespaces of its own: moby/buildkit's `examples/kubernetes/job.rootless.yaml`), in
  daemonless mode with `--oci-worker-no-process-sandbox`;
- Buildah as root with `--isolation chroot` and the vfs storage driver, the setup its image
  documents for builds in an unprivileged container; it needs SETFCAP besides the default
  capabilities.

Either way the namespace must admit such Pods (Pod Security "privileged" for BuildKit's
unconfined profiles): the README's "Image builds" says so.

`activeDeadlineSeconds` is the build's timeout plus a margin for the context, the builder's
image pull and the log's upload: a safety net, the `report` container enforces the timeout
itself and says so. Every string the kubelet could rewrite is written as a kubelet literal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollout.api.names import LABEL_COMPONENT, controller_reference
from rollout.api.resources import (
    GROUP,
    BuilderType,
    RolloutImage,
    RolloutImageSpec,
)
from rollout.api.wire import build as wire
from rollout.controller.config import OperatorConfig
from rollout.controller.kubelet_text import as_kubelet_literals
from rollout.storage import ENV_CREDENTIALS_DIR, location_env

CONTEXT_CONTAINER = "context"
BUILD_CONTAINER = "build"
REPORT_CONTAINER = "report"

BUILD_POD_COMPONENT = "image-build"
LABEL_IMAGE = f"{GROUP}/image"

WORKSPACE_VOLUME = "workspace"
TMP_VOLUME = "tmp"
BUILDER_STATE_VOLUME = "builder-state"
STORAGE_CREDENTIALS_VOLUME = "storage-credentials"
REGISTRY_CREDENTIALS_VOLUME = "registry-credentials"

TMP_DIR = "/tmp"
STORAGE_CREDENTIALS_DIR = "/var/run/secrets/rollout/storage"
REGISTRY_CREDENTIALS_DIR = "/var/run/secrets/rollout/registry"
REGISTRY_CONFIG_FILE = "config.json"
"""The push Secret's `.dockerconfigjson`, mounted under the name both builders read."""

BUILDKIT_USER = 1000
"""The user of the rootless BuildKit image (`moby/buildkit:*-rootless`)."""
BUILDKIT_STATE_DIR = "/home/user/.local/share/buildkit"
BUILDAH_STATE_DIR = "/var/lib/rollout-build"

RUNNER_USER = 65532
"""The runner image's own unprivileged user (runner-image/Dockerfile)."""

DEADLINE_MARGIN_SEC = 300
"""On top of the build's timeout before the kubelet ends the Pod: the context's download, the
builder image's pull and the log's upload."""

BUILDER_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
    "limits": {"memory": "8Gi", "ephemeral-storage": "50Gi"},
}
"""A build unpacks base images and runs the Dockerfile's commands: memory and disk to spare, no
CPU limit (a build is short and bursty)."""
HELPER_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "64Mi"},
    "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "4Gi"},
}

_WRAP = """\
set -u
out="$ROLLOUT_BUILD_OUT"
mkdir -p "$out"
{setup}( {command}
  echo $? > "$out/status" ) 2>&1 | tee "$out/build.log"
mv "$out/status" "$out/exit"
"""
"""After the builder's `{setup}` (which may write into $out), runs `{command}` with its output
in the log (and on stdout), then writes its exit status to `exit` once the log is complete:
`report` reads the log only after it sees `exit`."""

_BUILDKIT = """\
output="type=image,name=$ROLLOUT_BUILD_IMAGE,push=true"
if [ "$ROLLOUT_BUILD_PLAIN_HTTP" = true ]; then
    output="$output,registry.insecure=true"
    host="${ROLLOUT_BUILD_IMAGE%%/*}"
    printf '[registry."%s"]\\n  http = true\\n  insecure = true\\n' "$host" > "$out/buildkitd.toml"
    BUILDKITD_FLAGS="${BUILDKITD_FLAGS:-} --config=$out/buildkitd.toml"
    export BUILDKITD_FLAGS
fi
"""
_BUILDKIT_COMMAND = (
    "buildctl-daemonless.sh build --progress=plain --frontend dockerfile.v0 \\\n"
    '    --local context="$ROLLOUT_BUILD_CONTEXT" --local dockerfile="$ROLLOUT_BUILD_CONTEXT" \\\n'
    '    --opt platform="$ROLLOUT_BUILD_PLATFORM" --output "$output" \\\n'
    '    --metadata-file "$out/metadata.json"'
)

_BUILDAH = """\
tls=true
if [ "$ROLLOUT_BUILD_PLAIN_HTTP" = true ]; then
    tls=false
    host="${ROLLOUT_BUILD_IMAGE%%/*}"
    printf 'unqualified-search-registries = ["docker.io"]\\n\\n[[registry]]\\nlocation = "%s"\\ninsecure = true\\n' "$host" > "$out/registries.conf"
    CONTAINERS_REGISTRIES_CONF="$out/registries.conf"
    export CONTAINERS_REGISTRIES_CONF
fi
store="$ROLLOUT_BUILD_STORAGE"
"""  # noqa: E501
_BUILDAH_COMMAND = (
    'buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs build \\\n'
    '    --isolation chroot --platform "$ROLLOUT_BUILD_PLATFORM" \\\n'
    '    -f "$ROLLOUT_BUILD_CONTEXT/Dockerfile" -t "$ROLLOUT_BUILD_IMAGE" \\\n'
    '    "$ROLLOUT_BUILD_CONTEXT" &&\n'
    '  buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs push \\\n'
    '    --tls-verify="$tls" --digestfile "$out/digest" "$ROLLOUT_BUILD_IMAGE"'
)
# A plain-HTTP registry is named insecure for that host alone (registries.conf, buildkitd.toml),
# never by turning TLS checks off for every registry, as the base images' is usually not ours.


def builder_script(builder: BuilderType) -> str:
    """The `build` container's script (`sh -c`): the builder's command, wrapped."""
    if builder is BuilderType.BUILDKIT:
        setup, command = _BUILDKIT, _BUILDKIT_COMMAND
    else:
        setup, command = _BUILDAH, _BUILDAH_COMMAND
    return _WRAP.replace("{setup}", setup).replace("{command}", command)


def build_pod_name(image_name: str, attempt: int) -> str:
    """The build Pod of a RolloutImage's attempt `attempt` (from 1)."""
    return f"{image_name}-build-{attempt}"


def render_build_pod(
    image: Mapping[str, Any], *, config: OperatorConfig, attempt: int
) -> dict[str, Any]:
    """The Pod that builds `image` (a RolloutImage object), its attempt `attempt` (from 1).

    Raises ValueError when the object lacks the name, namespace or uid its Pod's owner
    reference needs; pydantic's ValidationError when its spec is not a RolloutImage's.
    """
    metadata = image.get("metadata") or {}
    name, namespace, uid = (metadata.get(key) for key in ("name", "namespace", "uid"))
    if not (name and namespace and uid):
        raise ValueError("a RolloutImage needs metadata.name, metadata.namespace and metadata.uid")
    spec = RolloutImageSpec.model_validate(image.get("spec"))
    credentials = spec.context.storage.credentials_secret or config.storage_credentials_secret
    builder = spec.builder.type
    overrides = config.default_pod_overrides
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Nothing in a build needs the Kubernetes API; the Dockerfile's commands must not get it.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": config.pod_termination_grace_sec,
        "activeDeadlineSeconds": spec.timeout_seconds + DEADLINE_MARGIN_SEC,
        # The runner's group owns the mounted Secrets' files (mode 0440) and the workspace.
        "securityContext": {"fsGroup": RUNNER_USER},
        "initContainers": [_context_container(spec, config, credentials)],
        "containers": [
            _build_container(spec),
            _report_container(spec, config, credentials),
        ],
        "volumes": _volumes(spec, credentials),
    }
    if config.trial_service_account:
        pod_spec["serviceAccountName"] = config.trial_service_account
    if overrides is not None:
        # Where trial Pods go, builds go (node selector, tolerations, priority, pull secrets);
        # not their RuntimeClass: a sandboxed runtime (gVisor, Kata) is for agents' code, and a
        # builder makes namespaces of its own that such runtimes refuse.
        scheduling = overrides.model_dump(mode="json", exclude_none=True)
        scheduling.pop("runtimeClassName", None)
        pod_spec.update({k: v for k, v in scheduling.items() if v not in ({}, [])})
    annotations: dict[str, str] = {}
    if builder is BuilderType.BUILDKIT:
        # The field (appArmorProfile) exists from Kubernetes 1.30; the annotation everywhere.
        annotations[f"container.apparmor.security.beta.kubernetes.io/{BUILD_CONTAINER}"] = (
            "unconfined"
        )
    pod_metadata: dict[str, Any] = {
        "name": build_pod_name(str(name), attempt),
        "namespace": namespace,
        "labels": {LABEL_COMPONENT: BUILD_POD_COMPONENT, LABEL_IMAGE: str(name)},
        "ownerReferences": [controller_reference(RolloutImage.resource.kind, str(name), uid)],
    }
    if annotations:
        pod_metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": pod_spec}


def _storage_env(spec: RolloutImageSpec, credentials: str | None) -> list[dict[str, Any]]:
    env = [{"name": k, "value": v} for k, v in location_env(spec.context.storage).items()]
    if credentials:
        env.append({"name": ENV_CREDENTIALS_DIR, "value": STORAGE_CREDENTIALS_DIR})
    # The root filesystem is read-only: boto3 and Python look in $HOME, a writable emptyDir.
    env.append({"name": "HOME", "value": TMP_DIR})
    return env


def _helper_mounts(credentials: str | None) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": WORKSPACE_VOLUME, "mountPath": wire.WORKSPACE_DIR},
        {"name": TMP_VOLUME, "mountPath": TMP_DIR},
    ]
    if credentials:
        mounts.append(
            {
                "name": STORAGE_CREDENTIALS_VOLUME,
                "mountPath": STORAGE_CREDENTIALS_DIR,
                "readOnly": True,
            }
        )
    return mounts


_HELPER_SECURITY: dict[str, Any] = {
    "runAsUser": RUNNER_USER,
    "runAsGroup": RUNNER_USER,
    "runAsNonRoot": True,
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _helper(
    name: str,
    command: str,
    spec: RolloutImageSpec,
    config: OperatorConfig,
    credentials: str | None,
    env: list[dict[str, Any]],
) -> dict[str, Any]:
    return as_kubelet_literals(
        {
            "name": name,
            "image": config.runner_image,
            "imagePullPolicy": config.runner_image_pull_policy,
            "command": ["python", "-m", "rollout_runner.build", command],
            "env": [*env, *_storage_env(spec, credentials)],
            "resources": {kind: dict(amounts) for kind, amounts in HELPER_RESOURCES.items()},
            "securityContext": dict(_HELPER_SECURITY),
            "volumeMounts": _helper_mounts(credentials),
            "terminationMessagePolicy": "File",
        }
    )


def _context_container(
    spec: RolloutImageSpec, config: OperatorConfig, credentials: str | None
) -> dict[str, Any]:
    env = [
        {"name": wire.CONTEXT_KEY_ENV, "value": spec.context.key},
        {"name": wire.CONTEXT_DIR_ENV, "value": wire.CONTEXT_DIR},
    ]
    return _helper(CONTEXT_CONTAINER, "context", spec, config, credentials, env)


def _report_container(
    spec: RolloutImageSpec, config: OperatorConfig, credentials: str | None
) -> dict[str, Any]:
    env = [
        {"name": wire.OUT_DIR_ENV, "value": wire.OUT_DIR},
        {"name": wire.LOG_KEY_ENV, "value": spec.log_key},
        {"name": wire.TIMEOUT_ENV, "value": str(spec.timeout_seconds)},
    ]
    return _helper(REPORT_CONTAINER, "report", spec, config, credentials, env)


def _build_container(spec: RolloutImageSpec) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": wire.IMAGE_ENV, "value": spec.image},
        {"name": wire.PLATFORM_ENV, "value": spec.platform},
        {"name": wire.PLAIN_HTTP_ENV, "value": "true" if spec.plain_http else "false"},
        {"name": wire.CONTEXT_DIR_ENV, "value": wire.CONTEXT_DIR},
        {"name": wire.OUT_DIR_ENV, "value": wire.OUT_DIR},
    ]
    mounts: list[dict[str, Any]] = [{"name": WORKSPACE_VOLUME, "mountPath": wire.WORKSPACE_DIR}]
    if spec.builder.type is BuilderType.BUILDKIT:
        env.append({"name": "BUILDKITD_FLAGS", "value": "--oci-worker-no-process-sandbox"})
        mounts.append({"name": BUILDER_STATE_VOLUME, "mountPath": BUILDKIT_STATE_DIR})
        security: dict[str, Any] = {
            "runAsUser": BUILDKIT_USER,
            "runAsGroup": BUILDKIT_USER,
            "seccompProfile": {"type": "Unconfined"},
        }
    else:
        env.append({"name": wire.STORAGE_ENV, "value": BUILDAH_STATE_DIR})
        mounts.append({"name": BUILDER_STATE_VOLUME, "mountPath": BUILDAH_STATE_DIR})
        security = {
            "runAsUser": 0,
            "runAsGroup": 0,
            "capabilities": {"add": ["SETFCAP"]},
        }
    if spec.push_secret:
        # BuildKit reads $DOCKER_CONFIG/config.json, Buildah $REGISTRY_AUTH_FILE.
        env.append({"name": "DOCKER_CONFIG", "value": REGISTRY_CREDENTIALS_DIR})
        env.append(
            {
                "name": "REGISTRY_AUTH_FILE",
                "value": f"{REGISTRY_CREDENTIALS_DIR}/{REGISTRY_CONFIG_FILE}",
            }
        )
        mounts.append(
            {
                "name": REGISTRY_CREDENTIALS_VOLUME,
                "mountPath": REGISTRY_CREDENTIALS_DIR,
                "readOnly": True,
            }
        )
    return as_kubelet_literals(
        {
            "name": BUILD_CONTAINER,
            "image": spec.builder.image,
            # Never force a pull: a pinned builder image is pulled once per node.
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", builder_script(spec.builder.type), BUILD_CONTAINER],
            "env": env,
            "resources": {kind: dict(amounts) for kind, amounts in BUILDER_RESOURCES.items()},
            "securityContext": security,
            "volumeMounts": mounts,
            "terminationMessagePolicy": "File",
        }
    )


def _volumes(spec: RolloutImageSpec, credentials: str | None) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": WORKSPACE_VOLUME, "emptyDir": {}},
        {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": "256Mi"}},
        {"name": BUILDER_STATE_VOLUME, "emptyDir": {}},
    ]
    if credentials:
        volumes.append(
            {
                "name": STORAGE_CREDENTIALS_VOLUME,
                # Readable by the runner's group (the Pod's fsGroup) and no one else.
                "secret": {"secretName": credentials, "defaultMode": 0o440},
            }
        )
    if spec.push_secret:
        volumes.append(
            {
                "name": REGISTRY_CREDENTIALS_VOLUME,
                "secret": {
                    "secretName": spec.push_secret,
                    "items": [{"key": ".dockerconfigjson", "path": REGISTRY_CONFIG_FILE}],
                    "defaultMode": 0o444,
                },
            }
        )
    return volumes
