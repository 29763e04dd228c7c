"""Reading a user's YAML or JSON file: a duplicate key is an error, and so is a syntax error,
each reported as an `InvalidInput` naming the file and the line."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import yaml

from rollout.api.errors import InvalidInput


def read_document(path: Path, suffixes: tuple[str, ...]) -> Any:
    """The parsed content of `path`, a JSON file when it ends in .json, else YAML."""
    if path.suffix.lower() not in suffixes:
        listing = ", ".join(suffixes[:-1]) + f" or {suffixes[-1]}"
        raise InvalidInput.one(path, None, f"a job file ends in {listing}")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput.one(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidInput.one(path, None, f"cannot be read: {err}") from None
    return parse_json(text, path) if path.suffix.lower() == ".json" else parse_yaml(text, path)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if isinstance(key, typing.Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def parse_yaml(text: str, path: Path) -> Any:
    """`text` as YAML; a duplicate key or a syntax error is an InvalidInput naming `path`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = err.problem or err.context or "syntax error"
        raise InvalidInput.one(path, None, f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as err:
        raise InvalidInput.one(path, None, f"invalid YAML: {err}") from None


def parse_json(text: str, path: Path) -> Any:
    """`text` as JSON; a duplicate key or a syntax error is an InvalidInput naming `path`."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as err:
        message = f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        raise InvalidInput.one(path, None, message) from None
    except ValueError as err:
        raise InvalidInput.one(path, None, f"invalid JSON: {err}") from None
