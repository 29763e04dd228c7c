"""Running part of a dataset: the tasks (or rows) a job names, then the first N of them.

The same selection serves task datasets and data datasets, and it must be deterministic: a
job run twice, or resumed, enumerates the same trials. So the result keeps the DATASET's order,
never the order the ids were listed in, and `max_tasks` cuts that order (seed 002's "Run 10 tasks
first as a test"). An id the dataset does not have is an error, not a silent skip: a typo would
otherwise run fewer tasks than asked for, and report nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from rollout.api.errors import InvalidInput

_LISTED = 5
"""How many unknown ids (and hints) a message names before it says `...`."""


def select_names(
    names: Sequence[str],
    *,
    max_tasks: int | None,
    task_ids: Sequence[str] | None,
    where: str,
    field: str | None = "task_ids",
) -> list[str]:
    """The names of `names` (a dataset's tasks or row ids, in dataset order) to run.

    `task_ids` keeps those names, in dataset order; an id the dataset lacks is an InvalidInput
    naming `where` and `field`, listing up to five unknown ids with a close match or a few valid
    names as a hint; an empty `task_ids` selects nothing, which is an error too. Then `max_tasks`
    keeps the first N; below 1 it is a ValueError (the job's model refuses it first). Neither
    given: `names` unchanged."""
    if max_tasks is not None and max_tasks < 1:
        raise ValueError(f"max_tasks must be at least 1, not {max_tasks}")
    selected = list(names)
    if task_ids is not None:
        wanted = set(task_ids)
        if not wanted:
            raise InvalidInput.one(
                where, field, "is empty, so no task would run; leave it out to run them all"
            )
        known = set(names)
        unknown = [name for name in dict.fromkeys(task_ids) if name not in known]
        if unknown:
            raise InvalidInput.one(where, field, _unknown_message(unknown, names))
        selected = [name for name in names if name in wanted]
    if max_tasks is not None:
        selected = selected[:max_tasks]
    return selected


def _unknown_message(unknown: Sequence[str], names: Sequence[str]) -> str:
    said = []
    for name in unknown[:_LISTED]:
        close = difflib.get_close_matches(name, names, n=1)
        said.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    more = f" and {len(unknown) - _LISTED} more" if len(unknown) > _LISTED else ""
    which = "is" if len(unknown) == 1 else "are"
    examples = ", ".join(repr(name) for name in names[:_LISTED])
    if len(names) > _LISTED:
        examples += ", ..."
    count = f"{len(names)} task" + ("" if len(names) == 1 else "s")
    return f"{', '.join(said)}{more} {which} not in the dataset (it has {count}: {examples})"
