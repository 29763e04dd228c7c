"""`rollout-runner`: the sidecar of a trial Pod. Parses its arguments and runs `run_trial`.

It starts once per trial, so its start and its exit are part of every trial's overhead: what only
a shard of data rows needs is imported only for one, and the process ends with `os._exit` once
its files are written, skipping the interpreter's teardown.

Nothing its start-up makes is garbage (modules, pydantic's schemas, botocore's service models),
yet the cyclic collector walks it all, again and again, as the heap grows: about a seventh of the
imports' time and a third of the S3 client's. So the collector is off while the modules below are
imported, and `run` turns it off again from parsing its input to making its storage client
(`CollectorPause`: on again after each, for the trial and for any other importer of this module).
(`benchmarks/runner_overhead.py`: start-up 359 ms to 305 ms p50.)
"""

from __future__ import annotations

from rollout_runner.collector import CollectorPause

_IMPORTS = CollectorPause()

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.resources import RolloutTrialSpec
from rollout.api.rowrun import EVALUATOR_API_KEY_ENV
from rollout.api.wire import termination
from rollout.api.wire.shim import CONTROL_DIR
from rollout.api.wire.spec import AGENT_ENV_PREFIX, POD_CREATED_ENV_VAR, SPEC_ENV_VAR, TRY_ENV_VAR
from rollout.api.wire.termination import RunnerTimes
from rollout.storage import (
    ENV_BUCKET,
    ENV_CREDENTIALS_DIR,
    ENV_DIR,
    ENV_ENDPOINT,
    ENV_JOBS_DIR,
    ENV_PATH_STYLE,
    ENV_PREFIX,
    ENV_REGION,
    DirectoryStore,
    ObjectStore,
    StorageCredentials,
    StorageLocation,
    Store,
    directory_from_env,
    storage_from_env,
)
from rollout_runner import termination as termination_log
from rollout_runner.arguments import positive_seconds
from rollout_runner.clock import process_started_at
from rollout_runner.context import RunnerOptions
from rollout_runner.environment import Environment, NoEnvironment
from rollout_runner.redact import MIN_SECRET_LENGTH, RedactingFilter, Redactor
from rollout_runner.shim_environment import ShimEnvironment
from rollout_runner.spec import (
    AgentEnv,
    load_pod_created_at,
    load_spec,
    load_try,
    resolve_agent_env,
)
from rollout_runner.trial import TrialReport, run_trial, trial_names

if TYPE_CHECKING:
    from rollout_runner.shard import ShardReport

_IMPORTS.resume()

log = logging.getLogger("rollout_runner")

Storage = DirectoryStore | tuple[StorageLocation, StorageCredentials | None]
"""Where the trial's files go: a directory (local mode), or a bucket and its credentials."""

EXIT_OK = 0
EXIT_RUNNER_FAILED = 1
EXIT_BAD_INPUT = 2

DESCRIPTION = """\
Run one trial of a RolloutTrial in its Pod: wait for the environment container's shim, fetch the
task, place the instruction, run the agent's install and execute scripts (or the oracle's
solution) and the verifier through the shim, then upload the trial's files and write a summary to
the termination log.
"""

EPILOG = f"""\
trial spec:
  The RolloutTrial's .spec as JSON (camelCase, as in the resource): from the file given with
  --spec, else from the environment variable {SPEC_ENV_VAR}. Agent env values that come from
  Secrets are not in the spec: each one (<NAME>) is read from this process's own environment
  variable {AGENT_ENV_PREFIX}<NAME> (the operator sets it from the same secretKeyRef).

timings:
  {POD_CREATED_ENV_VAR} (RFC 3339, e.g. 2025-01-15T10:30:00Z) is when the operator created the
  trial's Pod: result.json's started_at and environment_setup_started_at are that moment, and
  environment_setup_sec and total_sec include the scheduling, image pull and container start
  before the runner started. Unset: the trial is timed from the runner's start. A time later
  than the runner's start (the nodes' clocks disagree) is not used: the runner logs a warning,
  and error.txt, when the trial has one, notes it.
  {TRY_ENV_VAR} (1, 2, ...) is which try at the trial this Pod is (a lost Pod's trial runs
  again in a new one): result.json's rollout.tries. Unset: left out.

storage (environment variables):
  {ENV_BUCKET:<32} bucket with tasks/ and jobs/ (required)
  {ENV_PREFIX:<32} key prefix (default: none)
  {ENV_ENDPOINT:<32} S3 endpoint URL, e.g. http://minio:9000 (default: AWS S3)
  {ENV_REGION:<32} region (default: AWS_REGION, AWS_DEFAULT_REGION, us-east-1)
  {ENV_PATH_STYLE:<32} true/false: path-style addressing, as MinIO needs
  {ENV_CREDENTIALS_DIR:<32} mounted Secret with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
  {"":<32} (and AWS_SESSION_TOKEN); else those variables, else
  {"":<32} boto3's default chain (IRSA, instance profile)
  {ENV_DIR:<32} instead of a bucket: an absolute path to a directory
  {"":<32} that holds the same keys as files (local mode); then
  {"":<32} no bucket, endpoint or credentials (set one or the other)
  {ENV_JOBS_DIR:<32} with {ENV_DIR}: where the jobs' files go instead
  {"":<32} (<prefix>/jobs/<job>/... is <it>/<job>/...)
  The task is read from <prefix>/tasks/<taskContentHash>.tar.gz; the trial's files go to
  <prefix>/jobs/<job>/<agent>/<dataset>/<task>__<attempt>/ (setup/, command/, logs/,
  error.txt, and result.json last). In a directory, each file is written under a temporary
  name and renamed, so a result.json there is always whole.

data rows:
  A spec with `rows` is a shard of a data dataset: taskContentHash names its rows archive,
  and each (row, attempt) of rows.items gets its own trial directory, <row id>__<attempt>/
  (result.json, row.json with its results.jsonl line, command/, logs/verifier/). The install
  runs once; a later try ({TRY_ENV_VAR} above 1) keeps the rows an earlier try recorded.
  {EVALUATOR_API_KEY_ENV} is the llm_judgement evaluator's API key, if it has one.

outcome:
  The termination log gets compact JSON (at most 4096 bytes): reward, error {{type, message}},
  durations, timestamps, result_uri, upload_error, and runner: when the runner started, ended
  its start-up, saw its environment ready and ended. Secret agent env values (at least
  {MIN_SECRET_LENGTH} characters) are replaced by *** in everything the runner writes or uploads.
  Unless the spec sets preserveEnv, the environment is told to exit at the end; with it, the
  environment keeps running (the Pod stays Running) for inspection.

exit status:
  {EXIT_OK}  a trial result was produced (whatever the trial's outcome, and even if uploading
     failed: the termination log says so in upload_error)
  {EXIT_RUNNER_FAILED}  the runner itself failed before producing a result
  {EXIT_BAD_INPUT}  the spec, the agent's Secret env or the storage settings are missing or invalid,
     or {POD_CREATED_ENV_VAR} is not a time, or {TRY_ENV_VAR} not a number from 1
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout-runner",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--spec", type=Path, help=f"file with the trial spec as JSON (default: ${SPEC_ENV_VAR})"
    )
    parser.add_argument(
        "--control-dir",
        type=Path,
        default=Path(CONTROL_DIR),
        help="the shim's control directory, shared with the environment (default: %(default)s)",
    )
    parser.add_argument(
        "--logs-dir",
        type=Path,
        default=Path("/logs"),
        help="the environment's /logs as mounted here (default: %(default)s)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="private directory for the task's files (default: a new temporary directory)",
    )
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=termination.DEFAULT_PATH,
        help="where the outcome is written (default: %(default)s)",
    )
    parser.add_argument(
        "--ready-timeout-sec",
        type=positive_seconds,
        default=600.0,
        help="how long the environment may take to become ready (default: %(default)s)",
    )
    parser.add_argument(
        "--upload-timeout-sec",
        type=positive_seconds,
        default=600.0,
        help="deadline for uploading the trial's files (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error", "critical"],
        help="log level (default: the spec's logLevel)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """The `rollout-runner` console script."""
    code = run(argv)
    # Everything is written and closed; the interpreter's teardown (tens of milliseconds with
    # boto3 loaded, and a wait for any storage thread still retrying) would add nothing.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: Sequence[str] | None = None) -> int:
    startup = CollectorPause()
    try:
        return _run(argv, startup)
    finally:
        startup.resume()


def _run(argv: Sequence[str] | None, startup: CollectorPause) -> int:
    process_started = process_started_at()
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=(args.log_level or "info").upper(), handlers=[handler], force=True)
    try:
        spec = load_spec(args.spec, os.environ)
        agent_env = resolve_agent_env(spec.agent, os.environ)
        pod_created_at = load_pod_created_at(os.environ)
        try_number = load_try(os.environ)
        storage: Storage = directory_from_env() or storage_from_env()
    except InvalidInput as err:
        return _fail(args.termination_log, f"The runner's input is invalid: {err}", EXIT_BAD_INPUT)
    credentials = None if isinstance(storage, DirectoryStore) else storage[1]
    storage_secrets = credentials.secrets() if credentials else []
    evaluator_key = os.environ.get(EVALUATOR_API_KEY_ENV) or None
    key_secret = [evaluator_key] if evaluator_key else []
    redactor = Redactor([*agent_env.secrets, *storage_secrets, *key_secret], keep=trial_names(spec))
    handler.addFilter(RedactingFilter(redactor))
    if args.log_level is None:
        logging.getLogger().setLevel(spec.log_level.value.upper())
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="rollout-runner-"))
    options = RunnerOptions(
        work_dir=work_dir,
        logs_dir=args.logs_dir,
        ready_timeout_sec=args.ready_timeout_sec,
        upload_timeout_sec=args.upload_timeout_sec,
    )
    try:
        report, times = asyncio.run(
            _run_trial(
                spec,
                storage,
                args.control_dir,
                agent_env,
                options,
                pod_created_at,
                try_number,
                evaluator_key,
                started=startup.resume,
            )
        )
    except Exception as err:
        log.exception("the runner failed")
        return _fail(
            args.termination_log,
            f"The runner failed: {type(err).__name__}: {err}",
            EXIT_RUNNER_FAILED,
            redactor,
        )
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)
    times = times.model_copy(update={"started_at": process_started, "ended_at": datetime.now(UTC)})
    termination_log.write(args.termination_log, report.termination_message(times))
    return EXIT_OK


async def _run_trial(
    spec: RolloutTrialSpec,
    storage: Storage,
    control_dir: Path,
    agent_env: AgentEnv,
    options: RunnerOptions,
    pod_created_at: datetime | None,
    try_number: int | None,
    evaluator_key: str | None = None,
    *,
    started: Callable[[], None],
) -> tuple[TrialReport | ShardReport, RunnerTimes]:
    """Run the trial; its report, and when its start-up ended and its environment was ready."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A bucket's client is made here, where a failure is the runner's, reported as such.
    store: Store = storage if isinstance(storage, DirectoryStore) else ObjectStore(*storage)
    started()
    trial_started = datetime.now(UTC)
    environment: Environment = (
        ShimEnvironment(control_dir) if spec.needs_environment else NoEnvironment()
    )
    # A shard of data rows, or one task's trial: the same inputs, and a report either way.
    run: Callable[..., Awaitable[TrialReport | ShardReport]] = run_trial
    if spec.rows is not None:
        from rollout_runner.shard import run_shard  # only a shard needs it

        run = partial(run_shard, evaluator_key=evaluator_key)
    report = await run(
        spec,
        environment,
        store,
        agent_env=agent_env,
        options=options,
        stop=stop,
        began_at=pod_created_at,
        try_number=try_number,
    )
    times = RunnerTimes(trial_started_at=trial_started, environment_ready_at=environment.ready_at)
    return report, times


def _fail(path: Path, message: str, code: int, redactor: Redactor | None = None) -> int:
    message = redactor.text(message) if redactor else message
    log.error("%s", message)
    fields = termination.from_result(None, result_uri=None, upload_error=None)
    fields["error"] = {"type": ErrorType.INTERNAL_ERROR.value, "message": message}
    termination_log.write(path, termination.render(fields))
    return code


if __name__ == "__main__":
    main()
