"""examples/quickstart.sh, run for real by bash with stand-ins for docker, kind, kubectl, helm,
curl and the rollout CLI (small scripts that record how they were called): it creates the
cluster from kind-config.yaml, wires the local registry into every node, builds and loads the
images, installs the chart with the quickstart values, runs the example job against MinIO through
a port-forward with the credentials from the chart's Secret, stops the port-forward, and says
where the results are."""

from __future__ import annotations

import base64
import os
import subprocess
import time
from pathlib import Path

import pytest

from paths import REPO
from rollout.api.resources import BuilderType
from rollout.controller.builds import DEFAULT_BUILDER_IMAGES

pytestmark = pytest.mark.integration

SCRIPT = REPO / "examples" / "quickstart.sh"
TOOLS = ("docker", "kind", "kubectl", "helm", "curl", "rollout")
NODES = ("rollout-control-plane", "rollout-worker", "rollout-worker2")
ACCESS_KEY = "rolloutquickstartkey"
BUILDER = DEFAULT_BUILDER_IMAGES[BuilderType.BUILDKIT]
"""The quickstart loads the operator's own default builder image into the nodes."""
SECRET_KEY = "quickstart-secret-value"

# One stand-in for every tool: it logs its name and arguments (one line, tab-separated) and
# answers the few calls whose output the script reads.
STAND_IN = r"""#!/bin/bash
tool=$(basename "$0")
# One write per call, so that calls made at the same time (a port-forward in the background)
# do not interleave in the log.
line=$tool
for arg in "$@"; do line+=$'\t'$arg; done
printf '%s\n' "$line" >> "$QS_LOG"
case "$tool $1 $2" in
  "docker inspect -f")
    case "$3" in
      *State.Running*) echo true ;;
      *Networks.kind*) echo null ;;
    esac ;;
  "docker exec -i")
    # docker exec -i <node> cp /dev/stdin <path>: keep what would be written on the node.
    mkdir -p "$QS_NODES/$3$(dirname "$6")" && cat > "$QS_NODES/$3$6" ;;
  "kind get clusters") ;;
  "kind get nodes") printf '%s\n' $QS_NODE_NAMES ;;
  "kubectl apply -f") cat > /dev/null ;;
  "helm template "*)
    echo '          image: "localhost:5001/rollout-operator:dev"'
    echo '          image: "quay.io/minio/minio:RELEASE.test"'
    echo '          image: "quay.io/minio/mc:RELEASE.test"' ;;
  "rollout run "*)
    env | grep -E '^(ROLLOUT_STORAGE_|AWS_)' | sort > "$QS_RUN_ENV" ;;
esac
case "$tool $*" in
  *" port-forward "*) echo $$ > "$QS_FORWARD_PID"; exec sleep 300 ;;
  *"get secret"*"AWS_ACCESS_KEY_ID"*) printf '%s' "$QS_ACCESS_KEY_B64" ;;
  *"get secret"*"AWS_SECRET_ACCESS_KEY"*) printf '%s' "$QS_SECRET_KEY_B64" ;;
esac
exit 0
"""


def run_quickstart(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "stand-in"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(stand_in)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "QS_LOG": str(tmp_path / "calls.log"),
        "QS_NODES": str(tmp_path / "nodes"),
        "QS_NODE_NAMES": " ".join(NODES),
        "QS_RUN_ENV": str(tmp_path / "run.env"),
        "QS_FORWARD_PID": str(tmp_path / "forward.pid"),
        "QS_ACCESS_KEY_B64": base64.b64encode(ACCESS_KEY.encode()).decode(),
        "QS_SECRET_KEY_B64": base64.b64encode(SECRET_KEY.encode()).decode(),
    }
    result = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    return result, tmp_path


def calls(tmp_path: Path) -> list[list[str]]:
    return [line.split("\t") for line in (tmp_path / "calls.log").read_text().splitlines()]


def index_of(log: list[list[str]], call: list[str]) -> int:
    assert call in log, f"{call} was not made; calls: {log}"
    return log.index(call)


def wait_gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_quickstart_runs_every_step_in_order(tmp_path: Path) -> None:
    result, base = run_quickstart(tmp_path)
    assert result.returncode == 0, result.stderr
    log = calls(base)
    operator, runner = "localhost:5001/rollout-operator:dev", "localhost:5001/rollout-runner:dev"
    steps = [
        ["kind", "create", "cluster", "--name", "rollout", "--config", "kind-config.yaml",
         "--wait", "120s"],
        ["docker", "build", "-f", "operator/Dockerfile", "-t", operator, "."],
        ["docker", "build", "-f", "runner-image/Dockerfile", "-t", runner, "."],
        ["docker", "push", operator],
        ["kind", "load", "docker-image", "--name", "rollout", operator, runner],
        ["kind", "load", "docker-image", "--name", "rollout", "debian:bookworm-slim"],
        ["helm", "upgrade", "--install", "rollout-operator", "charts/rollout-operator",
         "--namespace", "rollout-system", "--create-namespace",
         "-f", "charts/rollout-operator/values-quickstart.yaml",
         "--set", "image.repository=localhost:5001/rollout-operator", "--set", "image.tag=dev",
         "--set", "runner.image.repository=localhost:5001/rollout-runner",
         "--set", "runner.image.tag=dev",
         "--set", f"images.builder.image={BUILDER}", "--wait", "--timeout", "5m"],
        ["kubectl", "--namespace", "rollout-system", "port-forward",
         "service/rollout-operator-minio", "9000:9000"],
        ["rollout", "validate", "examples/job.yaml"],
        ["rollout", "publish", "examples/tasks"],
        ["rollout", "run", "examples/job.yaml", "--namespace", "rollout-system"],
        # The task whose image is built in the cluster, after the one that needs none.
        ["rollout", "run", "examples/build-job.yaml", "--namespace", "rollout-system"],
    ]  # fmt: skip
    positions = [index_of(log, step) for step in steps]
    assert positions == sorted(positions)
    # The local registry is attached to kind's network and named on every node.
    index_of(log, ["docker", "network", "connect", "kind", "kind-registry"])
    for node in NODES:
        hosts = base / "nodes" / node / "etc/containerd/certs.d/localhost:5001/hosts.toml"
        assert hosts.read_text() == '[host."http://kind-registry:5000"]\n'
    # The only images loaded are the built ones, the task's and the chart's third-party ones.
    loaded = [c[5:] for c in log if c[:3] == ["kind", "load", "docker-image"]]
    assert sorted(image for images in loaded for image in images) == sorted(
        [
            operator,
            runner,
            "debian:bookworm-slim",
            BUILDER,  # the image builder's: build Pods start without a pull
            "quay.io/minio/minio:RELEASE.test",
            "quay.io/minio/mc:RELEASE.test",
        ]
    )


def test_quickstart_gives_the_cli_minio_through_the_port_forward(tmp_path: Path) -> None:
    result, base = run_quickstart(tmp_path)
    assert result.returncode == 0, result.stderr
    run_env = dict(
        line.split("=", 1) for line in (base / "run.env").read_text().splitlines() if line
    )
    assert run_env == {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "ROLLOUT_STORAGE_BUCKET": "rollout",
        "ROLLOUT_STORAGE_ENDPOINT": "http://127.0.0.1:9000",
        "ROLLOUT_STORAGE_CLUSTER_ENDPOINT": "http://rollout-operator-minio.rollout-system.svc:9000",
        "ROLLOUT_STORAGE_CREDENTIALS_SECRET": "rollout-operator-storage",
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "ROLLOUT_STORAGE_REGION": "us-east-1",
    }
    # The port-forward does not outlive the script.
    forward = int((base / "forward.pid").read_text())
    assert wait_gone(forward), f"the port-forward (pid {forward}) is still running"
    assert "s3://rollout/jobs/hello-offline/result.json" in result.stdout
    assert "./jobs/hello-offline/" in result.stdout
    assert SECRET_KEY not in result.stdout + result.stderr


def test_quickstart_stops_with_a_message_when_a_tool_is_missing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("docker", "kind", "kubectl", "helm", "curl"):  # no `rollout`
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == (
        "quickstart: cannot start; missing:\n"
        "  - rollout: the CLI that publishes and runs the job: pip install . in this repository\n"
    )


def test_every_missing_prerequisite_is_listed_before_anything_starts(tmp_path: Path) -> None:
    """docker is there but not running, kind, helm and the CLI are missing: all four are said
    at once, each with what it is for (the script once stopped at the first)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Only what the script's first lines need, and a docker whose daemon does not answer.
    for tool in ("dirname", "kubectl", "curl"):
        (bin_dir / tool).symlink_to("/usr/bin/dirname" if tool == "dirname" else "/bin/true")
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/bash\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    docker.chmod(0o755)
    log = tmp_path / "calls.log"
    result = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path), "QS_LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[0] == "quickstart: cannot start; missing:"
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  - kind",
        "  - helm",
        "  - rollout",
        "  - a running docker",
    ]
    assert "pip install . in this repository" in result.stderr
    assert "https://helm.sh/docs/intro/install/" in result.stderr
    assert result.stdout == ""  # no step started
