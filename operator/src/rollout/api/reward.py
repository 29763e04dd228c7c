"""The one rule that turns what a verifier gives into a reward, for every source of a reward.

Reward files now (the runner reads reward.json and reward.txt); Python verifiers and agent
endpoints later, whose return values go through the same rule (seed 004: "Returns are coerced").

| the value                      | the reward                                            |
| ------------------------------ | ----------------------------------------------------- |
| a number                       | the number                                            |
| a bool                         | 1 for true, 0 for false                               |
| a mapping with `reward`        | its `reward` (a number or a bool)                     |
| a mapping with `score`, no `reward` | its `score` (a number or a bool)                 |
| any other mapping              | the mean of its values that are numbers or bools      |
| anything else                  | none: `verifier_reward_invalid`                       |

A mapping is kept whole beside the reward (`CoercedReward.rewards`, result.json's
`rollout.rewards`), so `{"accuracy": 1, "style": 0.5}` gives reward 0.75 and keeps both keys.
A number that is not finite (NaN, infinity, an integer too large for a float) is no reward.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

REWARD_KEY = "reward"
SCORE_KEY = "score"


@dataclass(frozen=True)
class CoercedReward:
    """A reward, and the mapping it came from (kept whole), if it came from one."""

    reward: float
    rewards: dict[str, Any] | None = None


def coerce_reward(value: object, redact: Callable[[str], str] = str) -> CoercedReward | str:
    """The reward `value` gives, or what is wrong with it as a phrase ("holds '[1]', ...").

    `redact` scrubs the value's text before a phrase quotes it (it may hold a secret).
    """
    if isinstance(value, Mapping):
        kept = {str(key): item for key, item in value.items()}
        for key in (REWARD_KEY, SCORE_KEY):
            if key in kept:
                found = _number(kept[key], f'has "{key}":', redact)
                return found if isinstance(found, str) else CoercedReward(found, kept)
        numbers = [item for item in kept.values() if _is_number(item)]
        if not numbers:
            return f'has no "{REWARD_KEY}" or "{SCORE_KEY}" key and no value that is a number'
        try:
            mean = sum(float(n) for n in numbers) / len(numbers)
        except OverflowError:  # an integer with hundreds of digits
            mean = math.inf
        if not math.isfinite(mean):
            return f"holds {_shown(kept, redact)}, whose mean is not a finite number"
        return CoercedReward(mean, kept)
    found = _number(value, "holds", redact)
    return found if isinstance(found, str) else CoercedReward(found)


def _is_number(value: object) -> bool:
    return isinstance(value, bool | int | float)


def _number(value: object, where: str, redact: Callable[[str], str]) -> float | str:
    if not _is_number(value):
        return f"{where} {_shown(value, redact)}, not a number, a bool or an object"
    try:
        number = float(value)  # type: ignore[arg-type]  # _is_number: bool, int or float
    except OverflowError:  # an integer with hundreds of digits
        number = math.inf
    if math.isnan(number):
        return f"{where} {_shown(value, redact)}, not a number"
    if not math.isfinite(number):
        return f"{where} {_shown(value, redact)}, which is too large to be a reward"
    return number


def _shown(value: object, redact: Callable[[str], str], limit: int = 80) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON (a Python verifier's object)
        text = repr(value)
    # Plain quotes rather than repr(): escaping would hide a secret from exact-match scrubbing.
    text = redact(text)
    shown = text if len(text) <= limit else text[:limit] + "..."
    return f"'{shown}'"
