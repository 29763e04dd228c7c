"""`rollout benchmarks run`: a job made from the command line, then run as `rollout run` runs it.

The job is a job.yaml mapping (one agent, one dataset) written to a job file in the workspace
(`<cache>/benchmarks/jobs/<job>.yaml`) and handed to `rollout.cli.run.run` with the arguments
`rollout run <that file>` would get: the same checks, progress, download and summary, locally
(`--local`) or on the cluster. The file stays, so the same job can be run again, resumed
(`rollout run FILE --local --resume`) or edited; it is removed when the job is refused before
anything started.

Header values given on the command line have been expanded by the shell, so they are treated as
secrets: the job says `${ROLLOUT_BENCHMARK_HEADER_<n>}` and the value reaches the run only through
the environment it is given, and from there the job's Secret, as agent env `${VAR}`s do. No
header value is written to the job file, config.json or the RolloutJob.
"""

from __future__ import annotations

import argparse
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rollout.api.errors import InvalidInput
from rollout.api.job import default_job_name
from rollout.cli import run
from rollout.cli.errors import Problems
from rollout.cli.prepare import ENV_CACHE_DIR

HEADER_VARIABLE = "ROLLOUT_BENCHMARK_HEADER_{}"
"""The variable that carries the n-th --header's value (from 1)."""
DEFAULT_AGENT_NAME = "agent"
DEFAULT_TIMEOUT_SEC = 60.0
"""Seed 003's per-request timeout."""

_NAME_BEFORE = re.compile(
    r"^\s*([!#$%&'*+.^_`|~0-9A-Za-z-]*[A-Za-z][!#$%&'*+.^_`|~0-9A-Za-z-]*)\s*(:|=(?=[^=]))"
)
"""What looks like a header's name before a wrong separator (`Name:value`, `Name=value`);
never a part of a token (base64, hex and JWTs hold no colon, and `=` only as padding at the
end)."""

NOT_SHARED = frozenset({"job_file", "handler", "max_tasks", "task_ids"})
"""Arguments of `rollout run` that are not the same flags here: the job carries these."""


@dataclass(frozen=True)
class Header:
    """One `--header 'Name: value'`; the value is never shown."""

    name: str
    value: str = field(repr=False)


def parse_header(text: str, position: int = 1) -> Header:
    """One --header (the `position`-th); ValueError for one that is not 'Name: value', whose
    message never holds the value, at most the name."""
    name, sep, value = text.partition(": ")
    if not sep:
        guess = _NAME_BEFORE.match(text)
        named = f" ({guess[1]!r})" if guess else ""
        raise ValueError(
            f"--header #{position}{named} is not written 'Name: value' (the name, a colon and a "
            "space, then the value); it is not shown, as it may hold a secret"
        )
    # The name is checked with the job, as job.yaml's would be (rollout.api's rules).
    return Header(name.strip(), value.strip())


class HeaderAction(argparse.Action):
    """`--header`, repeatable: each parsed as it comes, a bad one a usage error (exit 2)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        headers: list[Header] = list(getattr(namespace, self.dest, None) or [])
        try:
            headers.append(parse_header(str(values), len(headers) + 1))
        except ValueError as err:
            parser.error(str(err))
        setattr(namespace, self.dest, headers)


@dataclass(frozen=True)
class Agent:
    """The job's agent and the environment values its `${VAR}`s take."""

    entry: dict[str, Any]
    secrets: dict[str, str] = field(default_factory=dict, repr=False)


def endpoint_agent(name: str, url: str, headers: list[Header], timeout_sec: float | None) -> Agent:
    """Seed 003's endpoint agent; each header value by reference (see the module docstring)."""
    entry: dict[str, Any] = {"name": name, "endpoint": url}
    secrets: dict[str, str] = {}
    if headers:
        entry["headers"] = {}
        for number, header in enumerate(headers, start=1):
            variable = HEADER_VARIABLE.format(number)
            entry["headers"][header.name] = f"${{{variable}}}"
            secrets[variable] = header.value
    entry["timeout_sec"] = DEFAULT_TIMEOUT_SEC if timeout_sec is None else timeout_sec
    return Agent(entry, secrets)


def repeated_header(headers: list[Header]) -> str | None:
    """The first header name given twice (names are case-insensitive), or None."""
    seen: set[str] = set()
    for header in headers:
        if header.name.lower() in seen:
            return header.name
        seen.add(header.name.lower())
    return None


def command_agent(name: str, command: str) -> Agent:
    """A script agent whose execute is `command` (run, unlike seed 003's backend)."""
    return Agent({"name": name, "execute": command})


def job_mapping(name: str, dataset: Path, agent: Agent, args: argparse.Namespace) -> dict[str, Any]:
    """The job.yaml mapping: only what the command line says, job.yaml's defaults for the rest
    (config.json is this mapping)."""
    job: dict[str, Any] = {"name": name}
    if args.attempts is not None:
        job["n_attempts"] = args.attempts
    if args.concurrency is not None:
        job["n_concurrent_trials"] = args.concurrency
    if args.environment_type is not None:
        job["environment"] = {"type": args.environment_type}
    if args.max_tasks is not None:
        job["max_tasks"] = args.max_tasks
    if args.task_ids:
        job["task_ids"] = list(args.task_ids)
    job["agents"] = [agent.entry]
    job["datasets"] = [{"path": str(dataset)}]
    return job


def default_name(dataset: str) -> str:
    """`<dataset>__YYYY-MM-DD__HH-mm-ss` (UTC): a new job each time."""
    return f"{dataset}__{default_job_name()}"


def write_job_file(jobs_dir: Path, job: Mapping[str, Any]) -> Path:
    """`<jobs_dir>/<job name>.yaml`, written whole or not at all."""
    jobs_dir.mkdir(parents=True, exist_ok=True)
    path = jobs_dir / f"{job['name']}.yaml"
    scratch = jobs_dir / f".tmp-{uuid.uuid4().hex}.yaml"
    text = (
        "# Made by `rollout benchmarks run`; run it again with `rollout run <this file>`.\n"
        + yaml.safe_dump(dict(job), sort_keys=False, allow_unicode=True)
    )
    try:
        scratch.write_text(text, encoding="utf-8")
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)
    return path


def run_job(
    job_file: Path,
    args: argparse.Namespace,
    environ: Mapping[str, str],
    agent: Agent,
    cache: Path,
) -> int:
    """`rollout run <job_file>` with this command's shared flags, in an environment that also
    holds the header values and the cache directory."""
    run_env = {**environ, ENV_CACHE_DIR: str(cache), **agent.secrets}
    try:
        return run.run(run_arguments(job_file, args), run_env)
    except (Problems, InvalidInput) as err:
        # Refused before anything started: the job file is of no use. Its fields are flags here.
        job_file.unlink(missing_ok=True)
        messages = [str(p) for p in err.problems] if isinstance(err, InvalidInput) else err.messages
        hint = (
            "the job was made from this command line: its name is --job-name, agents[0] the "
            "--agent-* flags, datasets[0] the benchmark, environment.type --environment-type"
        )
        existing = err.hint if isinstance(err, Problems) else None
        raise Problems(messages, hint=f"{existing}\nhint: {hint}" if existing else hint) from None


def run_arguments(job_file: Path, args: argparse.Namespace) -> argparse.Namespace:
    """What `rollout run <job_file>` would be given, with every flag this command shares with it
    (the cluster, storage, --local, --jobs-dir, ...) taken from `args`; `rollout run`'s own
    defaults for the rest, so that a flag added there needs nothing here."""
    parser = argparse.ArgumentParser(add_help=False)
    run.register(parser.add_subparsers())
    namespace = parser.parse_args(["run", str(job_file)])
    for key, value in vars(args).items():
        if key not in NOT_SHARED and hasattr(namespace, key):
            setattr(namespace, key, value)
    return namespace
