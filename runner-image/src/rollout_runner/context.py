"""What every phase of a trial works with: the spec, the environment, storage, clock and record.

Container paths are the seed's: /logs/agent and /logs/verifier for logs, /tests for the task's
tests (copied only for the verifier), /oracle for the oracle's solution. The agent's install and
execute scripts are copied to /installed-agent/ (Harbor's place for them) and run with bash.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from rollout.api.layout import trial_prefix
from rollout.api.resources import RolloutTrialSpec
from rollout.api.rules import ORACLE_AGENT
from rollout.api.taskdir import Task
from rollout.storage import Store
from rollout_runner.clock import Clock
from rollout_runner.environment import Environment, EnvironmentFailure, ExecResult
from rollout_runner.record import TrialRecord
from rollout_runner.redact import Redactor
from rollout_runner.spec import AgentEnv

LOGS = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = "/logs/verifier"
TESTS = "/tests"
ORACLE = "/oracle"
AGENT_SCRIPTS = "/installed-agent"

ISOLATED_AGENT_USER = "rollout-agent"
ISOLATED_AGENT_UID = 10001
"""The unprivileged user a job's isolate_agents runs agents as, when the task declares none."""

ANSWER_GRACE_SEC = 60.0
"""How long past a command's own timeout the runner waits for the environment to answer at all."""


@dataclass(frozen=True)
class RunnerOptions:
    """How the runner reaches things and how long it waits for them."""

    work_dir: Path
    """A directory of the runner's own, which the environment cannot see (the task files)."""
    logs_dir: Path | None = None
    """The environment's /logs as this process sees it (the trial Pod's shared volume); None:
    copy /logs out of the environment with `get_files` instead."""
    ready_timeout_sec: float = 600.0
    """How long the environment may take to become ready (environment_start_failed after)."""
    upload_timeout_sec: float = 600.0
    """The deadline of all uploads of the trial together."""
    housekeeping_timeout_sec: float = 60.0
    """Limit for the runner's own commands in the environment (mkdir, chmod, kill-all, stop)."""


@dataclass
class TrialContext:
    """One trial in progress. Phases read it and record into `record`."""

    spec: RolloutTrialSpec
    environment: Environment
    store: Store
    clock: Clock
    options: RunnerOptions
    agent_env: AgentEnv
    redactor: Redactor
    record: TrialRecord
    task: Task | None = None
    """The task's files (under work_dir), once setup has fetched them."""
    task_env: dict[str, str] = field(default_factory=dict)
    """task.toml's [environment.env], `${VAR}`s resolved from the agent's env, once setup has
    read the task: under the env of every agent and verifier command (the phases add theirs)."""
    environment_ready: bool = False
    outputs: dict[str, bytes] = field(default_factory=dict)
    """Captured command output by its path under the trial prefix (setup/stdout.txt, ...)."""

    @property
    def is_oracle(self) -> bool:
        return self.spec.agent.name == ORACLE_AGENT

    @property
    def declared_agent_user(self) -> str | None:
        """The spec's agentUser, else task.toml's [agent] user, else None."""
        user = self.spec.agent_user
        if user is None and self.task is not None:
            user = self.task.config.agent.user
        return None if user is None else str(user)

    @property
    def creates_agent_user(self) -> bool:
        """The job isolates agents and none is declared: the runner makes `ISOLATED_AGENT_USER`."""
        return self.spec.isolate_agent and self.declared_agent_user is None

    @property
    def agent_user(self) -> str | None:
        """The agent's user: the declared one, else the one the runner creates, else None."""
        return ISOLATED_AGENT_USER if self.creates_agent_user else self.declared_agent_user

    @property
    def verifier_user(self) -> str | None:
        """The verifier's user: the spec's, else task.toml's, else root when the agent has one.

        With an agent user the verifier must not run as the image's default user, which may be
        that same user.
        """
        user = self.spec.verifier_user
        if user is None and self.task is not None:
            user = self.task.config.verifier.user
        if user is None and self.agent_user is not None:
            return "root"
        return None if user is None else str(user)

    @property
    def workdir(self) -> str | None:
        """Where agent and verifier run: the spec's, else task.toml's, else the image's."""
        if self.spec.workdir:
            return self.spec.workdir
        if self.task is not None and self.task.config.environment.workdir:
            return self.task.config.environment.workdir
        return None

    @property
    def trial_prefix(self) -> str:
        """`<prefix>/jobs/<job>/<agent>/<dataset>/<task>__<n>/` in the bucket."""
        spec = self.spec
        return trial_prefix(
            self.store.prefix,
            spec.job_name,
            spec.agent.name,
            spec.dataset_name,
            spec.task_name,
            spec.attempt,
        )

    async def run(
        self,
        command: str,
        *,
        timeout_sec: float,
        env: dict[str, str] | None = None,
        user: str | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command in the environment; an environment that stops answering is a failure.

        The environment enforces `timeout_sec` itself; the outer limit only guards against an
        environment that never answers at all.
        """
        try:
            async with asyncio.timeout(timeout_sec + ANSWER_GRACE_SEC):
                return await self.environment.run(
                    command, env=env or {}, user=user, cwd=cwd, timeout_sec=timeout_sec
                )
        except TimeoutError:
            raise EnvironmentFailure(
                f"the environment did not answer within {timeout_sec + ANSWER_GRACE_SEC:g}s "
                f"while running {command.split(maxsplit=2)[:2]}"
            ) from None

    async def housekeeping(self, script: str, what: str, *, cwd: str | None = None) -> None:
        """Run one of the runner's own scripts as the environment's default user (root)."""
        result = await self.run(script, timeout_sec=self.options.housekeeping_timeout_sec, cwd=cwd)
        if result.timed_out or result.exit_code != 0:
            why = (
                f"timed out after {self.options.housekeeping_timeout_sec:g}s"
                if result.timed_out
                else f"exit code {result.exit_code}"
            )
            stderr = result.stderr.decode(errors="replace").strip()
            raise EnvironmentFailure(f"{what} failed ({why}): {stderr[-2000:]}")
