"""Built-in agents run for real with stand-in programs: the kit of the test_builtin_* modules.

A built-in agent's install and execute scripts (`rollout.api.catalogue`) run in a fake container
(`fakecontainer`, the product's host sandbox) through the real runner, as a trial Pod runs them.
No model provider, registry or network is reached: `StandIns` are programs under the agent's
command name (and npm, pip, curl, go, ...) in the container's own /usr/local/bin, first on PATH.
Each records its arguments, environment, working directory (and stdin when asked) and then does
what the test says (print, run a bit of shell, exit with a status).

The agent goes the way job.yaml's does: `JobAgent` resolves the built-in (its pinned version,
the keys it needs as `${VAR}`s), each `${VAR}` is taken from the test's `environ`, and the values
reach the runner the way the operator gives them (a Secret-backed env var in the spec, its value
in the runner's environment: `rollout_runner.spec.resolve_agent_env`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from runner_kit import make_spec, publish_task, run_in, trial_objects

from fakecontainer import fake_container, unavailable_reason
from rollout.api.envrefs import env_references, substitute
from rollout.api.job import JobAgent
from rollout.api.wire.spec import agent_env_var_name
from rollout.storage import ObjectStore
from rollout_runner.spec import resolve_agent_env
from rollout_runner.trial import TrialReport

__all__ = ["BuiltinRun", "Call", "StandIns", "requires_fake_container", "run_builtin"]

TASK = "hello-offline"
INSTRUCTION = 'Create the file `/app/hello.txt` containing "Hello, world!".'
"""The instruction of the trial's task (tests/data/tasks/hello-offline)."""
CALLS_FILE = ".calls.jsonl"
BEHAVIOUR_DIR = ".behaviour"
LATER_DIR = "/usr/local/bin/.later"
"""Where stand-ins wait that a package manager's stand-in installs (`installed=False`)."""

# The stand-in itself: run by the host's python (the container has the host's /usr).
_STAND_IN = r"""
import fcntl, json, os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
command, argv = sys.argv[1], sys.argv[2:]
with open(os.path.join(here, ".behaviour", command + ".json")) as f:
    behaviour = json.load(f)
version_query = behaviour.get("version") is not None and argv in (
    ["--version"], ["-v"], ["-V"], ["version"])
stdin = sys.stdin.read() if behaviour.get("stdin") and not version_query else None
call = {"command": command, "argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
        "stdin": stdin, "version_query": version_query}
with open(os.path.join(here, ".calls.jsonl"), "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.write(json.dumps(call) + "\n")
if version_query:
    print(behaviour["version"])
    sys.exit(0)
if behaviour.get("passthrough"):
    os.execv(behaviour["passthrough"], [behaviour["passthrough"], *argv])
sys.stdout.write(behaviour.get("stdout", ""))
sys.stderr.write(behaviour.get("stderr", ""))
sys.stdout.flush()
sys.stderr.flush()
status = behaviour.get("exit")
if behaviour.get("sh"):
    ran = subprocess.run(["/bin/bash", "-c", behaviour["sh"], command, *argv])
    if status is None:
        status = ran.returncode
sys.exit(status or 0)
"""


STAND_IN_PYTHON = "/usr/bin/python3"
"""What runs the stand-ins in the container, which has the host's /usr (not /usr/local: that is
the stand-ins' own directory there)."""


def requires_fake_container() -> pytest.MarkDecorator:
    """Skip marker: a fake container (`fakecontainer`) and a python for the stand-ins."""
    reason = unavailable_reason()
    if reason is None and not Path(STAND_IN_PYTHON).exists():
        reason = f"the stand-ins run with {STAND_IN_PYTHON} (Debian: apt-get install python3)"
    return pytest.mark.skipif(reason is not None, reason=reason or "")


@dataclass(frozen=True)
class Call:
    """One run of a stand-in."""

    command: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    stdin: str | None
    version_query: bool

    def has_flag(self, flag: str, value: str | None = None) -> bool:
        """Whether `flag` is an argument (followed by `value`, or written `flag=value`)."""
        if value is None:
            return flag in self.argv
        pairs = zip(self.argv, self.argv[1:], strict=False)
        return any(a == flag and b == value for a, b in pairs) or f"{flag}={value}" in self.argv


class StandIns:
    """Programs for the fake container's /usr/local/bin; `add` one per command name."""

    def __init__(self) -> None:
        self.behaviours: dict[str, dict[str, Any]] = {}
        self.later: set[str] = set()

    @staticmethod
    def installing(*commands: str, into: str = "/usr/local/bin") -> str:
        """Shell for a package manager's stand-in (`sh=`) that puts the stand-ins of `commands`
        (added with `installed=False`) into `into`."""
        return "\n".join(
            f"mkdir -p {into} && cp {LATER_DIR}/{command} {into}/{command}" for command in commands
        )

    def add(
        self,
        command: str,
        *,
        stdout: str = "",
        stderr: str = "",
        exit: int | None = None,  # noqa: A002 - what the stand-in does
        version: str | None = None,
        sh: str | None = None,
        stdin: bool = False,
        passthrough: str | None = None,
        installed: bool = True,
    ) -> StandIns:
        """A stand-in `command`: it records its call, then answers `CMD --version` (also -v, -V,
        `version`) with `version` when one is given; else execs `passthrough` (a real program,
        say /usr/bin/node) when given; else prints `stdout` and `stderr`, runs `sh` with bash
        (its arguments are the stand-in's), and exits with `exit` (default: sh's status, or 0).
        `stdin`: read and record its standard input. `installed=False`: not on PATH until a
        package manager's stand-in puts it there (`installing`)."""
        if not installed:
            self.later.add(command)
        self.behaviours[command] = {
            "stdout": stdout,
            "stderr": stderr,
            "exit": exit,
            "version": version,
            "sh": sh,
            "stdin": stdin,
            "passthrough": passthrough,
        }
        return self

    def install(self, directory: Path) -> None:
        """Write the stand-ins into `directory` (the container's /usr/local/bin)."""
        (directory / ".standin.py").write_text(_STAND_IN)
        behaviours = directory / BEHAVIOUR_DIR
        behaviours.mkdir(exist_ok=True)
        (directory / LATER_DIR.rsplit("/", 1)[1]).mkdir(exist_ok=True)
        for command, behaviour in self.behaviours.items():
            (behaviours / f"{command}.json").write_text(json.dumps(behaviour))
            program = directory / command
            if command in self.later:
                program = directory / LATER_DIR.rsplit("/", 1)[1] / command
            program.write_text(
                f'#!/bin/sh\nexec {STAND_IN_PYTHON} /usr/local/bin/.standin.py {command} "$@"\n'
            )
            program.chmod(0o755)
        (directory / CALLS_FILE).touch()


@dataclass(frozen=True)
class BuiltinRun:
    """A finished trial of a built-in agent."""

    report: TrialReport
    objects: dict[str, bytes]
    """The trial's files in storage, by path under the trial (result.json, logs/agent/...)."""
    all_calls: list[Call]
    agent: JobAgent
    """The agent as job.yaml resolved it (its built-in, version, model, env)."""

    def calls(self, command: str | None = None, *, versions: bool = False) -> list[Call]:
        """The stand-ins' calls in order, of `command` only when given; `--version` queries
        only with `versions`."""
        return [
            c
            for c in self.all_calls
            if (command is None or c.command == command) and (versions or not c.version_query)
        ]

    def text(self, path: str) -> str:
        """A trial file's text (say "logs/agent/claude-code.txt")."""
        return self.objects[path].decode()

    def json(self, path: str) -> Any:
        return json.loads(self.objects[path])


async def run_builtin(
    tmp_path: Path,
    store: ObjectStore,
    agent: Mapping[str, Any],
    stand_ins: StandIns,
    *,
    environ: Mapping[str, str] | None = None,
    agent_sec: float = 30.0,
    install_sec: float = 20.0,
    hide: tuple[str, ...] = (),
) -> BuiltinRun:
    """Run `agent` (a job.yaml agents entry) on the hello-offline task in a fake container with
    `stand_ins` on PATH; `environ` is the submitter's environment its `${VAR}`s come from;
    `hide` names host programs the container must lack (say apt-get)."""
    resolved = JobAgent.model_validate(dict(agent))
    env: list[dict[str, Any]] = []
    carried: dict[str, str] = {}
    for key, value in resolved.env.items():
        if not env_references(value):
            env.append({"name": key, "value": value})
            continue
        secret_ref = {"name": "agent-env", "key": key}
        env.append({"name": key, "valueFrom": {"secretKeyRef": secret_ref}})
        carried[agent_env_var_name(key)] = substitute(value, environ or {})
    content_hash = publish_task(store, TASK)
    fields = resolved.model_dump(include={"builtin", "version", "model_name", "flags"})
    spec = make_spec(
        store,
        TASK,
        content_hash,
        agent=resolved.name,
        install=resolved.install,
        execute=resolved.execute,
        env=env,
        agent_sec=agent_sec,
        install_sec=install_sec,
        agent_fields={k: v for k, v in fields.items() if v is not None},
    )
    agent_env = resolve_agent_env(spec.agent, carried)
    base = tmp_path / "container"
    base.mkdir()
    with fake_container(base, hide=hide, local_bin=True) as container:
        assert container.local_bin is not None
        stand_ins.install(container.local_bin)
        report = await run_in(container, tmp_path, spec, store, agent_env=agent_env)
        lines = (container.local_bin / CALLS_FILE).read_text().splitlines()
    calls = [Call(**json.loads(line)) for line in lines]
    return BuiltinRun(report, trial_objects(store, spec), calls, resolved)
