"""Collection: the trial's files, scrubbed of secrets, uploaded under the trial's prefix.

Objects, under `<prefix>/jobs/<job>/<agent>/<dataset>/<task>__<n>/`:

    setup/stdout.txt, setup/stderr.txt      agent install output (when an install ran)
    command/stdout.txt, command/stderr.txt  agent execute (or oracle solve.sh) output
    logs/...                                every regular file of the environment's /logs
                                            (logs/agent/, logs/verifier/reward.txt, stdout.txt, ...)
    error.txt                               when the trial has an error
    result.json                             always, and always last: its presence in storage
                                            means the trial is complete

A script agent's /logs/agent/usage.json is read into result.json's `rollout.usage`
(`rollout_runner.agent_usage`). Every object passes through the `Redactor` (see
`rollout_runner.redact`). Symlinks and special files in /logs are skipped (the agent wrote that
tree), and so are files whose names the store refuses (`InvalidKey`). Uploads run in daemon threads
(`Uploads`), one at a time until one has gone through, then up to `UPLOAD_THREADS` at once: setup/
and command/ as soon as the agent is done (nothing after it changes them), while the verifier runs;
the others once the trial ends; then result.json alone, once every other object is stored. They run
on a deadline of their own (`upload_timeout_sec`, from the trial's end); each call is retried by
the storage module's policy, and the first object that still fails stops the uploads, so that a
trial whose files are not all in storage never gets its result.json there either.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
from collections import deque
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

from rollout.api.additions import BuiltinRun
from rollout.api.layout import (
    COMMAND_STDERR,
    COMMAND_STDOUT,
    ERROR_TXT,
    LOGS_DIR,
    RESULT_JSON,
    SETUP_STDERR,
    SETUP_STDOUT,
)
from rollout.api.resources import AgentSpec
from rollout.api.results import TrialError, TrialResult
from rollout.api.service_agents import AgentKind
from rollout.storage import InvalidKey, StorageError
from rollout_runner.agent_usage import read_usage
from rollout_runner.context import TrialContext
from rollout_runner.phases.common import readable_logs
from rollout_runner.threads import in_daemon_thread

log = logging.getLogger(__name__)

OUTPUT_FILES = (SETUP_STDOUT, SETUP_STDERR, COMMAND_STDOUT, COMMAND_STDERR)
UPLOAD_THREADS = 4


@dataclass(frozen=True)
class Upload:
    """One object to upload: its full key and the local file with its (scrubbed) content."""

    key: str
    path: Path


@dataclass(frozen=True)
class UploadOutcome:
    uploaded: list[str]
    error: str | None


def _staging(ctx: TrialContext) -> Path:
    return ctx.options.work_dir / "upload"


async def gather_logs(ctx: TrialContext) -> list[Upload]:
    """The files of the environment's /logs, to be uploaded as logs/ (call before teardown)."""
    logs = await readable_logs(ctx)
    if logs is None:
        return []
    if ctx.spec.agent.kind is AgentKind.SCRIPT:
        usage, note = await asyncio.to_thread(read_usage, logs)
        ctx.record.usage = usage
        if note:
            ctx.record.notes.append(note)
    return await asyncio.to_thread(_stage_logs, ctx, logs)


def _stage_logs(ctx: TrialContext, logs: Path) -> list[Upload]:
    staging = _staging(ctx) / LOGS_DIR
    base = f"{ctx.trial_prefix}{LOGS_DIR}/"
    uploads: list[Upload] = []
    for dirpath, dirnames, filenames in os.walk(logs, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            relative = path.relative_to(logs).as_posix()
            try:
                regular = stat.S_ISREG(os.lstat(path).st_mode)
                if not regular:
                    ctx.record.notes.append(f"logs/{relative} was not uploaded: not a regular file")
                    continue
                if ctx.redactor:
                    copy = staging / relative
                    ctx.redactor.copy_file(path, copy)
                    path = copy
            except OSError as err:
                ctx.record.notes.append(f"logs/{relative} could not be read: {err}")
                continue
            uploads.append(Upload(base + relative, path))
    return uploads


def trial_result(ctx: TrialContext) -> TrialResult:
    """result.json's content, its error message scrubbed of secrets."""
    spec = ctx.spec
    result = ctx.record.result(
        task=spec.task_name,
        dataset=spec.dataset_name,
        agent=spec.agent.name,
        attempt=spec.attempt,
        builtin=_builtin_run(spec.agent),
    )
    if result.error is not None:
        result.error = TrialError(
            type=result.error.type, message=ctx.redactor.text(result.error.message)
        )
    return result


def _builtin_run(agent: AgentSpec) -> BuiltinRun | None:
    """Which built-in the trial ran, its version and model (`rollout.agent`): what repeats it."""
    if agent.builtin is None or agent.version is None:
        return None
    return BuiltinRun(builtin=agent.builtin, version=agent.version, model=agent.model_name)


def error_text(ctx: TrialContext) -> str | None:
    """error.txt: the trial's error, its detail, any further errors and notes."""
    main = ctx.record.error
    if main is None:
        return None
    spec = ctx.spec
    lines = [
        f"{main.type}: {main.message}",
        "",
        f"Trial: {spec.job_name}/{spec.agent.name}/{spec.dataset_name}/"
        f"{spec.task_name}__{spec.attempt}",
    ]
    if main.phase:
        lines.append(f"Phase: {main.phase}")
    if main.detail:
        lines += ["", main.detail]
    others = [e for e in ctx.record.errors if e is not main]
    if others:
        lines += ["", "Other errors:"]
        for other in others:
            lines.append(f"- {other.type}: {other.message}")
            if other.detail:
                lines.append(other.detail)
    if ctx.record.notes:
        lines += ["", "Notes:", *(f"- {note}" for note in ctx.record.notes)]
    return ctx.redactor.text("\n".join(lines) + "\n")


def stage_outputs(ctx: TrialContext, skip: Container[str] = ()) -> list[Upload]:
    """The setup/ and command/ outputs, written scrubbed; those whose keys are in `skip` (staged
    before) are left as they are."""
    staging = _staging(ctx)
    prefix = ctx.trial_prefix
    outputs: list[Upload] = []
    for name in OUTPUT_FILES:
        if name in ctx.outputs and prefix + name not in skip:
            data = ctx.redactor.data(ctx.outputs[name])
            outputs.append(_write(staging / name, prefix + name, data))
    return outputs


def stage_trial_files(
    ctx: TrialContext, result: TrialResult, error: str | None, skip: Container[str] = ()
) -> tuple[list[Upload], list[Upload]]:
    """(setup/ and command/ outputs but those in `skip`, then error.txt and result.json),
    written scrubbed."""
    staging = _staging(ctx)
    prefix = ctx.trial_prefix
    outputs = stage_outputs(ctx, skip)
    final: list[Upload] = []
    if error is not None:
        final.append(_write(staging / ERROR_TXT, prefix + ERROR_TXT, error.encode()))
    result_json = ctx.redactor.text(result.to_json()).encode()
    final.append(_write(staging / RESULT_JSON, prefix + RESULT_JSON, result_json))
    return outputs, final


def _write(path: Path, key: str, data: bytes) -> Upload:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Upload(key, path)


async def upload(ctx: TrialContext, uploads: list[Upload]) -> UploadOutcome:
    """Upload `uploads`, result.json (the last) after all the others; see `Uploads.finish`."""
    return await Uploads(ctx).finish(uploads)


class Uploads:
    """A trial's uploads: started as their files become final (`start`), finished with the rest
    and result.json (`finish`).

    Daemon threads take the objects in the order given: one until an object has gone through
    (a dead endpoint costs one object's retries, not several), then up to `UPLOAD_THREADS`. The
    first object that still fails (after the storage module's retries) stops them: nothing more
    starts, and result.json is not uploaded; `finish` reports the failure as it would if every
    object had been uploaded at the end.
    """

    def __init__(self, ctx: TrialContext) -> None:
        self._ctx = ctx
        self._lock = threading.Condition()
        self._queue: deque[Upload] = deque()
        self._keys: set[str] = set()
        self._done: list[str] = []
        self._workers = 0
        self._failure: Exception | None = None
        self._give_up = threading.Event()

    @property
    def keys(self) -> frozenset[str]:
        """The keys of every object started so far (uploaded, under way or queued)."""
        with self._lock:
            return frozenset(self._keys)

    def start(self, uploads: list[Upload]) -> None:
        """Begin uploading `uploads` now, in the background."""
        with self._lock:
            self._queue.extend(uploads)
            self._keys.update(upload.key for upload in uploads)
            self._spawn()

    def _spawn(self) -> None:
        """Start workers for what is queued (the lock held)."""
        most = UPLOAD_THREADS if self._done else 1
        wanted = min(most, self._workers + len(self._queue))
        while self._workers < wanted and self._failure is None and not self._give_up.is_set():
            self._workers += 1
            threading.Thread(target=self._work, name="rollout-upload", daemon=True).start()

    async def finish(self, uploads: list[Upload]) -> UploadOutcome:
        """Upload `uploads` beside what is under way, then, once everything else is stored,
        their last object, result.json. Never raises for a storage failure or a deadline: the
        outcome says what was not uploaded."""
        ctx = self._ctx
        *rest, last = uploads
        if not last.key.endswith(RESULT_JSON):
            raise ValueError(f"the last object to upload must be result.json, not {last.key}")
        timeout = ctx.options.upload_timeout_sec
        error: str | None = None
        try:
            async with asyncio.timeout(timeout):
                self.start(rest)
                await in_daemon_thread(self._wait, name="rollout-upload-wait")
                if self._failure is None:
                    self.start([last])
                    await in_daemon_thread(self._wait, name="rollout-upload-wait")
        except TimeoutError:
            self._give_up.set()
            with self._lock:
                self._lock.notify_all()
            error = f"the uploads did not finish within {timeout:g}s"
        with self._lock:
            failure, done, total = self._failure, list(self._done), len(self._keys | {last.key})
        if isinstance(failure, StorageError):
            error = str(failure)
        elif isinstance(failure, OSError):
            error = f"a trial file could not be read for upload: {failure}"
        elif failure is not None:
            raise failure
        if error is not None:
            missing = total - len(done)
            error = ctx.redactor.text(
                f"{error}; {len(done)} of {total} objects were uploaded, {missing} "
                f"(result.json among them) were not"
            )
            log.error("uploading the trial's files failed: %s", error)
        return UploadOutcome(uploaded=done, error=error)

    def _wait(self) -> None:
        """Block until nothing is queued or under way (or the uploads have stopped)."""
        with self._lock:
            while self._workers and not self._give_up.is_set():
                self._lock.wait()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._failure is not None or self._give_up.is_set():
                    self._workers -= 1
                    self._lock.notify_all()
                    return
                item = self._queue.popleft()
            try:
                self._ctx.store.upload_file(item.path, item.key)
            except FileNotFoundError:
                self._ctx.record.notes.append(f"{item.key} was not uploaded: its file vanished")
                continue
            except InvalidKey:
                # A file name the agent chose (a backslash, in a directory store): that file
                # is skipped, so that it cannot keep the trial's result.json from being stored.
                self._ctx.record.notes.append(
                    f"{item.key} was not uploaded: storage refuses the name"
                )
                continue
            except Exception as err:
                with self._lock:
                    if self._failure is None:
                        self._failure = err
                continue
            with self._lock:
                if not self._give_up.is_set():
                    self._done.append(item.key)
                    self._spawn()
