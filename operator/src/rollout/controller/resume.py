"""A resumed job (`spec.resume`; ../DESIGN.md, "Resume"): which of its trials keep the record an
earlier run left in storage, and what the others need to run again.

The rule is local mode's (`api.records.keeps_record`): a trial keeps its record when it was
scored, or failed for a reason of the agent's or the task's and not with an error type the job
names in `retryErrors`; a trial with no record, or an infrastructure failure, runs again. One
that runs again has its earlier tries' files under `retries/<k>/` (`api.records.tries_so_far`
says how many it had): what is at its own paths moves there just before its RolloutTrial is made
(`Rerun.keep`), and its first Pod is try k+1 (`RolloutTrialSpec.earlierTries`).

Storage is read once per generation, when the job is planned (`jobexec.JobExecutor.resolve`):
one listing of the job's prefix, then the result.json of each trial that has one. Only trials
with no RolloutTrial of this job are read: one that has a RolloutTrial is this run's, and what
the index says of it wins. So a restarted operator reads the same answer again: a trial kept
before is kept again, and one whose files were moved meanwhile has its tries under `retries/`.

A kept trial takes part in the job as a finished `TrialEntry` made from its record (`kept`): the
planner does not create it, and the job's counts, figures and result.json count it like any
other. A shard of data rows runs only its rows that run again (`row_items`, each with its own
try number); its kept rows count from `kept_rows` until (and after) it finishes, and a shard
whose rows are all kept is itself a kept entry.

The RolloutTrials of the job this one replaces may still be there a moment (the garbage
collector deletes them after their job): one of them is never taken for this run's (`jobexec`
does not make a trial whose name an earlier job's trial holds; `JobView.blocked`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.layout import RESULT_JSON, RETRIES_DIR, job_prefix
from rollout.api.plan import JobPlan, PlannedTrial
from rollout.api.records import keeps_record, tries_so_far
from rollout.api.resources import TrialPhase
from rollout.api.results import TrialResult
from rollout.api.rowrun import RowItem
from rollout.controller.index import RowEntry, TrialEntry
from rollout.controller.records import TrialPlace
from rollout.controller.shards import READERS, read_record
from rollout.controller.trials import KeepTry
from rollout.storage import ObjectStore


@dataclass(frozen=True)
class Rerun:
    """A trial that runs again: the tries it had, and the move of its latest try's files (at
    its own paths) under `retries/<earlier_tries>/` before it runs (None: nothing there)."""

    earlier_tries: int
    keep: KeepTry | None = None


@dataclass(frozen=True)
class Resumed:
    """What a resumed job's earlier run left (see the module docstring)."""

    kept: dict[str, TrialEntry] = field(default_factory=dict)
    """Trials (and shards whose rows are all kept) by name: finished, from their records."""
    kept_rows: Mapping[str, tuple[RowEntry, ...]] = field(default_factory=dict)
    """A shard that runs again: its rows that keep their records."""
    reruns: Mapping[str, Rerun] = field(default_factory=dict)
    """Trials that run again and had tries before (one that never ran is not listed)."""
    row_items: Mapping[str, tuple[RowItem, ...]] = field(default_factory=dict)
    """A shard with kept rows or rows tried before: the rows it runs, each with its try."""
    row_keeps: Mapping[str, tuple[KeepTry, ...]] = field(default_factory=dict)
    """A shard's rows' files to move under their `retries/` before the shard is made."""

    @property
    def kept_count(self) -> int:
        """The seed's trials that keep their records (a kept shard's rows each)."""
        whole = sum(len(e.rows) if e.shard else 1 for e in self.kept.values())
        return whole + sum(len(rows) for rows in self.kept_rows.values())

    def keeps(self, name: str) -> tuple[KeepTry, ...]:
        """The moves to make before the trial (or shard) `name` is made."""
        if name in self.row_keeps:
            return self.row_keeps[name]
        rerun = self.reruns.get(name)
        return (rerun.keep,) if rerun is not None and rerun.keep is not None else ()


@dataclass(frozen=True)
class EarlierFiles:
    """What storage holds of one trial from earlier runs."""

    record: TrialResult | None = None
    own_files: bool = False
    """Files at the trial's own paths (not under its `retries/`)."""
    kept_tries: int = 0
    """The highest try number under its `retries/`."""


def plan_resume(
    plan: JobPlan,
    place: TrialPlace,
    earlier: Mapping[str, EarlierFiles],
    *,
    namespace: str,
    retry: Collection[ErrorType] = (),
) -> Resumed:
    """What the job keeps and runs again, from what storage holds of each trial (by name; a
    trial it does not list has nothing there). Pure."""
    kept: dict[str, TrialEntry] = {}
    kept_rows: dict[str, tuple[RowEntry, ...]] = {}
    reruns: dict[str, Rerun] = {}
    row_items: dict[str, tuple[RowItem, ...]] = {}
    row_keeps: dict[str, tuple[KeepTry, ...]] = {}
    for unit in plan.trials:
        if unit.shard is None:
            files = earlier.get(unit.name, EarlierFiles())
            if keeps_record(files.record, retry):
                assert files.record is not None
                kept[unit.name] = kept_entry(unit, files.record, namespace=namespace)
            elif (rerun := _rerun(unit, files, place)) is not None:
                reruns[unit.name] = rerun
            continue
        rows: list[RowEntry] = []
        items: list[RowItem] = []
        moves: list[KeepTry] = []
        for row in unit.shard.trials:
            files = earlier.get(row.name, EarlierFiles())
            if keeps_record(files.record, retry):
                assert files.record is not None
                rows.append(_row_entry(row, files.record))
                continue
            rerun = _rerun(row, files, place)
            earlier_tries = rerun.earlier_tries if rerun is not None else 0
            try_number = earlier_tries + 1 if earlier_tries else None
            items.append(RowItem(id=row.key.task, attempt=row.key.attempt, try_number=try_number))
            if rerun is not None and rerun.keep is not None:
                moves.append(rerun.keep)
        if not items:
            kept[unit.name] = _kept_shard(unit, tuple(rows), namespace=namespace)
            continue
        if rows:
            kept_rows[unit.name] = tuple(rows)
        if rows or any(item.try_number for item in items):
            row_items[unit.name] = tuple(items)
        if moves:
            row_keeps[unit.name] = tuple(moves)
    return Resumed(kept, kept_rows, reruns, row_items, row_keeps)


def _rerun(trial: PlannedTrial, files: EarlierFiles, place: TrialPlace) -> Rerun | None:
    """A trial that runs again: the tries it had (None: it never ran)."""
    tries = tries_so_far(files.record, own_files=files.own_files, kept=files.kept_tries)
    if tries == 0:
        return None
    keep = KeepTry(place.storage, place.prefix(trial.key), tries) if files.own_files else None
    return Rerun(tries, keep)


def kept_entry(trial: PlannedTrial, record: TrialResult, *, namespace: str) -> TrialEntry:
    """A finished trial of an earlier run, as the index would have it."""
    return _finished(
        trial,
        namespace,
        phase=TrialPhase.FAILED if record.error is not None else TrialPhase.SUCCEEDED,
        reward=record.reward,
        error_type=record.error.type if record.error is not None else None,
        failure_class=record.failure_class,
        cost=record.cost,
    )


def _row_entry(row: PlannedTrial, record: TrialResult) -> RowEntry:
    return RowEntry(
        id=row.key.task,
        attempt=row.key.attempt,
        reward=record.reward,
        error_type=record.error.type if record.error is not None else None,
        failure_class=record.failure_class,
    )


def _kept_shard(unit: PlannedTrial, rows: tuple[RowEntry, ...], *, namespace: str) -> TrialEntry:
    return _finished(unit, namespace, phase=TrialPhase.SUCCEEDED, shard=True, rows=rows)


def _finished(unit: PlannedTrial, namespace: str, **fields: Any) -> TrialEntry:
    key = unit.key
    return TrialEntry(
        namespace=namespace,
        name=unit.name,
        uid="",  # no RolloutTrial
        resource_version="",
        agent=key.agent,
        dataset=key.dataset,
        task=key.task,
        attempt=key.attempt,
        **fields,
    )


# --- reading storage (blocking: called in a thread) -----------------------------------------------


def read_earlier_files(
    store: ObjectStore, place: TrialPlace, plan: JobPlan, skip: Collection[str]
) -> dict[str, EarlierFiles]:
    """What storage holds of each trial of the plan (rows of shards included), but for those
    named in `skip` (their RolloutTrial exists: this run's): one listing of the job's prefix,
    then each trial's result.json, a few at a time."""
    wanted: dict[str, PlannedTrial] = {}
    for unit in plan.trials:
        if unit.name in skip:
            continue
        for trial in unit.shard.trials if unit.shard is not None else (unit,):
            wanted[place.prefix(trial.key)] = trial
    by_prefix: dict[str, list[str]] = defaultdict(list)
    base = job_prefix(place.storage.prefix or "", place.job_name)
    for key in store.list_keys(base):
        # <job>/<agent>/<dataset>/<task>__<n>/<rest>: the trial's prefix is the first four parts.
        parts = key.removeprefix(base).split("/", 3)
        if len(parts) == 4:
            by_prefix[base + "/".join(parts[:3]) + "/"].append(parts[3])
    found = {prefix: names for prefix, names in by_prefix.items() if prefix in wanted}

    def one(prefix: str) -> tuple[str, EarlierFiles]:
        names = found[prefix]
        own = [n for n in names if not n.startswith(f"{RETRIES_DIR}/")]
        record = read_record(store, prefix + RESULT_JSON) if RESULT_JSON in own else None
        return wanted[prefix].name, EarlierFiles(record, bool(own), _kept_tries(names))

    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="rollout-resume") as pool:
        return dict(pool.map(one, found))


def _kept_tries(names: Sequence[str]) -> int:
    """The highest number among `retries/<n>/...` paths."""
    numbers = [
        int(parts[1])
        for name in names
        if len(parts := name.split("/", 2)) == 3 and parts[0] == RETRIES_DIR and parts[1].isdigit()
    ]
    return max(numbers, default=0)
