"""What can be checked of the images and the kind cluster without Docker: the operator's
Dockerfile copies only what exists and what its ignore file lets through, runs
`rollout-operator` as user 65532 on a slim Python 3.11; the runner's copies what exists and
slims botocore before its check; kind-config.yaml has a control plane, two workers and containerd
reading the registry settings the quickstart writes."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import yaml

from paths import REPO

DOCKERFILE = REPO / "operator" / "Dockerfile"
DOCKERIGNORE = REPO / "operator" / "Dockerfile.dockerignore"
RUNNER_DOCKERFILE = REPO / "runner-image" / "Dockerfile"
RUNNER_DOCKERIGNORE = REPO / "runner-image" / "Dockerfile.dockerignore"
KIND_CONFIG = REPO / "kind-config.yaml"
QUICKSTART = REPO / "examples" / "quickstart.sh"


def instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def stages(dockerfile: Path = DOCKERFILE) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions(dockerfile):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, rest))
    return result


def sent_to_docker(path: str, ignore: Path = DOCKERIGNORE) -> bool:
    """Whether the ignore file lets `path` (relative to the repository) into the build context:
    the last matching pattern wins, `!` re-includes, a directory pattern covers what is in it."""
    included = True
    for pattern in ignore.read_text().splitlines():
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or fnmatch.fnmatch(path, pattern):
            included = negate
    return included


def test_two_stages_on_slim_python_311() -> None:
    build, final = stages()
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    assert ("ARG", "PYTHON_IMAGE=python:3.11-slim-bookworm") in instructions()
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    # Nothing from the source tree reaches the final stage but the built virtualenv.
    copies = [rest for keyword, rest in final if keyword == "COPY"]
    assert copies == ["--from=build /opt/rollout /opt/rollout"]


def test_final_stage_runs_rollout_operator_as_65532() -> None:
    final = stages()[-1]
    assert ("USER", "65532:65532") in final
    assert final[-1] == ("ENTRYPOINT", '["rollout-operator"]')
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "rollout-operator" in pyproject["project"]["scripts"]
    runs = " ".join(rest for keyword, rest in final if keyword == "RUN")
    assert "--uid 65532" in runs
    assert "--gid 65532" in runs
    # No compiler or package manager work in the final stage.
    assert "apt-get" not in DOCKERFILE.read_text()


def test_every_copied_path_exists_and_reaches_the_build() -> None:
    build = stages()[0]
    sources = []
    for keyword, rest in build:
        if keyword == "COPY":
            *paths, _destination = rest.split()
            sources.extend(paths)
    assert sources == ["pyproject.toml", "README.md", "operator/src", "runner-image/src"]
    for source in sources:
        assert (REPO / source).exists(), source
        assert sent_to_docker(source), f"{source} is excluded by {DOCKERIGNORE.name}"
    # The wheel's packages (pyproject) are inside what is copied.
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    for package in pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]:
        assert any(package.startswith(source) for source in sources), package


def test_ignore_file_keeps_the_rest_out() -> None:
    for path in (".venv/bin/python", "tests/unit/test_chart.py", "charts/rollout-operator"):
        assert not sent_to_docker(path), path
    assert not sent_to_docker("operator/src/rollout/__pycache__/x.pyc")
    assert sent_to_docker("operator/src/rollout/api/crd.py")
    assert sent_to_docker("operator/src/rollout/api/wire/shim.sh")


def test_the_runner_image_copies_what_exists_and_slims_botocore_before_its_check() -> None:
    build, final = stages(RUNNER_DOCKERFILE)
    sources = []
    for keyword, rest in build:
        if keyword == "COPY":
            *paths, _destination = rest.split()
            sources.extend(paths)
    assert "runner-image/slim_botocore.py" in sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert sent_to_docker(source, RUNNER_DOCKERIGNORE), f"{source} is excluded"
    assert not sent_to_docker("tests/unit/test_packaging.py", RUNNER_DOCKERIGNORE)
    # Slimmed after the install (which brings botocore), before the runner's own check.
    [install] = [rest for keyword, rest in build if keyword == "RUN" and "pip install" in rest]
    steps = [step.strip() for step in install.split("&&")]
    slim = steps.index("/opt/rollout/bin/python runner-image/slim_botocore.py")
    assert steps.index("/opt/rollout/bin/pip install .") < slim
    assert slim < steps.index("/opt/rollout/bin/rollout-runner --help > /dev/null")
    # The final stage takes the slimmed virtualenv.
    assert ("COPY", "--from=build /opt/rollout /opt/rollout") in final


def test_kind_cluster_has_a_control_plane_two_workers_and_the_registry_patch() -> None:
    config = yaml.safe_load(KIND_CONFIG.read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert [node["role"] for node in config["nodes"]] == ["control-plane", "worker", "worker"]
    (patch,) = config["containerdConfigPatches"]
    assert '[plugins."io.containerd.grpc.v1.cri".registry]' in patch
    assert 'config_path = "/etc/containerd/certs.d"' in patch
    # The quickstart writes its hosts.toml where containerd now looks.
    script = QUICKSTART.read_text()
    assert '"/etc/containerd/certs.d/${REGISTRY}/hosts.toml"' in script
    assert "--config kind-config.yaml" in script
