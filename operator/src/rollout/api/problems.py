"""pydantic's validation errors as `Problem`s that name the file and the field at fault.

`validation_problems` is what every loader of a user's input uses: it expands `FieldErrors`
(a validator that looks at several fields reports each one) and says "unknown key 'x' (did you
mean 'y'?)" with the spelling of the surface: snake_case for a user's file, camelCase for a
resource.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rollout.api.base import FileModel
from rollout.api.errors import Problem, field_path


class FieldErrors(ValueError):
    """Problems found by a validator that looks at several fields at once.

    Each error carries a field path relative to the model being validated (`[1].name`, `execute`,
    `env.KEY`), so that the report says `agents[1].name` rather than just `agents`. pydantic keeps
    the exception in the error's context, where `validation_problems` finds it.
    """

    def __init__(self, errors: Sequence[tuple[str | None, str]]) -> None:
        if not errors:
            raise ValueError("FieldErrors needs at least one error")
        self.errors = list(errors)
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in self.errors))


def join_field(base: str | None, relative: str | None) -> str | None:
    """`agents[1]` + `name` -> `agents[1].name`; `agents` + `[1]` -> `agents[1]`."""
    if not relative:
        return base
    if not base:
        return relative.removeprefix(".")
    if relative.startswith("["):
        return base + relative
    return f"{base}.{relative}"


def validation_problems(
    err: ValidationError, file: str | Path, model: type[BaseModel] | None = None
) -> list[Problem]:
    """pydantic's errors as Problems naming `file` and the field.

    Unlike `problems_from_validation_error`, this expands `FieldErrors` into one problem
    per field and says "unknown key 'x'" (with a close match from `model`, when given) for keys
    the model does not have.
    """
    problems: list[Problem] = []
    for error in err.errors(include_url=False):
        loc = error["loc"]
        where = field_path(loc)
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, FieldErrors):
            for relative, message in cause.errors:
                problems.append(Problem(str(file), join_field(where, relative), message))
        elif error["type"] == "extra_forbidden":
            problems.append(Problem(str(file), where, _unknown_key_message(model, loc)))
        else:
            problems.append(Problem(str(file), where, error["msg"].removeprefix("Value error, ")))
    return problems


def problems_from_validation_error(err: ValidationError, file: str | Path) -> list[Problem]:
    """Turn pydantic's errors into Problems naming `file` and the dotted field path."""
    problems = []
    for e in err.errors(include_url=False):
        # Model validators report at the model's own location; their message is the problem.
        message = e["msg"].removeprefix("Value error, ")
        problems.append(Problem(str(file), field_path(e["loc"]), message))
    return problems


def _unknown_key_message(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> str:
    key = str(loc[-1])
    known = _known_keys(model, loc[:-1]) if model else []
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    listing = f"; known keys: {', '.join(known)}" if known else ""
    return f"unknown key {key!r}{listing}"


def _known_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model accepts at `loc` (walking nested models, lists and dicts), spelled
    the way the surface of `model` spells them."""
    in_a_file = issubclass(model, FileModel)
    current: Any = model
    for part in loc:
        current = _nested_model(current, part)
        if current is None:
            return []
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return []
    return [
        file_key(current, name) if in_a_file else (info.alias or name)
        for name, info in current.model_fields.items()
    ]


def file_key(model: type[BaseModel], name: str) -> str:
    """How a user's file spells field `name` of `model`: its name, unless the seed spells it
    otherwise (`SEED_KEYS`, e.g. environment's `preserveEnv`)."""
    seed_keys: dict[str, str] = getattr(model, "SEED_KEYS", {})
    return seed_keys.get(name, name)


def _nested_model(current: Any, part: int | str) -> Any:
    if isinstance(part, int):
        return current  # an index into a list: the element type was taken with the field
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return None
    for name, info in current.model_fields.items():
        if part in (name, info.alias, file_key(current, name)):
            return _element_model(info.annotation)
    return None


def _element_model(annotation: Any) -> Any:
    """The model inside `X`, `X | None`, `list[X]`, `dict[str, X]`, or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, dict, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _element_model(arg)
            if found is not None:
                return found
    return None
