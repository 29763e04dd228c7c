"""`rollout agents list` and `rollout agents show NAME`: the built-in agents
(`rollout.api.catalogue`).

`list` prints one line per built-in: its name, command, pinned version, the API keys it needs
and what it is. `show` prints one as a job.yaml agents entry with its whole install and execute
scripts, its keys as `${VAR}`s and its parameters as the env its scripts read, so that it can be
copied into a job and changed (an agent that gives both scripts is the user's own: the env lines
then carry the version, model and flags). `show --script install|execute` prints one script
alone.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import yaml

from rollout.api import catalogue
from rollout.cli.errors import CliError, ExitCode

EPILOG = """\
examples:
  rollout agents list                         the built-in agents and the keys they need
  rollout agents show claude-code             one as a job.yaml entry, scripts and all
  rollout agents show codex --script execute  its execute script alone

In job.yaml:
  agents:
    - name: claude-code                       the built-in, its pinned version
      model: claude-sonnet-4-5                optional: passed the way the CLI takes it
      version: "2.0.14"                       optional: another version to install
      flags: ["--max-turns", "30"]            optional: extra arguments of the CLI
    - name: codex-mini                        another name: say which built-in
      builtin: codex
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "agents",
        help="list the built-in agents, or show one's scripts and keys",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the built-in agents, one a line")
    listing.set_defaults(handler=run_list)
    show = actions.add_parser("show", help="one built-in agent as a job.yaml agents entry")
    show.add_argument("name", metavar="NAME", help="a built-in agent (see `rollout agents list`)")
    show.add_argument(
        "--script",
        choices=("install", "execute"),
        help="print this script alone, as it runs",
    )
    show.set_defaults(handler=run_show)


def run_list(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    write_list(sys.stdout)
    return ExitCode.OK


def run_show(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    agent = catalogue.get(args.name)
    if agent is None:
        raise CliError(catalogue.unknown_builtin_message(args.name))
    if args.script is not None:
        sys.stdout.write(agent.install_script if args.script == "install" else agent.execute_script)
        return ExitCode.OK
    write_show(agent, sys.stdout)
    return ExitCode.OK


def keys_text(agent: catalogue.BuiltinAgent) -> str:
    """Its keys: the default ones, then those a model's provider selects."""
    parts = [" ".join(agent.keys.default) or "none"]
    parts += [
        f"{provider}/…: {' '.join(keys) or 'none'}"
        for provider, keys in agent.keys.providers.items()
    ]
    return "; ".join(parts)


def write_list(out: TextIO) -> None:
    rows = [("NAME", "COMMAND", "VERSION", "KEYS", "DESCRIPTION")]
    for name in catalogue.names():
        agent = catalogue.get(name)
        assert agent is not None  # listed from the same directory
        keys = " ".join(agent.keys.default) or "none"
        if agent.keys.providers:
            keys += " (others by model provider)"
        rows.append((name, agent.command, agent.version, keys, agent.description))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        out.write("  ".join([*cells, row[4]]).rstrip() + "\n")


def write_show(agent: catalogue.BuiltinAgent, out: TextIO) -> None:
    model = agent.model or "the CLI's own default"
    out.write(
        f"# {agent.name}: {agent.description}\n"
        f"# command: {agent.command}; its flags: {agent.docs}\n"
        f"# default version: {agent.version}; default model: {model}\n"
        f"# keys: {keys_text(agent)}\n"
        f"# As a built-in, `- name: {agent.name}` is all a job needs (model:, version:, flags:\n"
        f"# and env: are optional). Below, the same agent spelled out, to copy and change.\n"
    )
    entry: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description,
        "install": agent.install_script,
        "execute": agent.execute_script,
        "env": {
            **{key: f"${{{key}}}" for key in agent.keys_for(agent.model)},
            **catalogue.parameter_env(agent.version, agent.model, []),
        },
    }
    yaml.dump(
        {"agents": [entry]},
        out,
        Dumper=_BlockDumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )


class _BlockDumper(yaml.SafeDumper):
    """Scripts as `|` blocks, which read like the scripts they are."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _text)
