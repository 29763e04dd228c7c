"""One trial in local mode: its sandbox, the runner beside it, and a record whatever happens.

As in a trial Pod, the sandbox plays the environment container (the shim as its first process)
and the runner runs as a process of its own: `python -m rollout_runner.main`, given the trial's
spec, the sandbox's control and logs directories, and a directory store that puts its files
straight into the jobs directory. The runner does everything a trial is: the task's files, the
agent, the verifier, the error types, result.json. This module only starts and stops things, and
writes the record when the runner could not (the sandbox did not start, the runner died).

The runner runs in a session of its own, so Ctrl-C at the terminal reaches the local job only;
the job stops a runner with SIGTERM, which the runner takes as a trial Pod's deletion: it cancels
the running phase, records `internal_error` and still writes the trial's files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.failures import failure_class
from rollout.api.layout import ERROR_TXT, RESULT_JSON, trial_prefix
from rollout.api.plan import PlannedTrial
from rollout.api.records import failed_result, record_error_text
from rollout.api.resources import RolloutTrialSpec
from rollout.api.results import TrialError, TrialResult
from rollout.api.trials import TrialKey
from rollout.api.wire.spec import (
    POD_CREATED_ENV_VAR,
    SPEC_ENV_VAR,
    TRY_ENV_VAR,
    pod_created_at_text,
    trial_spec_json,
    try_text,
)
from rollout.local.environments import Sandboxes
from rollout.local.sandbox import Sandbox, SandboxStartFailed, SandboxUnavailable
from rollout.storage import ENV_DIR, ENV_JOBS_DIR, DirectoryStore, StorageError

log = logging.getLogger(__name__)

WRITTEN_LOCALLY = (
    "rollout run --local wrote this record: the trial's runner could not write one (its "
    "sandbox did not start, or the runner ended without writing it)."
)

READY_TIMEOUT_SEC = 120.0
"""How long the runner waits for the shim: the sandbox is started and its image there already
(a trial Pod's runner waits longer, through scheduling and the image pull)."""

RUNNER_STOP_GRACE_SEC = 60.0
"""How long a runner told to stop (SIGTERM) has to record the trial before it is killed."""

LOG_TAIL_BYTES = 4000
"""How much of a runner's log goes into the error.txt of a trial whose runner died."""

PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH")
"""Variables of the CLI's environment the runner keeps: what a Python process needs to start.
Nothing else (no cloud credentials, no tokens) reaches the runner or, through it, the trial."""


def runner_output(log_path: Path) -> str:
    """error.txt's note on a runner that died: the end of what it printed."""
    tail = log_path.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace").strip()
    return f"The runner's last output:\n{tail}" if tail else "The runner printed nothing."


@dataclass(frozen=True)
class LocalTrial:
    """Everything one trial needs: its plan entry, its spec, and where its files go."""

    planned: PlannedTrial
    spec: RolloutTrialSpec
    secrets: Mapping[str, str]
    """The agent's Secret-backed values by the runner variable carrying each
    (`agent_secret_carriers`; never in the spec, as on a cluster)."""
    try_number: int = 1


def trial_files(store: DirectoryStore, job_name: str, key: TrialKey) -> str:
    """The key prefix of a trial's files in the local store (`<trial>/`, a directory there)."""
    return trial_prefix(store.prefix, job_name, key.agent, key.dataset, key.task, key.attempt)


class TrialRun:
    """Runs one trial; `stop()` asks it to end early (the runner still writes the record)."""

    def __init__(
        self,
        trial: LocalTrial,
        store: DirectoryStore,
        sandboxes: Sandboxes,
        *,
        environ: Mapping[str, str],
    ) -> None:
        self.trial = trial
        self.store = store
        self.prefix = trial_files(store, trial.spec.job_name, trial.planned.key)
        self.sandboxes = sandboxes
        self.environ = environ
        self._process: asyncio.subprocess.Process | None = None
        self._stopping = False
        self.kept: str | None = None
        """How to reach a sandbox kept for inspection (the job's preserveEnv)."""

    def stop(self, *, now: bool = False) -> None:
        """Ask the trial to end: SIGTERM to its runner (SIGKILL with `now`); before the runner
        has started, the trial does not start it."""
        self._stopping = True
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL if now else signal.SIGTERM)

    async def record_unrunnable(self, error: TrialError) -> TrialResult:
        """Record a trial that cannot start (a broken task, the oracle without a solution), as
        the operator fails it at creation."""
        return await self._write_record(error, started=datetime.now(UTC), in_setup=False)

    async def run(self) -> TrialResult | None:
        """Run the trial and return its record (None when stopped before its sandbox started:
        the trial has no record, and a resumed job runs it)."""
        base = Path(tempfile.mkdtemp(prefix=f"rollout-{self.trial.planned.name}-"))
        started = datetime.now(UTC)
        sandbox: Sandbox | None = None
        try:
            if not self.trial.spec.needs_environment:
                # The runner answers alone (the oracle's, an endpoint's or a model's rows): no
                # sandbox, as on a cluster the Pod holds the runner alone.
                return None if self._stopping else await self._run_runner(None, base, started)
            try:
                sandbox = await self.sandboxes.start(self.trial.spec, self.trial.planned, base)
            except SandboxStartFailed as err:
                return await self._write_record(
                    TrialError(type=err.error_type, message=err.message),
                    started=started,
                    in_setup=True,
                )
            except SandboxUnavailable as err:  # the engine went away during the job
                return await self._write_record(
                    TrialError(type=ErrorType.ENVIRONMENT_START_FAILED, message=str(err)),
                    started=started,
                    in_setup=True,
                )
            if self._stopping:
                return None
            return await self._run_runner(sandbox, base, started)
        finally:
            keep = self.trial.spec.preserve_env and sandbox is not None
            if sandbox is not None:
                await sandbox.close(keep=keep)
                if keep:
                    self.kept = sandbox.describe()
            if not keep:
                await asyncio.to_thread(shutil.rmtree, base, ignore_errors=True)

    async def _run_runner(
        self, sandbox: Sandbox | None, base: Path, started: datetime
    ) -> TrialResult | None:
        log_path = base / "runner.log"
        if sandbox is not None:
            control_dir, logs_dir = sandbox.paths.control_dir, sandbox.paths.logs_dir
        else:  # no environment: directories of the runner's own, which nothing else shares
            control_dir, logs_dir = base / "control", base / "logs"
            for directory in (control_dir, logs_dir):
                directory.mkdir()
        with log_path.open("wb") as log_file:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "rollout_runner.main",
                "--control-dir",
                str(control_dir),
                "--logs-dir",
                str(logs_dir),
                "--work-dir",
                str(base / "runner-work"),
                "--termination-log",
                str(base / "termination-log"),
                "--ready-timeout-sec",
                str(READY_TIMEOUT_SEC),
                env=self._runner_env(started),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        if self._stopping:  # stopped while it was starting: it missed the signal
            self.stop()
        code = await self._wait_runner()
        return await self._after_runner(code, log_path, started)

    async def _after_runner(
        self, code: int, log_path: Path, started: datetime
    ) -> TrialResult | None:
        """The trial's record once its runner has ended: the runner's, else one written here."""
        record = await asyncio.to_thread(self._read_record)
        if record is not None:
            return record
        message = f"The runner ended (exit status {code}) without writing the trial's record"
        return await self._write_record(
            TrialError(type=ErrorType.INTERNAL_ERROR, message=message),
            started=started,
            in_setup=False,
            notes=[runner_output(log_path)],
        )

    async def _wait_runner(self) -> int:
        process = self._process
        assert process is not None
        while True:
            try:
                # A stopped runner gets its grace, then SIGKILL.
                timeout = RUNNER_STOP_GRACE_SEC if self._stopping else None
                return await asyncio.wait_for(asyncio.shield(process.wait()), timeout)
            except TimeoutError:
                log.warning("the runner of %s did not stop: killing it", self.trial.planned.name)
                self.stop(now=True)
                return await process.wait()
            except asyncio.CancelledError:
                self.stop(now=True)
                await process.wait()
                raise

    def _runner_env(self, started: datetime) -> dict[str, str]:
        env = {name: self.environ[name] for name in PASSED_THROUGH if name in self.environ}
        env[SPEC_ENV_VAR] = trial_spec_json(self.trial.spec)
        env[POD_CREATED_ENV_VAR] = pod_created_at_text(started)
        env[TRY_ENV_VAR] = try_text(self.trial.try_number)
        env[ENV_DIR] = str(self.store.root)
        if self.store.jobs_root is not None:
            env[ENV_JOBS_DIR] = str(self.store.jobs_root)
        env.update(self.trial.secrets)
        return env

    def _read_record(self) -> TrialResult | None:
        """The trial's result.json, or None when there is none (or it is not a record)."""
        try:
            return TrialResult.from_json(self.store.get_bytes(self.prefix + RESULT_JSON))
        except (StorageError, InvalidInput):
            return None

    async def _write_record(
        self,
        error: TrialError,
        *,
        started: datetime,
        in_setup: bool,
        notes: list[str] | None = None,
    ) -> TrialResult:
        return await self._write_record_of(
            self.trial.planned.key, error, started=started, in_setup=in_setup, notes=notes
        )

    async def _write_record_of(
        self,
        key: TrialKey,
        error: TrialError,
        *,
        started: datetime,
        in_setup: bool,
        notes: list[str] | None = None,
        tries: int | None = None,
    ) -> TrialResult:
        """Write the record of the trial `key` (this one, or a row of a shard, with `tries` of
        its own)."""
        result = failed_result(
            key,
            started=started,
            ended=datetime.now(UTC),
            in_setup=in_setup,
            error=error,
            failure_class=failure_class(error.type, agent_name=key.agent),
            tries=tries if tries is not None else self.trial.try_number,
        )
        text = record_error_text(
            self.trial.spec.job_name, key, error, notes=notes or [], written_by=WRITTEN_LOCALLY
        )
        store, prefix = self.store, trial_files(self.store, self.trial.spec.job_name, key)

        def write() -> None:
            store.put_bytes(prefix + ERROR_TXT, text.encode(), "text/plain")
            store.put_bytes(prefix + RESULT_JSON, result.to_json().encode(), "application/json")

        await asyncio.to_thread(write)
        return result
