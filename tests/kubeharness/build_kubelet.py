"""A test kubelet for image build Pods (`rollout.controller.build_pod`): it runs what the Pod says.

`BuildPodRunner` plays the kubelet and the container runtime for a build Pod as the API server
stores it, on this machine, with no container runtime:

- each volume is a host directory under the work directory: an emptyDir an empty directory
  (mode 0777, as the kubelet makes it), a Secret volume the Secret's keys from the API written
  as files (its `items` and `defaultMode`, and an item's `mode`, honoured);
- each container's env values and command/args are expanded as the kubelet expands them
  (`kubelet.expand`), and every value that names a path under one of the container's mount
  paths is rewritten to the same path under the volume's host directory (`kubelet.remap`): the
  processes have no mount namespace of their own;
- a container's `terminationMessagePath` is a host file; the runner's commands (the Pod's
  `python`, which is this interpreter) are given it as `--termination-log`, and the kubelet's
  reading of it (its last 4096 bytes) is the container's termination message;
- init containers run one after the other, each to its end; a failed one ends the Pod, as the
  kubelet does with `restartPolicy: Never`; then the containers run at once, as processes on
  this machine (the `build` container's `sh -c SCRIPT` with the host's `sh`, and whatever builder
  its script calls from the host's PATH: Debian's `buildah` here; BuildKit cannot run here).

Each container is a process group of its own: when its main process ends, what it left running
is killed, as the runtime kills a container's remaining processes; stopping a container sends
SIGTERM, then SIGKILL after the grace period.

`run_build_pod` does the same for a Pod in the API and reports it through the Pod's status, as
the kubelet does: the init container running, then terminated; the containers running, each
terminated as it ends, with its exit code and termination message. It also does the kubelet's
two other jobs: at the Pod's `activeDeadlineSeconds` it stops every container (phase Failed,
reason DeadlineExceeded), and when the Pod is deleted it stops them within the Pod's grace
period. Nothing of the Pod's real commands is shortcut: a wrong Pod fails here as on a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeharness.kube import Kube
from kubeharness.kubelet import SecretLookup, container_argv, container_env, remap, secrets_of
from kubeharness.pod_status import running, terminated, waiting
from kubeharness.resources import PODS, Body

MAX_MESSAGE_BYTES = 4096
"""The kubelet keeps the last 4096 bytes of a termination message file."""
DEFAULT_GRACE_SEC = 30.0
EMPTY_DIR_MODE = 0o777
SECRET_DEFAULT_MODE = 0o644
POLL_SEC = 0.1
"""How often the kubelet looks at its processes (and `run_build_pod` at the Pod in the API)."""
FAILING_BUILDERS = ("buildah", "buildctl-daemonless.sh")
"""The builders' commands that `run_build_pod(fail_build=...)` puts in front of the host's."""


@dataclass
class ContainerOutcome:
    """How a container ended, as the kubelet reports it."""

    name: str
    exit_code: int
    message: str
    """Its termination message (the last 4096 bytes of its terminationMessagePath)."""
    output: str
    """What it wrote to stdout and stderr (`kubectl logs`)."""


class ContainerProcess:
    """One container as a process group on this machine."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        termination_log: Path,
        output: Path,
    ) -> None:
        self.name = name
        self.termination_log = termination_log
        self.output = output
        self._group_killed = False
        with output.open("wb") as log:
            self.popen = subprocess.Popen(
                list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def poll(self) -> int | None:
        """Its exit code once it has ended (a signal's as 128 + the signal), else None."""
        code = self.popen.poll()
        if code is None:
            return None
        if not self._group_killed:  # the container is gone: so is all it left running
            self._signal_group(signal.SIGKILL)
            self._group_killed = True
        return 128 - code if code < 0 else code

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to end (subprocess.TimeoutExpired after `timeout` seconds)."""
        self.popen.wait(timeout)
        code = self.poll()
        assert code is not None
        return code

    def stop(self, grace: float) -> int:
        """SIGTERM to the container's processes, SIGKILL after `grace` seconds; its exit code."""
        if self.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
        return self.wait()

    def outcome(self) -> ContainerOutcome:
        code = self.poll()
        if code is None:
            raise RuntimeError(f"container {self.name} is still running")
        return ContainerOutcome(
            name=self.name,
            exit_code=code,
            message=termination_message(self.termination_log),
            output=self.output.read_text(errors="replace"),
        )

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


def termination_message(path: Path) -> str:
    """The message the kubelet reads from a termination message file: its last 4096 bytes."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ""
    return data[-MAX_MESSAGE_BYTES:].decode(errors="replace")


class BuildPodRunner:
    """Runs a build Pod's containers on this machine; see the module docstring.

    `path` is the PATH the containers' processes get (default: the host's): the builder is
    whatever it finds there.
    """

    def __init__(
        self, pod: Body, secrets: SecretLookup, workdir: Path, *, path: str | None = None
    ) -> None:
        self.pod = pod
        self.secrets = secrets
        self.workdir = workdir
        self.path = path if path is not None else os.environ["PATH"]
        workdir.mkdir(parents=True, exist_ok=True)
        self.volumes = {v["name"]: self._volume(v) for v in self.spec.get("volumes") or []}

    @property
    def spec(self) -> Body:
        spec: Body = self.pod["spec"]
        return spec

    @property
    def init_containers(self) -> list[Body]:
        return list(self.spec.get("initContainers") or [])

    @property
    def containers(self) -> list[Body]:
        return list(self.spec["containers"])

    @property
    def grace_sec(self) -> float:
        """The Pod's terminationGracePeriodSeconds."""
        return float(self.spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SEC))

    def run(self, timeout: float = 600.0) -> dict[str, ContainerOutcome]:
        """Run the Pod to its end: the init containers in order (up to the first that fails),
        then the containers at once; any still running after `timeout` seconds are stopped."""
        deadline = time.monotonic() + timeout
        outcomes: dict[str, ContainerOutcome] = {}
        for container in self.init_containers:
            outcome = self._run_to_end([self.start(container)], deadline)[0]
            outcomes[outcome.name] = outcome
            if outcome.exit_code != 0:
                return outcomes
        started = [self.start(container) for container in self.containers]
        outcomes.update((o.name, o) for o in self._run_to_end(started, deadline))
        return outcomes

    def _run_to_end(
        self, processes: Sequence[ContainerProcess], deadline: float
    ) -> list[ContainerOutcome]:
        for process in processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.stop(self.grace_sec)
        return [process.outcome() for process in processes]

    def start(self, container: Mapping[str, Any]) -> ContainerProcess:
        """Start a container's process (see the module docstring for how it is placed)."""
        name = container["name"]
        if not container.get("command"):
            raise NotImplementedError(f"container {name}: the test kubelet needs a command")
        mounts = self.mounts(container)
        home = self._directory("homes", name)
        declared = container_env(container, self.secrets)
        env = {key: remap(value, mounts) for key, value in declared.items()}
        argv = [remap(arg, mounts) for arg in container_argv(container, env)]
        termination_log = self._directory("termination", name) / "message"
        termination_log.touch()
        if argv[0] == "python":  # the runner image's commands, which take their log's path
            argv = [sys.executable, *argv[1:], "--termination-log", str(termination_log)]
        if container.get("workingDir"):
            home = Path(remap(container["workingDir"], mounts))
        process_env = {"HOME": str(home), **env, "PATH": self.path}
        output = self._directory("logs") / f"{name}.log"
        return ContainerProcess(name, argv, process_env, home, termination_log, output)

    def mounts(self, container: Mapping[str, Any]) -> dict[str, Path]:
        """The container's mount paths and the host directories of their volumes."""
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            if mount.get("subPath") or mount.get("subPathExpr"):
                raise NotImplementedError(f"{container['name']}: subPath mounts are not played")
            mounts[mount["mountPath"]] = self.volumes[mount["name"]]
        return mounts

    def _volume(self, volume: Mapping[str, Any]) -> Path:
        host = self._directory("volumes", volume["name"])
        if "emptyDir" in volume:
            host.chmod(EMPTY_DIR_MODE)
        elif "secret" in volume:
            self._write_secret(host, volume["secret"])
        else:
            raise NotImplementedError(f"volume {volume['name']}: only emptyDir and secret")
        return host

    def _write_secret(self, host: Path, source: Mapping[str, Any]) -> None:
        name = source["secretName"]
        data = {key: value for (secret, key), value in self.secrets.items() if secret == name}
        default_mode = source.get("defaultMode", SECRET_DEFAULT_MODE)
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            if item["key"] not in data:
                if source.get("optional"):
                    continue
                raise LookupError(f"secret {name!r} has no key {item['key']!r}")
            path = host / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[item["key"]])
            path.chmod(item.get("mode", default_mode))

    def _directory(self, *parts: str) -> Path:
        path = self.workdir.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        return path


def failing_builders(directory: Path, message: str) -> Path:
    """A directory of builder commands that print `message` and exit 1: in front of the host's
    PATH, the Pod's real script runs and its builder fails."""
    directory.mkdir(parents=True, exist_ok=True)
    for command in FAILING_BUILDERS:
        path = directory / command
        path.write_text(f"#!/bin/sh\necho {shlex.quote(message)} >&2\nexit 1\n")
        path.chmod(0o755)
    return directory


async def run_build_pod(
    kube: Kube,
    name: str,
    namespace: str,
    workdir: Path,
    *,
    fail_build: str | None = None,
) -> dict[str, ContainerOutcome]:
    """Run the build Pod `name` for real and report it through its status, as the kubelet does
    (see the module docstring); the containers' outcomes, by name.

    With `fail_build`, the builder's commands print it and fail (the Pod's own script still
    runs): a failed build wherever no builder can run.
    """
    pod = await kube.get(PODS, name, namespace)
    path = os.environ["PATH"]
    if fail_build is not None:
        path = f"{failing_builders(workdir / 'failing-builders', fail_build)}{os.pathsep}{path}"
    runner = BuildPodRunner(pod, await secrets_of(kube, namespace), workdir / "pod", path=path)
    return await PodKubelet(kube, runner, name, namespace).run()


class PodKubelet:
    """Runs a `BuildPodRunner`'s Pod and writes what happens to the Pod's status."""

    def __init__(self, kube: Kube, runner: BuildPodRunner, name: str, namespace: str) -> None:
        self.kube = kube
        self.runner = runner
        self.name = name
        self.namespace = namespace
        self.outcomes: dict[str, ContainerOutcome] = {}
        deadline = runner.spec.get("activeDeadlineSeconds")
        self.deadline = None if deadline is None else time.monotonic() + float(deadline)

    async def run(self) -> dict[str, ContainerOutcome]:
        initializing = {c["name"]: waiting("PodInitializing") for c in self.runner.containers}
        for container in self.runner.init_containers:
            await self._set(init={container["name"]: running()}, containers=initializing)
            process = await asyncio.to_thread(self.runner.start, container)
            if not await self._watch([process], init=True):
                return self.outcomes
            if self.outcomes[container["name"]].exit_code != 0:
                return self.outcomes  # the last write (the Pod Failed) said so
        processes = [await asyncio.to_thread(self.runner.start, c) for c in self.runner.containers]
        await self._set(containers={p.name: running() for p in processes})
        await self._watch(processes, init=False)
        return self.outcomes

    async def _watch(self, processes: Sequence[ContainerProcess], *, init: bool) -> bool:
        """Report each process as it ends; False when the Pod was deleted or ran past its
        deadline (its processes are stopped then)."""
        left = list(processes)
        while left:
            for process in [p for p in left if p.poll() is not None]:
                left.remove(process)
                await self._report_end(process, init=init)
            if not left:
                break
            if await self._deleted():
                await asyncio.to_thread(self._stop, left)
                return False
            if self.deadline is not None and time.monotonic() >= self.deadline:
                await self._deadline_exceeded(left, init=init)
                return False
            await asyncio.sleep(POLL_SEC)
        return True

    async def _report_end(self, process: ContainerProcess, *, init: bool) -> None:
        outcome = process.outcome()
        self.outcomes[outcome.name] = outcome
        state = {outcome.name: terminated(outcome.exit_code, message=outcome.message or None)}
        if init:
            await self._set(init=state)
        else:
            await self._set(containers=state)

    async def _deleted(self) -> bool:
        pod = await self.kube.find(PODS, self.name, self.namespace)
        return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

    def _stop(self, processes: Sequence[ContainerProcess]) -> None:
        for process in processes:
            process.stop(self.runner.grace_sec)
            outcome = process.outcome()
            self.outcomes[outcome.name] = outcome

    async def _deadline_exceeded(
        self, processes: Sequence[ContainerProcess], *, init: bool
    ) -> None:
        await asyncio.to_thread(self._stop, processes)
        ended = {p.name: terminated(self.outcomes[p.name].exit_code) for p in processes}
        await self._set(
            init=ended if init else None,
            containers=None if init else ended,
            phase="Failed",
            reason="DeadlineExceeded",
            message="Pod was active on the node longer than the specified deadline",
        )

    async def _set(
        self,
        *,
        init: Mapping[str, Body] | None = None,
        containers: Mapping[str, Body] | None = None,
        phase: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        try:
            await self.kube.set_pod_status(
                self.name,
                self.namespace,
                containers=containers,
                init_containers=init,
                phase=phase,
                reason=reason,
                message=message,
            )
        except Exception:
            # A Pod deleted meanwhile (the operator removes a build Pod once it has the report)
            # takes no more status; the kubelet then stops what still runs (`_watch`).
            if not await self._deleted():
                raise
