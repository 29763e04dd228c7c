"""Entry point of the `rollout` command: parses arguments and dispatches to one module a command.

`rollout JOB.yaml` is `rollout run JOB.yaml`: a first argument that is not a command (nor an
option) is taken as a job file. Problems with the input are printed one a line with their file
and field; errors of the cluster, of storage or of the file system in one message, without a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from rollout.api.errors import InvalidInput
from rollout.cli import (
    agents,
    benchmarks,
    cancel,
    check,
    download,
    login,
    logs,
    publish,
    release,
    render,
    run,
    status,
    validate,
)
from rollout.cli.errors import CliError, ExitCode, Problems, os_error_message
from rollout.storage import StorageError

EPILOG = """\
examples:
  rollout login                                 choose the cluster, bucket and credentials, once
  rollout check                                 check what a run needs, one line each
  rollout job.yaml                              run a job on the cluster (= rollout run job.yaml)
  rollout run job.yaml --local                  run it on this machine: no cluster, no bucket
  rollout status my-eval --watch                follow a job
  rollout logs my-eval oracle/tasks/hello__1    a trial's install, agent and verifier output
  rollout download my-eval                      its results into ./jobs/my-eval/
  rollout cancel my-eval                        stop it (results so far stay in storage)
  rollout release --all -A                      free deleted jobs no operator serves
  rollout render job.yaml > rolloutjob.yaml     the manifests, for GitOps
  rollout publish ./tasks                       upload a dataset, print its content address
  rollout benchmarks list                       the registry's benchmarks and the pulled ones
  rollout benchmarks run arith --agent-endpoint URL --max-tasks 3   a benchmark on an agent
  rollout agents list                           the built-in agents (claude-code, codex, ...)
  rollout agents show claude-code               one's scripts and keys, to copy into job.yaml
  rollout validate tasks/hello-world            check one task directory
  rollout validate datasets/my-bench job.yaml   check a dataset and a job file

Cluster: --context and --namespace, else those of ~/.config/rollout/config.yaml (rollout login
writes it), else the kubeconfig's current context and its namespace.
Storage: --storage-* flags, ROLLOUT_STORAGE_* variables or ~/.config/rollout/config.yaml.
"""

COMMAND_MODULES = (
    run,
    status,
    logs,
    download,
    cancel,
    release,
    render,
    publish,
    benchmarks,
    agents,
    check,
    login,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout",
        description="Run agent evaluations and RL rollouts on Kubernetes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    validate.register(commands)
    return parser


def command_names(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and not arguments[0].startswith("-") and arguments[0] not in command_names(parser):
        arguments.insert(0, "run")
    args = parser.parse_args(arguments)
    env = os.environ if environ is None else environ
    try:
        code: int = args.handler(args, env)
    except InvalidInput as err:
        for problem in err.problems:
            print(f"error: {problem}", file=sys.stderr)
        return ExitCode.FAILED
    except Problems as err:
        for message in err.messages:
            print(f"error: {message}", file=sys.stderr)
        if err.hint:
            print(f"hint: {err.hint}", file=sys.stderr)
        return ExitCode.FAILED
    except (CliError, StorageError) as err:
        print(f"error: {err}", file=sys.stderr)
        return ExitCode.FAILED
    except OSError as err:  # a full disk, a name too long, a directory in the way, ...
        print(f"error: {os_error_message(err)}", file=sys.stderr)
        return ExitCode.FAILED
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
