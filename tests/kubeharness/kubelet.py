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
the kubelet reports them. A run can be stopped as the kubelet stops a deleted Pod: SIGTERM to
the runner and to the environment's PID 1 (which, as the shim has no handler, ignores it, as a
container's PID 1 does), SIGKILL after the grace period.

`run_trial_pod` runs one Pod to its end; `TrialPodKubelet` runs every trial Pod of a namespace
in the background of a test, and holds a deleted one (a finalizer of its own) until its runner
has stopped and its end is reported, as a kubelet keeps a Terminating Pod until its containers
are gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakecontainer import FakeContainer, fake_container
from kubeharness.kube import Kube
from kubeharness.pod_status import running, terminated
from kubeharness.resources import PODS, Body

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

    def run(
        self,
        timeout: float = 120.0,
        *,
        stop: threading.Event | None = None,
        grace: float = 30.0,
    ) -> PodOutcome:
        """Run the Pod until its runner exits. Once `stop` is set (the Pod is being deleted),
        every container gets SIGTERM, as the kubelet sends it, and the runner `grace` seconds
        before SIGKILL (the environment's PID 1, the shim, ignores SIGTERM as a container's
        PID 1 without a handler does)."""
        containers = containers_of(self.pod)
        runner = containers[RUNNER]
        if ENVIRONMENT not in containers:  # a Pod of the runner alone (the oracle's data rows)
            return self._run_runner(runner, None, timeout, stop, grace)
        environment = containers[ENVIRONMENT]
        env_argv = container_argv(environment, container_env(environment, self.secrets))
        base = self.workdir / "environment"
        base.mkdir()
        with fake_container(base, command=env_argv) as container:
            outcome = self._run_runner(runner, container, timeout, stop, grace)
            try:  # the runner tells the shim to exit, unless the trial preserves its environment
                outcome.environment_exit_code = container.wait_exit(10)
            except subprocess.TimeoutExpired:
                outcome.environment_exit_code = None
        return outcome

    def _run_runner(
        self,
        runner: Mapping[str, Any],
        container: FakeContainer | None,
        timeout: float,
        stop: threading.Event | None = None,
        grace: float = 30.0,
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
        stderr_path = self.workdir / "runner.stderr"
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "rollout_runner.main", *args,
                 "--termination-log", str(termination_log)],
                env=process_env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                text=True,
            )  # fmt: skip
            code = _wait(process, container, timeout, stop or threading.Event(), grace)
        return PodOutcome(
            exit_code=code,
            message=termination_log.read_text(),
            stderr=stderr_path.read_text(errors="replace"),
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


def _wait(
    process: subprocess.Popen[str],
    container: FakeContainer | None,
    timeout: float,
    stop: threading.Event,
    grace: float,
) -> int:
    """The runner's exit code, once it exits: by itself, or after SIGTERM when `stop` is set
    (SIGKILL `grace` seconds later); `timeout` bounds the whole run (then: SIGKILL, an error)."""
    deadline = time.monotonic() + timeout
    kill_at: float | None = None
    while (code := process.poll()) is None:
        now = time.monotonic()
        if kill_at is None and stop.is_set():
            process.send_signal(signal.SIGTERM)
            if container is not None and (init := container.init_host_pid()) is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init, signal.SIGTERM)
            kill_at = now + grace
        if (kill_at is not None and now >= kill_at) or now >= deadline:
            process.kill()
            process.wait()
            if now >= deadline:
                raise subprocess.TimeoutExpired(process.args, timeout)
            break
        stop.wait(0.05) if kill_at is None else time.sleep(0.05)
    return process.returncode if code is None else code


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
    pod = await kube.get(PODS, name, namespace)
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


KUBELET_FINALIZER = "kubeharness.test/kubelet"
"""Held on each Pod `TrialPodKubelet` runs: a deleted Pod stays (Terminating) until its runner
has ended and the end is reported, as a real kubelet keeps it until its containers are gone."""


class TrialPodKubelet:
    """The kubelet of a namespace's trial Pods, running each for real (`PodRunner`: the shim in
    a fake container, the runner as a process), in the background of a test.

    Each trial Pod that appears is taken (the Pod held by `KUBELET_FINALIZER`), reported
    running, run, and its end reported through its status. A Pod deleted while it runs is
    stopped as the kubelet stops it: SIGTERM to its containers, `grace` seconds, SIGKILL; its
    end is reported and only then is it let go, `linger` seconds later (a kubelet still
    unmounting a Pod's volumes keeps it Terminating with its containers ended). `outcomes` maps
    Pod names to their `PodOutcome` (a later Pod of the same name, a new UID, is run too, as a
    kubelet runs it: its outcome replaces the earlier's); `workdir/<pod>` keeps each Pod's files
    (the runner's stderr among them; `<pod>.<uid>` for a later Pod of the name).
    Use as `async with TrialPodKubelet(kube, kube.namespace, tmp_path / "kubelet") as kubelet:`.
    """

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        workdir: Path,
        *,
        grace: float = 30.0,
        linger: float = 0.0,
        poll: float = 0.1,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.workdir = workdir
        self.grace = grace
        self.linger = linger
        self.poll = poll
        self.outcomes: dict[str, PodOutcome] = {}
        self._runs: dict[str, tuple[str, asyncio.Task[None], threading.Event]] = {}
        """By Pod UID: the Pod's name, its run, and what stops it."""
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    async def __aenter__(self) -> TrialPodKubelet:
        self._loop_task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._loop_task is not None
        self._closing.set()
        self._loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop_task
        for _name, _task, stop in self._runs.values():
            stop.set()
        failures = []
        for uid, (name, task, _stop) in self._runs.items():
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception as err:  # reported below, once every Pod is let go
                    failures.append(f"{name}: {type(err).__name__}: {err}")
            await self._release(name, uid)
        if failures and exc[0] is None:
            raise AssertionError("the kubelet failed to run Pods:\n" + "\n".join(failures))

    async def _watch(self) -> None:
        while True:
            await self._step()
            await asyncio.sleep(self.poll)

    async def _step(self) -> None:
        pods = await self.kube.list(PODS, self.namespace, labels="rollout.dev/trial")
        # A kubelet knows Pods by UID: one made again under a name is another Pod.
        present = {pod["metadata"]["uid"]: pod for pod in pods}
        for uid, pod in present.items():
            name = pod["metadata"]["name"]
            deleting = bool(pod["metadata"].get("deletionTimestamp"))
            if uid not in self._runs:
                if not deleting and await self._hold(name, uid):
                    stop = threading.Event()
                    task = asyncio.create_task(self._run(name, uid, stop))
                    self._runs[uid] = (name, task, stop)
                elif deleting:
                    await self._release(name, uid)
                continue
            _name, task, stop = self._runs[uid]
            if deleting:
                if task.done():
                    await self._release(name, uid)
                else:
                    stop.set()
        for uid, (_name, _task, stop) in self._runs.items():
            if uid not in present:
                stop.set()  # gone without the kubelet's consent (a force deletion)

    async def _hold(self, name: str, uid: str) -> bool:
        try:
            await self.kube.patch(
                PODS,
                name,
                # The UID as a precondition: the Pod seen, not a later one of its name.
                {"metadata": {"uid": uid, "finalizers": [KUBELET_FINALIZER]}},
                self.namespace,
            )
        except Exception:
            pod = await self.kube.find(PODS, name, self.namespace)
            if pod is None or pod["metadata"]["uid"] != uid:
                return False  # gone, or another Pod of its name already
            raise
        return True

    async def _release(self, name: str, uid: str) -> None:
        pod = await self.kube.find(PODS, name, self.namespace)
        if pod is None or pod["metadata"]["uid"] != uid:
            return
        if KUBELET_FINALIZER not in (pod["metadata"].get("finalizers") or []):
            return
        rest = [f for f in pod["metadata"]["finalizers"] if f != KUBELET_FINALIZER]
        with contextlib.suppress(Exception):  # gone meanwhile
            await self.kube.patch(
                PODS, name, {"metadata": {"uid": uid, "finalizers": rest or None}}, self.namespace
            )

    async def _run(self, name: str, uid: str, stop: threading.Event) -> None:
        pod = await self.kube.get(PODS, name, self.namespace)
        workdir = self.workdir / name
        if workdir.exists():  # an earlier Pod of this name ran there
            workdir = self.workdir / f"{name}.{uid}"
        alone = ENVIRONMENT not in containers_of(pod)
        started = {RUNNER: running()} if alone else {ENVIRONMENT: running(), RUNNER: running()}
        await self.kube.set_pod_status(name, self.namespace, containers=started)
        runner = PodRunner(pod, await secrets_of(self.kube, self.namespace), workdir)
        outcome = await asyncio.to_thread(runner.run, stop=stop, grace=self.grace)
        self.outcomes[name] = outcome
        code = outcome.environment_exit_code
        ended = {RUNNER: terminated(outcome.exit_code, message=outcome.message or None)}
        if not alone:
            ended[ENVIRONMENT] = running() if code is None else terminated(code)
        current = await self.kube.find(PODS, name, self.namespace)
        if current is not None and current["metadata"]["uid"] == uid:
            await self.kube.set_pod_status(name, self.namespace, containers=ended)
        if stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self.linger)
            await self._release(name, uid)
