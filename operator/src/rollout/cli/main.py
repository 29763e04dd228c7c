"""Entry point of the `rollout` command: parses arguments and dispatches to one module a command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rollout.cli import validate

EPILOG = """\
examples:
  rollout validate tasks/hello-world            check one task directory
  rollout validate datasets/my-bench job.yaml   check a dataset and a job file
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollout",
        description="Run agent evaluations and RL rollouts on Kubernetes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
