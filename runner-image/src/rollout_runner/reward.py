"""Reading the verifier's reward from the files it wrote in /logs/verifier.

Search order (rLLM's shell verifier contract, seed 004; the first file that exists wins, and a
broken first file is an error rather than a reason to look at the next):

1. `/logs/verifier/reward.json`: a JSON number (`1`, `0.5`), or an object with a numeric
   `"reward"` (`{"reward": 1}`), or, without `"reward"`, a numeric `"score"` (`{"score": 0.5}`).
   Other keys are allowed and ignored. true/false are not numbers.
2. `/logs/verifier/reward.txt` (the seed's Harbor convention): one decimal number (`1`, `0`,
   `0.5`, `-1`, `1e-3`), surrounding whitespace allowed.

Neither file: `verifier_reward_missing`. A file that is empty, holds something else (`abc`,
`1 2`, `nan`, `inf`), is not a regular file or is larger than `MAX_REWARD_BYTES`:
`verifier_reward_invalid`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rollout.api.errors import ErrorType

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
REWARD_FILES = (REWARD_JSON, REWARD_TXT)
MAX_REWARD_BYTES = 64 * 1024
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class RewardProblem:
    type: ErrorType
    message: str


def read_reward(
    verifier_dir: Path, shown_as: str = "/logs/verifier", redact: Callable[[str], str] = str
) -> float | RewardProblem:
    """The reward in `verifier_dir` (the container's /logs/verifier, named `shown_as`).

    `redact` scrubs file content before a message quotes (and perhaps shortens) it.
    """
    for name in REWARD_FILES:
        path = verifier_dir / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        shown = f"{shown_as}/{name}"
        if not stat.S_ISREG(mode):
            return _invalid(f"{shown} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_REWARD_BYTES + 1)
        if len(data) > MAX_REWARD_BYTES:
            return _invalid(f"{shown} is larger than {MAX_REWARD_BYTES} bytes")
        parse = parse_reward_json if name == REWARD_JSON else parse_reward_text
        value = parse(data, redact)
        if isinstance(value, str):
            return _invalid(f"{shown} {value}")
        return value
    return RewardProblem(
        ErrorType.VERIFIER_REWARD_MISSING,
        f"The verifier exited with code 0 but wrote no reward: neither {shown_as}/{REWARD_JSON} "
        f"nor {shown_as}/{REWARD_TXT} exists",
    )


def parse_reward_text(data: bytes, redact: Callable[[str], str] = str) -> float | str:
    """The number in a reward.txt, or what is wrong with it (as a phrase)."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    if not text:
        return "is empty"
    if not _DECIMAL.fullmatch(text):
        return f"holds {_quote(redact(text))}, not a number"
    value = float(text)
    if not math.isfinite(value):
        return f"holds {_quote(redact(text))}, which is too large to be a reward"
    return value


def parse_reward_json(data: bytes, redact: Callable[[str], str] = str) -> float | str:
    """The reward in a reward.json, or what is wrong with it (as a phrase)."""
    if not data.strip():
        return "is empty"
    try:
        document = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as err:
        return f"is not valid JSON ({redact(str(err))})"
    where = "holds"
    if isinstance(document, dict):
        key = "reward" if "reward" in document else "score" if "score" in document else None
        if key is None:
            return 'has neither a "reward" nor a "score" key'
        document, where = document[key], f'has "{key}":'
    shown = _quote(redact(json.dumps(document, ensure_ascii=False)))
    if isinstance(document, bool) or not isinstance(document, int | float):
        return f"{where} {shown}, not a number"
    try:
        value = float(document)
    except OverflowError:  # an integer with hundreds of digits
        value = math.inf
    if not math.isfinite(value):
        return f"{where} {shown}, which is too large to be a reward"
    return value


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _quote(text: str, limit: int = 80) -> str:
    # Plain quotes rather than repr(): escaping would hide a secret from exact-match scrubbing.
    shown = text if len(text) <= limit else text[:limit] + "..."
    return f"'{shown}'"


def _invalid(message: str) -> RewardProblem:
    return RewardProblem(ErrorType.VERIFIER_REWARD_INVALID, message)
