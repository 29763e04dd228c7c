"""`python -m rollout_runner.build context|report`: the runner image's part in an image build Pod.

The build Pod (`rollout.api.wire.build` is its contract, `rollout.controller.build_pod` renders
it) runs the builder between two of the runner's commands:

- `context`, its init container, fetches the environment's archive (`ROLLOUT_BUILD_CONTEXT_KEY`)
  from storage and unpacks it into `ROLLOUT_BUILD_CONTEXT` with the runner's own safe
  extraction (`rollout_runner.archive`). When it cannot, it exits non-zero with one line saying
  why, on stderr and in its termination log: the operator reads the init container's
  termination message, and so does `kubectl describe`.
- `report`, beside the builder, waits for the builder's exit file (`ROLLOUT_BUILD_OUT/exit`) up
  to `ROLLOUT_BUILD_TIMEOUT_SEC` seconds from its own start, uploads what there is of the build
  log to `ROLLOUT_BUILD_LOG_KEY`, and writes a `BuildReport` to its termination log. It exits 0
  whatever became of the build: the report says, and the operator reads it.

Storage is the runner's usual one (`ROLLOUT_STORAGE_*`, credentials from
`ROLLOUT_STORAGE_CREDENTIALS_DIR`; or a directory, `ROLLOUT_STORAGE_DIR`). Both commands run as
an unprivileged user with a read-only root filesystem: they write only into the workspace and
the termination log, and hold the log in memory rather than in a scratch file.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout.api.errors import InvalidInput
from rollout.api.wire import build as wire
from rollout.api.wire import termination
from rollout.storage import (
    ObjectNotFound,
    ObjectStore,
    RetryPolicy,
    StorageError,
    WritableStore,
    directory_from_env,
    storage_from_env,
)
from rollout_runner import termination as termination_log
from rollout_runner.archive import extract_task_archive
from rollout_runner.arguments import positive_seconds

log = logging.getLogger("rollout_runner.build")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

POLL_SEC = 0.25
"""How often `report` looks for the builder's exit file."""
UPLOAD_TIMEOUT_SEC = 120.0
"""The default deadline of the log's upload: within the Pod's margin after the build's timeout."""
MAX_LOG_BYTES = 64 * 1024 * 1024
"""The most of a build log that is uploaded (its end): the container's memory is small."""
TAIL_BYTES = 64 * 1024
"""How much of the log's end is read for the report's tail."""
MAX_UPLOAD_ERROR_CHARS = 1000
"""An upload error is cut to this, so that the report always fits its 4096 bytes."""
UNREADABLE_EXIT = -1
"""The report's exit_code when the exit file holds no exit status: a failure, and no status."""

DESCRIPTION = """\
The runner's two containers of an image build Pod: `context` fetches and unpacks the build
context, `report` waits for the builder and reports the build in its termination log.
"""

EPILOG = f"""\
context (environment variables):
  {wire.CONTEXT_KEY_ENV:<28} storage key of the environment's archive (tar.gz)
  {wire.CONTEXT_DIR_ENV:<28} where to unpack it (missing or empty)

report (environment variables):
  {wire.OUT_DIR_ENV:<28} the builder's output directory ({wire.LOG_FILE}, {wire.EXIT_FILE},
  {"":<28} {wire.DIGEST_FILE} or {wire.METADATA_FILE})
  {wire.LOG_KEY_ENV:<28} storage key the build log is uploaded to
  {wire.TIMEOUT_ENV:<28} seconds the build may take, from the report's start

storage: ROLLOUT_STORAGE_* as for rollout-runner (see rollout-runner --help).

exit status:
  {EXIT_OK}  context: unpacked; report: a report was written (whatever the build did)
  {EXIT_FAILED}  context: the archive could not be fetched or unpacked (the termination log
     says why)
  {EXIT_BAD_INPUT}  a variable above or a storage setting is missing or invalid
"""


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--termination-log",
        type=Path,
        default=termination.DEFAULT_PATH,
        help="where the outcome is written (default: %(default)s)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m rollout_runner.build",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "context", parents=[common], help="fetch and unpack the build context (init container)"
    )
    report = commands.add_parser(
        "report", parents=[common], help="wait for the builder, upload its log, report"
    )
    report.add_argument(
        "--upload-timeout-sec",
        type=positive_seconds,
        default=UPLOAD_TIMEOUT_SEC,
        help="deadline for uploading the build log (default: %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m rollout_runner.build`."""
    sys.exit(run(argv))


def run(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    if args.command == "context":
        return fetch_context(os.environ, args.termination_log)
    return report_build(os.environ, args.termination_log, args.upload_timeout_sec)


# --- storage ----------------------------------------------------------------------------------


def open_store(environ: Mapping[str, str], retry: RetryPolicy | None = None) -> WritableStore:
    """The storage the ROLLOUT_STORAGE_* variables name: a directory, else a bucket. Raises
    InvalidInput naming what is missing or wrong."""
    directory = directory_from_env(environ)
    if directory is not None:
        return directory
    location, credentials = storage_from_env(environ)
    return ObjectStore(location, credentials, retry=retry)


def _required(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise InvalidInput.one(name, None, "is required (the build Pod sets it)")
    return value


def _one_line(text: str, limit: int = wire.MAX_BYTES) -> str:
    """`text` on one line, within `limit` bytes (a termination message's most)."""
    data = " ".join(text.split()).encode()
    if len(data) <= limit:
        return data.decode()
    return data[: limit - 3].decode(errors="ignore") + "..."


# --- context ----------------------------------------------------------------------------------


def fetch_context(environ: Mapping[str, str], termination_path: Path) -> int:
    """The `context` command: unpack the build context; on failure say why and exit non-zero."""
    try:
        key = _required(environ, wire.CONTEXT_KEY_ENV)
        destination = Path(_required(environ, wire.CONTEXT_DIR_ENV))
        store = open_store(environ)
    except InvalidInput as err:
        return _context_failed(
            termination_path, f"the build context cannot be fetched: {err}", EXIT_BAD_INPUT
        )
    try:
        unpack_context(store, key, destination)
    except ContextError as err:
        return _context_failed(termination_path, str(err), EXIT_FAILED)
    log.info("unpacked the build context %s into %s", store.uri(key), destination)
    return EXIT_OK


class ContextError(Exception):
    """The build context could not be fetched or unpacked; the message says which and why."""


def unpack_context(store: WritableStore, key: str, destination: Path) -> None:
    """Fetch the archive `key` and extract it into `destination` (missing or empty)."""
    uri = store.uri(key)
    try:
        data = store.get_bytes(key)
    except ObjectNotFound as err:
        raise ContextError(
            f"the build context {uri} cannot be fetched: there is no such object at "
            f"{err.endpoint} (was the environment published to this storage?)"
        ) from None
    except StorageError as err:
        raise ContextError(f"the build context {uri} cannot be fetched: {err}") from None
    try:
        extract_task_archive(data, destination)
    except (InvalidInput, OSError) as err:
        raise ContextError(f"the build context {uri} cannot be unpacked: {err}") from None


def _context_failed(termination_path: Path, message: str, code: int) -> int:
    line = _one_line(message)
    log.error("%s", line)
    termination_log.write(termination_path, line.encode())
    return code


# --- report -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportSettings:
    """What `report` is told by its variables."""

    out_dir: Path
    log_key: str
    timeout_sec: float

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ReportSettings:
        """Raises InvalidInput naming the variable that is missing or wrong."""
        out_dir = Path(_required(environ, wire.OUT_DIR_ENV))
        log_key = _required(environ, wire.LOG_KEY_ENV)
        text = _required(environ, wire.TIMEOUT_ENV)
        try:
            timeout = float(text)
        except ValueError:
            timeout = -1.0
        if not 0 < timeout < float("inf"):
            raise InvalidInput.one(
                wire.TIMEOUT_ENV, None, f"{text!r} is not a positive number of seconds"
            )
        return cls(out_dir, log_key, timeout)


def report_build(environ: Mapping[str, str], termination_path: Path, upload_timeout: float) -> int:
    """The `report` command: wait for the build, upload its log, write the report; exit 0."""
    started = time.monotonic()
    try:
        settings = ReportSettings.from_env(environ)
    except InvalidInput as err:
        message = _one_line(f"the build cannot be reported: {err}")
        log.error("%s", message)
        termination_log.write(termination_path, message.encode())
        return EXIT_BAD_INPUT
    log.info("waiting up to %g s for the build", settings.timeout_sec)
    out = settings.out_dir
    finished = wait_for_file(out / wire.EXIT_FILE, started + settings.timeout_sec, POLL_SEC)
    build_sec = time.monotonic() - started
    data = read_log(out / wire.LOG_FILE)
    log_uri, upload_error = upload_log(environ, settings.log_key, data, upload_timeout)
    report = make_report(out, finished, data, build_sec).model_copy(
        update={"log_uri": log_uri, "upload_error": upload_error}
    )
    log.info(
        "the build %s; its log is %s",
        "timed out" if report.timed_out else f"exited with {report.exit_code}",
        log_uri or f"not in storage ({upload_error})",
    )
    termination_log.write(termination_path, wire.render_report(report))
    return EXIT_OK


def wait_for_file(path: Path, deadline: float, poll: float) -> bool:
    """Wait until `path` exists or the monotonic clock passes `deadline`; whether it exists."""
    while not path.exists():
        left = deadline - time.monotonic()
        if left <= 0:
            return path.exists()
        time.sleep(min(poll, left))
    return True


def read_log(path: Path, limit: int = MAX_LOG_BYTES) -> bytes:
    """The log as it is now (b"" when there is none): at most its last `limit` bytes."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - limit))
            return file.read(min(size, limit))
    except FileNotFoundError:
        return b""


def read_exit(path: Path) -> tuple[int | None, str | None]:
    """The exit status in the builder's exit file, or (None, why) when it holds none."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError as err:
        return None, f"the builder's exit file cannot be read: {err}"
    try:
        return int(text), None
    except ValueError:
        return None, f"the builder's exit file holds {text[:100]!r}, not an exit status"


def read_digest(out: Path) -> str | None:
    """The pushed image's digest that the builder left (`wire.pushed_digest`)."""
    return wire.pushed_digest(
        _text_or_none(out / wire.DIGEST_FILE), _text_or_none(out / wire.METADATA_FILE)
    )


def _text_or_none(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def make_report(out: Path, finished: bool, data: bytes, build_sec: float) -> wire.BuildReport:
    """The report of a build whose exit file was seen (`finished`) or not, before the upload.

    An exit file that holds no exit status is a failed build (`UNREADABLE_EXIT`), and the
    tail's last line says why.
    """
    text = data[-TAIL_BYTES:].decode(errors="replace")
    exit_code: int | None = None
    if finished:
        exit_code, problem = read_exit(out / wire.EXIT_FILE)
        if problem is not None:
            exit_code = UNREADABLE_EXIT
            text = f"{text.rstrip()}\n{problem}".lstrip("\n")
    return wire.BuildReport(
        exit_code=exit_code,
        timed_out=not finished,
        digest=read_digest(out),
        log_tail=wire.log_tail(text),
        build_sec=round(build_sec, 3),
    )


def upload_log(
    environ: Mapping[str, str], key: str, data: bytes, timeout: float
) -> tuple[str | None, str | None]:
    """Upload the log within `timeout` seconds: (its URI, None), or (None, why not)."""
    # The retries stop halfway, so that a dead endpoint is reported as such, not as a timeout.
    retry = RetryPolicy(max_seconds=timeout / 2, max_backoff_seconds=min(15.0, timeout / 4))
    try:
        store = open_store(environ, retry)
    except (InvalidInput, ValueError) as err:
        return None, _cut(f"the storage settings are invalid: {err}")
    try:
        _within(timeout, lambda: store.put_bytes(key, data, content_type="text/plain"))
    except TimeoutError:
        return None, f"the build log was not uploaded within {timeout:g} s"
    except (StorageError, OSError) as err:
        return None, _cut(str(err))
    return store.uri(key), None


def _cut(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= MAX_UPLOAD_ERROR_CHARS:
        return line
    return line[: MAX_UPLOAD_ERROR_CHARS - 3] + "..."


def _within(timeout: float, call: Callable[[], None]) -> None:
    """Run `call` in a daemon thread; TimeoutError when it has not ended after `timeout` seconds
    (the thread is abandoned: the process ends soon after). Its exception is raised here."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            call()
        except BaseException as err:  # handed to the waiting thread
            failure.append(err)

    thread = threading.Thread(target=target, name="rollout-build-upload", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError
    if failure:
        raise failure[0]


if __name__ == "__main__":
    main()
