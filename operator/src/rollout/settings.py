"""One way to read settings, for every entry point: the operator, the CLI and the runner.

A `Setting` declares once how a value is given: its environment variable, its command-line flag,
its key in a config file (for the entry points that read one) and how its text is parsed.
`resolve` takes every setting from the first source that gives it, in this order:

1. a command-line flag;
2. the environment variable;
3. the config file;
4. the setting's fallback variables (AWS_REGION for the storage region, as boto3 reads it);

and otherwise leaves it to the model's default. Empty values count as unset, except for a
setting that says an empty value means something (ROLLOUT_PEERING=""), so that a Helm chart can
render every variable and leave some empty.

It remembers where each value came from, so that a bad value is reported where it was written:
a `Problem` whose file is "command line", "environment" or the config file's path, and whose
field is the flag, the variable or the key.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rollout.api.errors import InvalidInput, Problem

ENVIRONMENT = "environment"
COMMAND_LINE = "command line"

Origin = tuple[str, str | None]
"""Where a value was written, as a Problem names it: (file, field)."""


# --- parsing text ---------------------------------------------------------------------------------
# Each parser raises ValueError with a message that can follow "<where>: ".

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def text(value: str) -> str:
    return value


def boolean(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"{value!r} is not true or false")


def whole_number(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number") from None


def seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of seconds") from None
    if not 0 <= number < float("inf"):
        raise ValueError(f"{value!r} must be a finite number of seconds, 0 or more")
    return number


def comma_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# --- declaring and resolving ----------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting: the model field it fills, how a user gives it, and how its text is parsed."""

    name: str
    """The field of the model the value goes to."""
    variable: str
    flag: str
    help: str = ""
    parse: Callable[[str], Any] = text
    metavar: str | None = None
    key: str | None = None
    """Its key in the config file (dotted), for the entry points that read one."""
    fallbacks: tuple[str, ...] = ()
    """Other variables that give it when nothing else does."""
    empty_is_a_value: bool = False
    repeatable: bool = False
    """The flag may be given more than once; the values are joined with commas."""

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments that holds the flag's value."""
        return self.flag.removeprefix("--").replace("-", "_")

    def but(self, **changes: Any) -> Setting:
        """The same setting with some parts changed, e.g. the help text of one entry point."""
        return dataclasses.replace(self, **changes)

    def add_flag(self, parser: argparse._ActionsContainer, *, show_variable: bool) -> None:
        """Add the flag to `parser` (or an argument group), defaulting to None ("not given")."""
        kwargs: dict[str, Any] = {"dest": self.dest, "default": None, "help": self.help}
        if show_variable:
            kwargs["help"] = f"{self.help} [${self.variable}]"
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        if self.repeatable:
            kwargs["action"] = "append"
        parser.add_argument(self.flag, **kwargs)


@dataclass(frozen=True)
class ConfigFileValues:
    """The values a config file gives, by setting name, already typed by the file's model."""

    path: str
    values: Mapping[str, Any]


@dataclass
class Resolved:
    """The values of some settings by name, where each came from, and the problems so far."""

    settings: Mapping[str, Setting]
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def given(self, name: str) -> bool:
        """Whether the setting was given by its own flag, variable or key (not a fallback)."""
        setting = self.settings.get(name)
        origin = self.origins.get(name)
        return setting is not None and origin is not None and origin[1] not in setting.fallbacks

    def where(self, name: str) -> Origin:
        """Where the value of `name` was written; for a value not given, its variable."""
        if name in self.origins:
            return self.origins[name]
        setting = self.settings.get(name)
        return (ENVIRONMENT, setting.variable if setting else name or None)

    def report(self, name: str, message: str) -> None:
        """Add a problem with the value of `name`, where it was written."""
        file, where = self.where(name)
        self.problems.append(Problem(file, where, message))

    def report_invalid(self, err: ValidationError, *, skip_missing: bool = False) -> None:
        """Add a problem for each error of a model built from these values (fields = names)."""
        for error in err.errors(include_url=False):
            if skip_missing and error["type"] == "missing":
                continue
            name = str(error["loc"][0]) if error["loc"] else ""
            self.report(name, error["msg"].removeprefix("Value error, "))

    def raise_problems(self) -> None:
        if self.problems:
            raise InvalidInput(self.problems)


def resolve(
    settings: Iterable[Setting],
    environ: Mapping[str, str],
    args: argparse.Namespace | None = None,
    config_file: ConfigFileValues | None = None,
) -> Resolved:
    """Each setting from the first source that gives it (see the module docstring).

    A value that does not parse is a problem where it was written; the setting then has no
    value, and the model's default or requirement applies.
    """
    by_name = {setting.name: setting for setting in settings}
    resolved = Resolved(by_name)
    for setting in by_name.values():
        found = _find(setting, environ, args, config_file)
        if found is None:
            continue
        value, origin = found
        resolved.origins[setting.name] = origin
        if not isinstance(value, str):
            resolved.values[setting.name] = value  # typed already (a bool flag, the file)
            continue
        try:
            resolved.values[setting.name] = setting.parse(value)
        except ValueError as err:
            resolved.report(setting.name, str(err))
    return resolved


def _find(
    setting: Setting,
    environ: Mapping[str, str],
    args: argparse.Namespace | None,
    config_file: ConfigFileValues | None,
) -> tuple[Any, Origin] | None:
    """The raw value of `setting` and where it was written, or None if nothing gives it."""

    def usable(value: Any) -> bool:
        return value is not None and (value != "" or setting.empty_is_a_value)

    flag_value = getattr(args, setting.dest, None) if args is not None else None
    if isinstance(flag_value, list):
        flag_value = ",".join(flag_value)
    if isinstance(flag_value, str):
        flag_value = flag_value.strip()
    if usable(flag_value):
        return flag_value, (COMMAND_LINE, setting.flag)
    if setting.variable in environ and usable(env_value := environ[setting.variable].strip()):
        return env_value, (ENVIRONMENT, setting.variable)
    if config_file is not None and usable(file_value := config_file.values.get(setting.name)):
        return file_value, (config_file.path, setting.key)
    for variable in setting.fallbacks:
        if fallback := environ.get(variable, "").strip():
            return fallback, (ENVIRONMENT, variable)
    return None


# --- settings of more than one entry point --------------------------------------------------------

RUNNER_IMAGE = Setting(
    "runner_image", "ROLLOUT_RUNNER_IMAGE", "--runner-image", metavar="IMAGE", key="runnerImage"
)
"""The runner sidecar's image: the operator's default, or the one the CLI writes into a job."""
