"""The process a dataset's Python verifier runs in (seed 004's `evaluate(metadata, trajectory)`).

    python -I -m rollout_runner.evaluate_harness <script> <function> <result-file>

`rollout_runner.pyverifier` starts it; the verifier is dataset code, so it runs in a process of
its own, which a timeout can kill and whose crash cannot take the runner down. This module
imports nothing of the project, so a verifier sees the standard library and its own files only.

It reads `{"metadata": ..., "trajectory": ...}` as JSON on stdin, loads the script by its path
(its directory first on sys.path, so it can import modules beside it, as `python evaluate.py`
would), calls `function(metadata, trajectory)` (awaiting the result when it is awaitable) and
writes what happened to the result file as JSON, never to stdout: whatever the verifier prints
goes to the verifier log. The result file holds one of

- `{"ok": true, "value": <the return value as JSON>}`, the value converted as `returned_value`
  says; the parent applies the one coercion rule (`rollout.api.reward.coerce_reward`) to it;
- `{"ok": false, "message": "..."}`: the script did not load, has no such function, raised, or
  returned something that is not a reward. The traceback, if any, is on stderr.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import inspect
import json
import numbers
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODULE_NAME = "rollout_python_verifier"
"""The name the script is imported under (not its file name, which may shadow a module)."""
REWARD_ATTRIBUTES = ("reward", "score")
MAX_DEPTH = 32
"""Deeper values are written in their str() form (and a value that contains itself ends)."""


class Refused(Exception):
    """The verifier cannot give a reward; the message says why, for the trial's error."""


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: evaluate_harness <script> <function> <result-file>", file=sys.stderr)
        return 2
    script, function, result_file = Path(argv[0]), argv[1], Path(argv[2])
    # Prints inside the verifier reach the log line by line, also when a timeout kills us.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    try:
        result: dict[str, Any] = {"ok": True, "value": _run(script, function)}
    except Refused as refused:
        result = {"ok": False, "message": str(refused)}
    text = json.dumps(result, ensure_ascii=False)
    result_file.write_text(text, encoding="utf-8")
    return 0


def _run(script: Path, function: str) -> object:
    arguments = json.load(sys.stdin)
    metadata, trajectory = arguments["metadata"], arguments["trajectory"]
    where = f"{function}() of {script.name}"
    try:
        module = _load(script)
    except BaseException as error:
        traceback.print_exc()
        raise Refused(f"{script.name} failed to load: {_describe(error)}") from None
    evaluate = getattr(module, function, None)
    if not callable(evaluate):
        missing = "is not a function" if hasattr(module, function) else "is not defined"
        raise Refused(f"{function} {missing} in {script.name}")
    try:
        value = evaluate(metadata, trajectory)
        if inspect.isawaitable(value):
            value = asyncio.run(_awaited(value))
    except BaseException as error:
        traceback.print_exc()
        raise Refused(f"{where} raised {_describe(error)}") from None
    return returned_value(value, where)


def _load(script: Path) -> Any:
    sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, script)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {script.name} (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: dataclasses and pickling look a module up by its name.
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    return module


async def _awaited(value: Any) -> object:
    return await value


def returned_value(value: object, where: str) -> object:
    """What the verifier returned, as JSON for the parent (raises Refused when it is no reward).

    - a number or a bool: itself;
    - a mapping: itself, its keys as strings, values that are not JSON in their str() form;
    - a pair `(reward, is_correct)`, a number and a bool (a tuple or a list):
      `{"reward": ..., "is_correct": ...}`;
    - an object with a `reward` or a `score` attribute (rLLM's EvalOutput, a dataclass, a
      pydantic model): a mapping of its public fields, that attribute included.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Real):  # int, float, and numpy's scalars
        return value if isinstance(value, int | float) else float(value)
    if isinstance(value, Mapping):
        return _jsonable(value, 0)
    if isinstance(value, tuple | list):
        if len(value) == 2 and isinstance(value[0], numbers.Real) and isinstance(value[1], bool):
            return {"reward": _jsonable(value[0], 0), "is_correct": value[1]}
        raise Refused(
            f"{where} returned a {type(value).__name__} of {len(value)} item(s), not a "
            "(reward, is_correct) pair of a number and a bool"
        )
    if value is not None and any(hasattr(value, name) for name in REWARD_ATTRIBUTES):
        return _fields(value)
    shown = "None" if value is None else f"a {type(value).__name__}"
    raise Refused(
        f"{where} returned {shown}, not a number, a bool, a dict, a (reward, is_correct) pair "
        "or an object with a reward or a score"
    )


def _fields(value: object) -> dict[str, object]:
    """The public fields of an object that carries a reward or a score."""
    found: Mapping[Any, Any]
    model_dump = getattr(value, "model_dump", None)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        found = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif callable(model_dump):  # pydantic
        found = model_dump()
    else:
        found = getattr(value, "__dict__", {})
    fields = {str(k): v for k, v in found.items() if not str(k).startswith("_")}
    for name in REWARD_ATTRIBUTES:  # a property, or a field that starts hidden
        if name not in fields and hasattr(value, name):
            fields[name] = getattr(value, name)
    converted = _jsonable(fields, 0)
    assert isinstance(converted, dict)
    return converted


def _jsonable(value: object, depth: int) -> object:
    """`value` as JSON data; what JSON cannot hold becomes its str() form."""
    if depth > MAX_DEPTH:
        return str(value)
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _jsonable(inner, depth + 1)
    return str(value)


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    name = type(error).__name__
    return f"{name}: {text}" if text else name


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
