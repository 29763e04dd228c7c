"""A task's environment/Dockerfile, read for what it means without building it (seed 004's lifts).

Many tasks' Dockerfiles only name a base image and a working directory (`FROM ubuntu:24.04`,
`WORKDIR /app`). Such a Dockerfile needs no build: the trial can run its `FROM` image directly,
with the working directory and environment variables it sets. `lift` says whether a Dockerfile is
one of those, and what it sets, or why it needs a build:

- liftable instructions: one `FROM` (no `--platform`, an optional `AS name`), `WORKDIR`,
  `ENV` and `LABEL`, `ARG` (a default before `FROM` is substituted into it), and `CMD`,
  `ENTRYPOINT` and `EXPOSE`, which change nothing for a trial (the shim replaces the command);
- anything else (`RUN`, `COPY`, `ADD`, `USER`, a second `FROM`, ...) needs a build. `USER` does
  because a Pod can run as a numeric user only, and the image's user by name is the image's to
  say;
- a value with `$` in `WORKDIR` or `ENV` needs a build too: Docker expands it from the image's
  environment, which is not known without the image.

Values the task's task.toml sets always win over lifted ones (`rollout.api.taskdir`). `parse`
splits a Dockerfile into instructions the way Docker does (comments, parser directives, line
continuations), and raises DockerfileError for text Docker would refuse.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from posixpath import join, normpath

LIFTABLE = frozenset({"FROM", "WORKDIR", "ENV", "LABEL", "ARG", "CMD", "ENTRYPOINT", "EXPOSE"})
KNOWN = LIFTABLE | frozenset(
    {
        "RUN", "COPY", "ADD", "USER", "VOLUME", "SHELL", "STOPSIGNAL", "HEALTHCHECK",
        "ONBUILD", "MAINTAINER",
    }
)  # fmt: skip
"""Every instruction Docker knows: another word is an error, as for `docker build`."""

_DIRECTIVE = re.compile(r"#\s*([A-Za-z]+)\s*=\s*(\S+)\s*$")
_ARG_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class DockerfileError(ValueError):
    """A Dockerfile Docker would refuse: what is wrong and on which line."""


@dataclass(frozen=True)
class Instruction:
    keyword: str
    """Upper case: FROM, RUN, ..."""
    arguments: str
    line: int
    """Where the instruction starts (1-based)."""


@dataclass(frozen=True)
class Lift:
    """What a Dockerfile that needs no build sets: its image, working directory and env."""

    image: str
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def parse(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile, continuation lines joined and comments dropped."""
    lines = text.splitlines()
    escape = "\\"
    for line in lines:  # parser directives: comments of a special form at the very top
        match = _DIRECTIVE.match(line)
        if match is None:
            break
        if match.group(1).lower() == "escape":
            escape = match.group(2)
            if escape not in ("\\", "`"):
                raise DockerfileError(f"the escape directive must be \\ or `, not {escape!r}")
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith(escape):
            pending.append(stripped[: -len(escape)])
            continue
        pending.append(stripped)
        instructions.append(_instruction(" ".join(pending), start))
        pending = []
    if pending and " ".join(pending).strip():
        instructions.append(_instruction(" ".join(pending), start))
    if not instructions:
        raise DockerfileError("it has no instructions")
    return instructions


def _instruction(text: str, line: int) -> Instruction:
    keyword, _, arguments = text.strip().partition(" ")
    keyword = keyword.upper()
    if keyword not in KNOWN:
        raise DockerfileError(f"line {line}: unknown instruction {keyword}")
    return Instruction(keyword, arguments.strip(), line)


def lift(text: str) -> Lift | str:
    """The Lift of a Dockerfile that needs no build, else why it needs one (a sentence).

    Raises DockerfileError when the Dockerfile is not one Docker would build.
    """
    instructions = parse(text)
    args: dict[str, str] = {}
    image: str | None = None
    workdir: str | None = None
    env: dict[str, str] = {}
    for instruction in instructions:
        keyword, arguments, line = instruction.keyword, instruction.arguments, instruction.line
        where = f"{keyword} at line {line}"
        if keyword not in LIFTABLE:
            return f"{where} needs a build"
        if keyword == "ARG" and image is None:
            name, has_default, default = arguments.partition("=")
            if has_default:
                args[name.strip()] = _unquote(default.strip(), where)
        elif keyword == "FROM":
            if image is not None:
                return f"{where} starts a second stage, which needs a build"
            image = _from_image(arguments, args, where)
        elif image is None and keyword != "ARG":
            raise DockerfileError(f"line {line}: {keyword} before FROM")
        elif keyword == "WORKDIR":
            if "$" in arguments:
                return f"{where} names a variable, which only a build expands"
            path = _unquote(arguments, where)
            workdir = normpath(join(workdir or "/", path))
        elif keyword == "ENV":
            pairs = _env_pairs(arguments, where)
            if any("$" in value for value in pairs.values()):
                return f"{where} names a variable, which only a build expands"
            env.update(pairs)
    if image is None:
        raise DockerfileError("it has no FROM")
    return Lift(image, workdir, env)


def _from_image(arguments: str, args: dict[str, str], where: str) -> str:
    words = arguments.split()
    if not words or words[0].startswith("--"):
        raise DockerfileError(f"{where}: FROM with options (--platform) needs a build")
    if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
        raise DockerfileError(f"{where}: expected FROM <image> [AS <name>], got {arguments!r}")

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in args:
            raise DockerfileError(
                f"{where}: FROM uses ${name}, an ARG with no default before FROM: give it one"
            )
        return args[name]

    image = _ARG_REFERENCE.sub(substitute, words[0])
    if not image or image.lower() == "scratch":
        raise DockerfileError(f"{where}: FROM {image or '(empty)'} has no shell to run in")
    return image


def _env_pairs(arguments: str, where: str) -> dict[str, str]:
    """`ENV a=1 b="two words"`, or the legacy `ENV name value with spaces`."""
    try:
        words = shlex.split(arguments, posix=True)
    except ValueError as err:
        raise DockerfileError(f"{where}: {err}") from None
    if not words:
        raise DockerfileError(f"{where}: ENV needs a name and a value")
    if "=" not in words[0]:  # the legacy form: one name, the rest of the line its value
        name, _, value = arguments.partition(" ")
        return {name: _unquote(value.strip(), where)}
    pairs: dict[str, str] = {}
    for word in words:
        name, has_value, value = word.partition("=")
        if not has_value or not name:
            raise DockerfileError(f"{where}: {word!r} is not NAME=VALUE")
        pairs[name] = value
    return pairs


def _unquote(value: str, where: str) -> str:
    try:
        words = shlex.split(value, posix=True)
    except ValueError as err:
        raise DockerfileError(f"{where}: {err}") from None
    return " ".join(words)
