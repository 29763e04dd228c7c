"""`rollout logs JOB TRIAL`: a trial's captured output, read from object storage.

Phases and their files (under the trial's `<agent>/<dataset>/<task>__<n>/`):

- install:  setup/stdout.txt, setup/stderr.txt (the agent's install script)
- agent:    command/stdout.txt, command/stderr.txt (the agent's execute script)
- verifier: logs/verifier/stdout.txt, logs/verifier/stderr.txt (tests/test.sh)

Without --phase, all three and error.txt, each under a `==> file <==` header. A trial is named
`<agent>/<dataset>/<task>__<n>` (its place in the results) or by its RolloutTrial's name
(`kubectl get rt`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from rollout.api.errors import InvalidInput
from rollout.api.layout import (
    COMMAND_STDERR,
    COMMAND_STDOUT,
    ERROR_TXT,
    SETUP_STDERR,
    SETUP_STDOUT,
    trial_path,
    trial_prefix,
)
from rollout.cli import config, kube
from rollout.cli.errors import CliError, ExitCode
from rollout.cli.jobs import JobRef, connect_optional, find_job, results_store

VERIFIER_STDOUT = "logs/verifier/stdout.txt"
VERIFIER_STDERR = "logs/verifier/stderr.txt"
PHASE_FILES: dict[str, tuple[str, ...]] = {
    "install": (SETUP_STDOUT, SETUP_STDERR),
    "agent": (COMMAND_STDOUT, COMMAND_STDERR),
    "verifier": (VERIFIER_STDOUT, VERIFIER_STDERR),
}
ALL_FILES = (*(f for files in PHASE_FILES.values() for f in files), ERROR_TXT)

EPILOG = """\
examples:
  rollout logs my-eval oracle/tasks/hello-offline__1
  rollout logs my-eval oracle/tasks/hello-offline__1 --phase verifier
  rollout logs my-eval my-eval-oracle-tasks-hello-offline-1-abcdefghijkl --phase agent
"""


@dataclass(frozen=True)
class TrialPlace:
    """A trial's place in its job's results."""

    agent: str
    dataset: str
    task: str
    attempt: int

    def path(self) -> PurePosixPath:
        return trial_path(self.agent, self.dataset, self.task, self.attempt)


def parse_trial_path(text: str) -> TrialPlace:
    """`<agent>/<dataset>/<task>__<n>`, as results name a trial."""
    parts = text.strip("/").split("/")
    task, sep, attempt = parts[-1].rpartition("__")
    if len(parts) != 3 or not sep or not attempt.isdigit() or int(attempt) < 1:
        raise InvalidInput.one(
            "command line", "TRIAL", f"{text!r} is not <agent>/<dataset>/<task>__<n>"
        )
    place = TrialPlace(parts[0], parts[1], task, int(attempt))
    try:
        place.path()
    except ValueError as err:
        raise InvalidInput.one("command line", "TRIAL", str(err)) from None
    return place


def locate_trial(cluster: kube.Cluster, job: JobRef, text: str) -> TrialPlace:
    """A TRIAL argument as a place: parsed when it has slashes, else read from the RolloutTrial."""
    if "/" in text:
        return parse_trial_path(text)
    trial = cluster.get_trial(text)
    if trial is None:
        raise CliError(
            f"no RolloutTrial {text} in {cluster.where}; name the trial as "
            "<agent>/<dataset>/<task>__<n> (e.g. oracle/tasks/hello__1)"
        )
    spec = trial.get("spec") or {}
    owner = str(spec.get("jobName") or "")
    if owner and owner != job.job_name:
        raise CliError(f"RolloutTrial {text} belongs to job {owner}, not {job.job_name}")
    return TrialPlace(
        agent=str((spec.get("agent") or {}).get("name")),
        dataset=str(spec.get("datasetName")),
        task=str(spec.get("taskName")),
        attempt=int(spec.get("attempt") or 1),
    )


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "logs",
        help="print a trial's install, agent and verifier output",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", metavar="JOB", help="the RolloutJob's name, or the job's name")
    parser.add_argument(
        "trial", metavar="TRIAL", help="<agent>/<dataset>/<task>__<n>, or a RolloutTrial's name"
    )
    parser.add_argument("--phase", choices=sorted(PHASE_FILES), help="only this phase's output")
    kube.add_cluster_arguments(parser)
    config.add_storage_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings = config.resolve(args, environ)
    if "/" in args.trial:
        parse_trial_path(args.trial)  # a bad TRIAL is reported before any request
    cluster = connect_optional(args, environ)
    job = find_job(cluster, args.job)
    if cluster is None and "/" not in args.trial:
        raise CliError("without a cluster, name the trial as <agent>/<dataset>/<task>__<n>")
    place = (
        parse_trial_path(args.trial) if cluster is None else locate_trial(cluster, job, args.trial)
    )
    store = results_store(job, settings, environ)
    base = trial_prefix(
        store.location.prefix, job.job_name, place.agent, place.dataset, place.task, place.attempt
    )
    present = set(store.list_keys(base))
    wanted = PHASE_FILES[args.phase] if args.phase else ALL_FILES
    found = [name for name in wanted if base + name in present]
    if not found:
        what = f"no {args.phase} output" if args.phase else "no output"
        raise CliError(
            f"{what} of trial {place.path()} of job {job.job_name} in storage at "
            f"{store.uri(base)}: the phase has not run, or the trial has not finished yet"
        )
    out = sys.stdout
    for index, name in enumerate(found):
        if index:
            out.write("\n")
        out.write(f"==> {name} <==\n")
        text = store.get_bytes(base + name).decode("utf-8", errors="replace")
        out.write(text if text.endswith("\n") or not text else text + "\n")
    out.flush()
    return ExitCode.OK
