"""What the kubelet does to a Pod's strings, and a test kubelet that runs a trial Pod for real.

`expand()` is the kubelet's expansion of `$(NAME)` and `$$` in a container's `command`, `args`
and `env[].value`, as the Kubernetes API reference describes it ("Container": "Variable
references $(VAR_NAME) are expanded using the container's environment. If a variable cannot be
resolved, the reference in the input string will be unchanged. Double $$ are reduced to a single
$, which allows for escaping the $(VAR_NAME) syntax") and as the kubelet implements it, byte by
byte: `$$` is one `$`; `$(NAME)` is NAME's value when NAME is known, else kept as written; an
unclosed `$(` and a `$` before any other character are kept. Env values are expanded in the order
they are declared, each against the variables declared before it; command and args against the
whole environment.

`PodRunner` plays the kubelet and the container runtime for one trial Pod on this machine, from
the Pod as the API server stores it (strings expanded as above, so that a Pod which relies on the
kubelet leaving `$` alone fails here as it fails on a cluster):

- the `environment` container's command runs as PID 1 of a fake container (see fakecontainer.py),
  with the shim's control directory and /logs bind-mounted where the Pod mounts them;
- the `runner` container runs `python -m rollout_runner.main` with the container's args and env
  as a process on this machine. It has no mount namespace of its own, so the volumes it mounts
  are host directories and every argument or env value that names a path under one of its mount
  paths is rewritten to the same path under that volume's host directory; the container's
  `terminationMessagePath` becomes a host file, passed as `--termination-log`;
- `valueFrom.secretKeyRef` and secret volumes are read from the Secrets in the API.

The runner's exit code and termination message are then reported through the Pod's status, as
the kubelet reports them.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakecontainer import FakeContainer, fake_container
from kubeharness.kube import Kube
from kubeharness.pod_status import running, terminated
from kubeharness.resources import Body

ENVIRONMENT = "environment"
RUNNER = "runner"


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` after the kubelet's `$(NAME)` / `$$` expansion against `variables`."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        char = text[i]
        if char != "$" or i + 1 == n:
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":  # an escaped operator
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close == -1:  # an unclosed reference is kept as written
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : close]
                out.append(variables.get(name, f"$({name})"))
                i = close + 1
        else:  # a `$` that starts no expression is kept, with the character after it
            out.append("$" + following)
            i += 2
    return "".join(out)


SecretLookup = Mapping[tuple[str, str], str]
"""Secret data as the kubelet reads it: (secret name, key) -> decoded value."""


def container_env(
    container: Mapping[str, Any], secrets: SecretLookup | None = None
) -> dict[str, str]:
    """The container's environment as the kubelet builds it, in declaration order."""
    secrets = secrets or {}
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        name = variable["name"]
        if variable.get("value"):
            env[name] = expand(variable["value"], env)
            continue
        source = variable.get("valueFrom") or {}
        ref = source.get("secretKeyRef")
        if ref is not None:
            key = (ref["name"], ref["key"])
            if key not in secrets:
                if ref.get("optional"):
                    continue
                raise LookupError(f"secret {ref['name']!r} has no key {ref['key']!r}")
            env[name] = secrets[key]
        elif not source:
            env[name] = ""
        else:
            raise NotImplementedError(f"env var {name}: only secretKeyRef sources are played")
    return env


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The container's command and args after expansion (the image's entrypoint not included)."""
    return [
        expand(part, env) for part in [*container.get("command", []), *container.get("args", [])]
    ]


def containers_of(pod: Mapping[str, Any]) -> dict[str, Body]:
    return {c["name"]: c for c in pod["spec"]["containers"]}


@dataclass
class PodOutcome:
    exit_code: int
    """The runner's exit code."""
    message: str
    """The runner's termination message."""
    stderr: str
    """What the runner logged."""
    environment_exit_code: int | None = None
    """The environment container's exit code; None while it still runs (preserveEnv)."""


class PodRunner:
    """Runs one trial Pod (environment + runner) on this machine; see the module docstring."""

    def __init__(self, pod: Body, secrets: SecretLookup, workdir: Path) -> None:
        self.pod = pod
        self.secrets = secrets
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    def run(self, timeout: float = 120.0) -> PodOutcome:
        containers = containers_of(self.pod)
        runner = containers[RUNNER]
        if ENVIRONMENT not in containers:  # a Pod of the runner alone (the oracle's data rows)
            return self._run_runner(runner, None, timeout)
        environment = containers[ENVIRONMENT]
        env_argv = container_argv(environment, container_env(environment, self.secrets))
        base = self.workdir / "environment"
        base.mkdir()
        with fake_container(base, command=env_argv) as container:
            outcome = self._run_runner(runner, container, timeout)
            try:  # the runner tells the shim to exit, unless the trial preserves its environment
                outcome.environment_exit_code = container.wait_exit(10)
            except subprocess.TimeoutExpired:
                outcome.environment_exit_code = None
        return outcome

    def _run_runner(
        self, runner: Mapping[str, Any], container: FakeContainer | None, timeout: float
    ) -> PodOutcome:
        mounts = self._runner_mounts(runner, container)
        env = {
            name: remap(value, mounts)
            for name, value in container_env(runner, self.secrets).items()
        }
        args = [remap(arg, mounts) for arg in container_argv(runner, env)]
        termination_log = self.workdir / "termination-log"
        termination_log.touch()
        process_env = {"PATH": os.environ["PATH"], **env}
        done = subprocess.run(
            [sys.executable, "-m", "rollout_runner.main", *args,
             "--termination-log", str(termination_log)],
            env=process_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )  # fmt: skip
        return PodOutcome(
            exit_code=done.returncode,
            message=termination_log.read_text(),
            stderr=done.stderr,
        )

    def _runner_mounts(
        self, runner: Mapping[str, Any], container: FakeContainer | None
    ) -> dict[str, Path]:
        """Mount path -> host directory for the runner's volumes (without an environment
        container, each its own directory)."""
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        environment_mounts = (
            {
                m["name"]: m["mountPath"]
                for m in containers_of(self.pod)[ENVIRONMENT]["volumeMounts"]
            }
            if container is not None
            else {}
        )
        shared = (  # the fake container binds these two at the environment's mount paths
            {"/rollout": container.control_dir, "/logs": container.logs_dir}
            if container is not None
            else {}
        )
        mounts: dict[str, Path] = {}
        for mount in runner.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            path = mount["mountPath"]
            if mount["name"] in environment_mounts:
                mounts[path] = shared[environment_mounts[mount["name"]]]
            elif "secret" in volume:
                mounts[path] = self._secret_volume(mount["name"], volume["secret"])
            else:
                host = self.workdir / "volumes" / mount["name"]
                host.mkdir(parents=True, exist_ok=True)
                mounts[path] = host
        return mounts

    def _secret_volume(self, name: str, source: Mapping[str, Any]) -> Path:
        host = self.workdir / "volumes" / name
        host.mkdir(parents=True)
        for (secret, key), value in self.secrets.items():
            if secret == source["secretName"]:
                path = host / key
                path.write_text(value)
                path.chmod(source.get("defaultMode", 0o644))
        return host


def remap(value: str, mounts: Mapping[str, Path]) -> str:
    """A path under one of the mount paths, as the same path under the mount's host directory."""
    for mount_path in sorted(mounts, key=len, reverse=True):
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(mounts[mount_path]) + value[len(mount_path.rstrip("/")) :]
    return value


async def secrets_of(kube: Kube, namespace: str) -> dict[tuple[str, str], str]:
    """Every Secret's data in a namespace, decoded, as the kubelet would read it."""
    found: dict[tuple[str, str], str] = {}
    for secret in await kube.list("v1/secrets", namespace):
        name = secret["metadata"]["name"]
        for key, value in (secret.get("data") or {}).items():
            found[name, key] = base64.b64decode(value).decode()
        for key, value in (secret.get("stringData") or {}).items():
            found[name, key] = value
    return found


async def run_trial_pod(kube: Kube, name: str, namespace: str, workdir: Path) -> PodOutcome:
    """Run a trial Pod for real and report its end through the Pod's status, as a kubelet."""
    pod = await kube.get("v1/pods", name, namespace)
    alone = ENVIRONMENT not in containers_of(pod)  # the runner alone (the oracle's data rows)
    started = {RUNNER: running()} if alone else {ENVIRONMENT: running(), RUNNER: running()}
    await kube.set_pod_status(name, namespace, containers=started)
    runner = PodRunner(pod, await secrets_of(kube, namespace), workdir)
    outcome = await asyncio.to_thread(runner.run)
    code = outcome.environment_exit_code
    ended = {RUNNER: terminated(outcome.exit_code, message=outcome.message)}
    if not alone:
        ended[ENVIRONMENT] = running() if code is None else terminated(code)
    await kube.set_pod_status(name, namespace, containers=ended)
    return outcome
