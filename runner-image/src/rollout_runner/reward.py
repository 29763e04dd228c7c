"""Reading the verifier's reward from the files it wrote.

Search order (rLLM's shell verifier contract, seed 004; the first file that exists wins, and a
broken first file is an error rather than a reason to look at the next):

1. `/tmp/rllm/reward.json` (rLLM's own place): JSON, as 2.
2. `/logs/verifier/reward.json`: JSON whose value gives the reward by the one coercion rule
   (`rollout.api.reward`: a number, a bool, an object's "reward", else its "score", else the mean
   of its numeric values). An object is kept whole beside the reward (result.json's
   `rollout.rewards`).
3. `/logs/verifier/reward.txt` (the seed's Harbor convention): one decimal number (`1`, `0`,
   `0.5`, `-1`, `1e-3`), surrounding whitespace allowed.

None of them: `verifier_reward_missing`. A file that is empty, holds something else (`abc`,
`1 2`, `nan`, `inf`, `[1]`), is not a regular file or is larger than `MAX_REWARD_BYTES`:
`verifier_reward_invalid`.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout.api.errors import ErrorType
from rollout.api.reward import CoercedReward, coerce_reward

RLLM_DIR = "/tmp/rllm"
"""rLLM's reward directory: emptied before the verifier, root-only while an agent user runs."""
REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
RLLM_REWARD = f"{RLLM_DIR}/{REWARD_JSON}"
MAX_REWARD_BYTES = 64 * 1024
NOT_REGULAR = "is not a regular file"
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class RewardProblem:
    type: ErrorType
    message: str


@dataclass(frozen=True)
class RewardFile:
    """One place a reward may be, and what was found there."""

    path: str
    """Its path in the environment (`/logs/verifier/reward.txt`): what messages name."""
    data: bytes | None
    """Its first `MAX_REWARD_BYTES` + 1 bytes; None when there is no such file (or `problem`)."""
    problem: str | None = None
    """Why a file that exists cannot be read as a reward ("is not a regular file")."""


def local_reward_file(local: Path, path: str) -> RewardFile:
    """The reward file `path` of the environment, as the local file `local` (the shared /logs)."""
    try:
        mode = os.lstat(local).st_mode
    except FileNotFoundError:
        return RewardFile(path, None)
    if not stat.S_ISREG(mode):
        return RewardFile(path, None, NOT_REGULAR)
    with local.open("rb") as handle:
        return RewardFile(path, handle.read(MAX_REWARD_BYTES + 1))


def verifier_dir_files(verifier_dir: Path, shown_as: str = "/logs/verifier") -> list[RewardFile]:
    """/logs/verifier's reward.json and reward.txt, in the search order."""
    names = (REWARD_JSON, REWARD_TXT)
    return [local_reward_file(verifier_dir / n, f"{shown_as}/{n}") for n in names]


def read_reward(
    files: Sequence[RewardFile], redact: Callable[[str], str] = str
) -> CoercedReward | RewardProblem:
    """The reward in the first of `files` that exists (`files` in the search order).

    `redact` scrubs file content before a message quotes (and perhaps shortens) it.
    """
    for found in files:
        if found.problem is not None:
            return _invalid(f"{found.path} {found.problem}")
        if found.data is None:
            continue
        if len(found.data) > MAX_REWARD_BYTES:
            return _invalid(f"{found.path} is larger than {MAX_REWARD_BYTES} bytes")
        if found.path.endswith(".json"):
            value = parse_reward_json(found.data, redact)
        else:
            text = parse_reward_text(found.data, redact)
            value = text if isinstance(text, str) else CoercedReward(text)
        if isinstance(value, str):
            return _invalid(f"{found.path} {value}")
        return value
    names = [f.path for f in files]
    listed = ", ".join(names[:-1]) + f" nor {names[-1]}" if len(names) > 1 else "".join(names)
    return RewardProblem(
        ErrorType.VERIFIER_REWARD_MISSING,
        f"The verifier exited with code 0 but wrote no reward: neither {listed} exists",
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


def parse_reward_json(data: bytes, redact: Callable[[str], str] = str) -> CoercedReward | str:
    """The reward in a reward.json, or what is wrong with it (as a phrase)."""
    if not data.strip():
        return "is empty"
    try:
        document = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as err:
        return f"is not valid JSON ({redact(str(err))})"
    return coerce_reward(document, redact)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _quote(text: str, limit: int = 80) -> str:
    # Plain quotes rather than repr(): escaping would hide a secret from exact-match scrubbing.
    shown = text if len(text) <= limit else text[:limit] + "..."
    return f"'{shown}'"


def _invalid(message: str) -> RewardProblem:
    return RewardProblem(ErrorType.VERIFIER_REWARD_INVALID, message)
