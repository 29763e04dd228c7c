"""A script agent's own account of its model use: /logs/agent/usage.json.

A built-in agent's execute script writes it from what its CLI reported (`rollout_usage` in
`rollout.api.catalogue`'s lib.sh); any script agent may. Its form:

    {"input_tokens": 1200, "output_tokens": 340, "total_tokens": 1540, "cost_usd": 0.0123}

`total_tokens` defaults to input + output, `cost_usd` is optional. The runner records it in
result.json's `rollout.usage`. The agent wrote the file, so nothing in it can fail the trial: a
file that is missing says nothing, one that is not of this form is left out with a note in
error.txt's notes, naming what is wrong.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rollout.api.additions import TokenUsage

USAGE_FILE = "agent/usage.json"
"""Under /logs."""
MAX_BYTES = 64 * 1024


def read_usage(logs: Path) -> tuple[TokenUsage | None, str | None]:
    """The usage in `logs`/agent/usage.json, or None; and a note when the file is unusable."""
    path = logs / USAGE_FILE
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None, None
    except OSError as err:
        return None, _note(f"cannot be read: {err.strerror or err}")
    if not stat.S_ISREG(info.st_mode):
        return None, _note("is not a regular file")
    if info.st_size > MAX_BYTES:
        return None, _note(f"is larger than {MAX_BYTES} bytes")
    try:
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        return None, _note(f"is not JSON ({err})")
    if not isinstance(data, dict):
        return None, _note("is not a JSON object")
    fields = {
        key: data[key]
        for key in ("input_tokens", "output_tokens", "total_tokens", "cost_usd")
        if data.get(key) is not None
    }
    if "total_tokens" not in fields and all(
        isinstance(fields.get(k), int) for k in ("input_tokens", "output_tokens")
    ):
        fields["total_tokens"] = fields["input_tokens"] + fields["output_tokens"]
    try:
        return TokenUsage.model_validate(fields, strict=True), None
    except ValidationError as err:
        where = ", ".join(".".join(map(str, e["loc"])) or "the object" for e in err.errors())
        return None, _note(f"has values that are not counts or a cost: {where}")


def _note(what: str) -> str:
    return f"logs/{USAGE_FILE} {what}: the agent's usage is not recorded"
