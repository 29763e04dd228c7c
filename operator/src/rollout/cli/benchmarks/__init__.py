"""`rollout benchmarks list | pull | run` (seed 003): benchmark datasets from a registry.json or
your own, kept in a local workspace, and run against an agent in one command.

- `list`: the datasets of the registry (`--registry PATH|URL`, else $ROLLOUT_REGISTRY, else the
  config file's `registry`, else the public registry) and those pulled into the workspace, one
  line each: name, version, tasks (or rows), source. With the registry out of reach it lists
  the workspace and says why.
- `pull NAME[@VERSION]`: the registry dataset fetched (tasks with git) into the workspace;
  `pull PATH` copies a local dataset there (a directory of tasks, a data dataset, a .jsonl or
  .json file) under its name, version `local`. Pulling what is there does nothing.
- `run NAME --agent-endpoint URL [--header 'K: V' ...] | --agent-command CMD`: a job of that one
  agent on that dataset (pulled first when it is not there), run as `rollout run` runs a job
  file: on the cluster, or on this machine with --local.

The workspace is `<cache>/benchmarks/` (cache: --cache-dir, else $ROLLOUT_CACHE_DIR, else
$XDG_CACHE_HOME/rollout, else ~/.cache/rollout).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from rollout.api.dataset import load_dataset_path
from rollout.api.environment import EnvironmentType
from rollout.api.errors import InvalidInput
from rollout.api.layout import check_component
from rollout.cli import config, kube
from rollout.cli.benchmarks.runjob import (
    DEFAULT_AGENT_NAME,
    DEFAULT_TIMEOUT_SEC,
    HEADER_VARIABLE,
    Agent,
    HeaderAction,
    command_agent,
    default_name,
    endpoint_agent,
    job_mapping,
    repeated_header,
    run_job,
    write_job_file,
)
from rollout.cli.benchmarks.workspace import (
    DEFAULT_REGISTRY,
    ENV_REGISTRY,
    Pulled,
    Workspace,
    choose_registry,
    looks_like_path,
    parse_reference,
    read_registry,
)
from rollout.cli.errors import ExitCode, Problems, note
from rollout.cli.prepare import positive_int
from rollout.cli.progress import add_operator_arguments

EPILOG = f"""\
examples:
  rollout benchmarks list                                  the registry's and the pulled ones
  rollout benchmarks pull terminal-bench@2.0               fetch it into the workspace
  rollout benchmarks pull ./my-bench                       add your own (tasks, rows, .jsonl)
  rollout benchmarks run terminal-bench \\
      --agent-endpoint https://agent.example.com/rollout/eval \\
      --header "Authorization: Bearer $AGENT_RUN_TOKEN" --max-tasks 10 --timeout-seconds 60
  rollout benchmarks run my-bench --agent-command 'python answer.py' --local \\
      --environment-type local --max-tasks 3

Registry: --registry, ${ENV_REGISTRY}, `registry:` in the config file, else
{DEFAULT_REGISTRY}
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "benchmarks",
        help="list, pull and run benchmark datasets (a registry's or your own)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="benchmarks_command", required=True, metavar="COMMAND")

    listing = sub.add_parser(
        "list",
        help="the registry's datasets and those pulled into the workspace",
        description="One line per dataset: name, version, tasks (or rows), and source: "
        "`registry`, `registry, pulled` or `pulled`. With the registry out of reach, the "
        "pulled ones, and why the registry was skipped (exit 0).",
    )
    _add_workspace_arguments(listing)
    listing.set_defaults(handler=list_benchmarks)

    pull = sub.add_parser(
        "pull",
        help="fetch a registry dataset, or copy a local one, into the workspace",
        description="NAME[@VERSION]: the registry's dataset (without a version, the only one "
        "there is), its tasks fetched with git. PATH (with a slash, or a .jsonl/.json file): "
        "a local dataset copied under its name, version `local`. What is pulled already is not "
        "pulled again.",
    )
    pull.add_argument("benchmark", metavar="NAME[@VERSION]|PATH")
    pull.add_argument(
        "--force", action="store_true", help="pull again, replacing what the workspace holds"
    )
    _add_workspace_arguments(pull)
    pull.set_defaults(handler=pull_benchmark, usage_error=pull.error)

    runner = sub.add_parser(
        "run",
        help="run an agent on a benchmark, as `rollout run` runs a job",
        description="Make a job of one agent (an HTTP endpoint, or a command) on the benchmark "
        "(pulled first when the workspace does not have it; a PATH is run as it is) and run "
        "it as `rollout run` does: the same checks, progress, results and summary. The job "
        "file is kept in the workspace (<cache>/benchmarks/jobs/). Header values are never "
        f"written anywhere: the job refers to ${{{HEADER_VARIABLE.format('<n>')}}}.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    runner.add_argument("benchmark", metavar="NAME[@VERSION]|PATH")
    agent = runner.add_argument_group("the agent (one of --agent-endpoint, --agent-command)")
    kind = agent.add_mutually_exclusive_group(required=True)
    kind.add_argument(
        "--agent-endpoint",
        metavar="URL",
        help="HTTP endpoint that receives each task (seed 003's payload, one POST an attempt)",
    )
    kind.add_argument(
        "--agent-command",
        metavar="CMD",
        help="a command run as a script agent's execute, once a task",
    )
    agent.add_argument(
        "--header",
        dest="headers",
        action=HeaderAction,
        default=[],
        metavar="'NAME: VALUE'",
        help="forwarded to the endpoint (repeatable); the value is kept as a secret",
    )
    agent.add_argument(
        "--timeout-seconds",
        type=float,
        metavar="S",
        help=f"the endpoint's per-request timeout (default: {DEFAULT_TIMEOUT_SEC:g})",
    )
    agent.add_argument(
        "--agent-name",
        default=DEFAULT_AGENT_NAME,
        metavar="NAME",
        help="the agent's name in results (default: %(default)s)",
    )
    job = runner.add_argument_group("the job")
    job.add_argument("--job-name", metavar="NAME", help="default: <benchmark>__<UTC time>")
    job.add_argument("--max-tasks", type=positive_int, metavar="N", help="only the first N")
    job.add_argument(
        "--task-id", dest="task_ids", action="append", metavar="ID", help="only these (repeatable)"
    )
    job.add_argument("--attempts", type=positive_int, metavar="N", help="attempts per task")
    job.add_argument(
        "--concurrency", type=positive_int, metavar="N", help="trials at the same time"
    )
    job.add_argument(
        "--environment-type",
        choices=[t.value for t in EnvironmentType],
        help="job.yaml's environment.type (default: docker; local: the host sandbox with --local)",
    )
    job.add_argument(
        "--jobs-dir", type=Path, metavar="DIR", help="where results go (default: ./jobs)"
    )
    job.add_argument(
        "--local", action="store_true", help="run on this machine (as `rollout run --local`)"
    )
    job.add_argument(
        "--detach", action="store_true", help="submit the job and return without following it"
    )
    job.add_argument(
        "--strict", action="store_true", help="refuse the job when any task cannot run"
    )
    add_operator_arguments(runner)
    _add_workspace_arguments(runner)
    kube.add_cluster_arguments(runner)
    config.add_storage_arguments(runner)
    config.add_runner_image_argument(runner)
    runner.set_defaults(handler=run_benchmark, usage_error=runner.error)


def _add_workspace_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("registry and workspace")
    group.add_argument(
        "--registry",
        metavar="PATH|URL",
        help=f"the registry.json (default: ${ENV_REGISTRY}, the config file's `registry`, "
        "else the public registry)",
    )
    group.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="the cache directory; the workspace is DIR/benchmarks (default: "
        "$ROLLOUT_CACHE_DIR, else $XDG_CACHE_HOME/rollout, else ~/.cache/rollout)",
    )


# --- list -------------------------------------------------------------------------------------


def list_benchmarks(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    workspace = Workspace.of(args.cache_dir, environ)
    pulled = workspace.pulled()
    choice = choose_registry(args.registry, environ)
    lines: list[tuple[str, str, str, str]] = []
    try:
        registry = read_registry(choice)
    except InvalidInput as err:
        reason = "; ".join(p.message for p in err.problems)
        note(
            f"warning: registry {choice} skipped ({reason}); listing the workspace only "
            f"({workspace.root})"
        )
    else:
        from_registry = {(p.name, p.version) for p in pulled if p.record.source == "registry"}
        for dataset in registry.datasets:
            count = len(dataset.tasks)
            key = (dataset.name, dataset.version)
            source = "registry, pulled" if key in from_registry else "registry"
            lines.append((*key, f"{count} task{'' if count == 1 else 's'}", source))
        pulled = [p for p in pulled if (p.name, p.version) not in from_registry]
    lines += [(p.name, p.version, p.size(), "pulled") for p in pulled]
    if not lines:
        note(f"no benchmarks: the workspace ({workspace.root}) has none pulled")
        return ExitCode.OK
    rows = [("NAME", "VERSION", "TASKS", "SOURCE"), *sorted(lines)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
              + "  " + row[3])  # fmt: skip
    return ExitCode.OK


# --- pull -------------------------------------------------------------------------------------


def pull_benchmark(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    workspace = Workspace.of(args.cache_dir, environ)
    if looks_like_path(args.benchmark):
        pulled, fresh = workspace.pull_local(Path(args.benchmark), force=args.force)
        _say_pulled(pulled, fresh)
        return ExitCode.OK
    name, version = _reference(args)
    if not args.force and (there := workspace.find(name, version)):
        for pulled in there:
            _say_pulled(pulled, fresh=False)
        return ExitCode.OK
    registry = read_registry(choose_registry(args.registry, environ))
    pulled, fresh = workspace.pull_registry(registry, name, version, force=args.force)
    _say_pulled(pulled, fresh)
    return ExitCode.OK


def _say_pulled(pulled: Pulled, fresh: bool) -> None:
    if fresh:
        print(f"pulled {pulled.label}: {pulled.size()} into {pulled.path}")
    else:
        print(f"{pulled.label} is already pulled ({pulled.size()}, {pulled.path}): nothing to do")


def _reference(args: argparse.Namespace) -> tuple[str, str | None]:
    try:
        return parse_reference(args.benchmark)
    except ValueError as err:
        args.usage_error(str(err))
        raise  # usage_error exits


# --- run --------------------------------------------------------------------------------------


def run_benchmark(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    agent = _agent(args)
    if args.job_name is not None:
        try:
            check_component(args.job_name, "--job-name")
        except ValueError as err:
            args.usage_error(str(err))
    workspace = Workspace.of(args.cache_dir, environ)
    dataset_name, dataset_path = _dataset(args, environ, workspace)
    name = args.job_name or default_name(dataset_name)
    job = job_mapping(name, dataset_path, agent, args)
    job_file = write_job_file(workspace.jobs_dir, job)
    note(f"job {name}: agent {args.agent_name!r} on {dataset_name}; job file {job_file}")
    return run_job(job_file, args, environ, agent, workspace.cache)


def _agent(args: argparse.Namespace) -> Agent:
    if args.agent_command is not None:
        for flag, given in (
            ("--header", args.headers),
            ("--timeout-seconds", args.timeout_seconds),
        ):
            if given:
                args.usage_error(f"{flag} is for --agent-endpoint, not --agent-command")
        return command_agent(args.agent_name, args.agent_command)
    if (repeated := repeated_header(args.headers)) is not None:
        args.usage_error(f"--header {repeated!r} is given twice")
    if args.timeout_seconds is not None and not args.timeout_seconds > 0:
        args.usage_error("--timeout-seconds must be more than 0")
    return endpoint_agent(args.agent_name, args.agent_endpoint, args.headers, args.timeout_seconds)


def _dataset(
    args: argparse.Namespace, environ: Mapping[str, str], workspace: Workspace
) -> tuple[str, Path]:
    """The benchmark's name and the directory the job runs: a PATH as it is, else the pulled
    dataset, pulled first when the workspace does not have it."""
    if looks_like_path(args.benchmark):
        path = Path(args.benchmark).expanduser().absolute()
        return load_dataset_path(path).name, path
    name, version = _reference(args)
    there = workspace.find(name, version)
    if len(there) > 1:
        labels = ", ".join(p.label for p in there)
        raise Problems([f"{name!r} is pulled in several versions ({labels}): say NAME@VERSION"])
    if there:
        return there[0].name, there[0].path
    registry = read_registry(choose_registry(args.registry, environ))
    pulled, _ = workspace.pull_registry(registry, name, version)
    note(f"pulled {pulled.label}: {pulled.size()} into {pulled.path}")
    return pulled.name, pulled.path
