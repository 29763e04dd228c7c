"""A whole job in local mode: its trials, `n_concurrent_trials` at a time, and its files on disk.

The plan is the operator's (`rollout.api.plan`: the seed's enumeration), each trial's spec the
operator's (`rollout.api.trial_spec`), and each trial runs as `rollout.local.trial` says. The job
writes the seed's layout into `<jobs_dir>/<job>/`: config.json before the first trial, each
trial's directory as its runner writes it, and result.json (`rollout.api.aggregate`, as the
operator writes it) when the job ends, also when it is stopped: then over the trials that have a
record, the others counted as not run.

Resume (../DESIGN.md, "Resume"): a job directory that exists is the CLI's to refuse; with
`resume`, a trial keeps its record when it was scored or failed for a reason of the agent's or
the task's, and runs again when it has no record, failed for the infrastructure's reason, or
failed with one of the error types the user names. The files of the try it replaces move to
`<trial>/retries/<k>/`, as a cluster keeps a lost Pod's, and the new try is `k + 1`.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rollout.api.aggregate import JobSummary, TrialOutcome, aggregate, summarize, trial_span
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.layout import (
    RESULT_JSON,
    RETRIES_DIR,
    job_config_key,
    job_prefix,
    job_result_key,
)
from rollout.api.plan import JobPlan, PlannedShard, PlannedTrial
from rollout.api.records import keeps_record, tries_so_far
from rollout.api.resources import RolloutJob, StorageSpec
from rollout.api.results import JobResult, TrialResult
from rollout.api.rowresults import (
    ROW_LINE,
    RowFileSettings,
    line_of_record,
    parse_line,
    row_files,
)
from rollout.api.rowrun import RowItem, RowVerifier
from rollout.api.trial_spec import row_verifier, shard_spec, task_error, trial_spec
from rollout.api.wire.spec import agent_secret_carriers
from rollout.local.environments import Sandboxes
from rollout.local.shard import ShardRun
from rollout.local.trial import LocalTrial, TrialRun, trial_files
from rollout.storage import DirectoryStore, StorageError

log = logging.getLogger(__name__)

LOCAL_STORAGE = StorageSpec(bucket="rollout-local")
"""A trial spec's storage in local mode. The resource model requires one, but the runner writes
into the directories its environment names (`ROLLOUT_STORAGE_DIR`, `ROLLOUT_STORAGE_JOBS_DIR`),
so this names no bucket anyone reads."""

LOCAL_RUNNER_IMAGE = "rollout-runner:local"
"""A trial spec's runner image in local mode: required by the model, unused (the runner is a
process of this installation)."""


@dataclass(frozen=True)
class Progress:
    """How far the job is, after each change: its figures over the finished trials."""

    total: int
    finished: int
    running: int
    summary: JobSummary


@dataclass
class JobRun:
    """What running the job did."""

    result: JobResult
    stopped: bool = False
    """Stopped before every trial ran (Ctrl-C): the unfinished trials have no record."""
    kept: list[str] = field(default_factory=list)
    """How to reach each sandbox kept for inspection (preserveEnv)."""


class LocalJob:
    """One job, run on this machine; `stop()` (Ctrl-C) ends it early and keeps what finished."""

    def __init__(
        self,
        job: RolloutJob,
        plan: JobPlan,
        store: DirectoryStore,
        sandboxes: Sandboxes,
        *,
        secrets: Mapping[str, Mapping[str, str]],
        environ: Mapping[str, str],
        config_json: str,
        resume: bool = False,
        retry_errors: Collection[ErrorType] = (),
        on_progress: Callable[[Progress], None] = lambda _: None,
        evaluator_key: str | None = None,
    ) -> None:
        self.job = job
        self.plan = plan
        self.sandboxes = sandboxes
        self.secrets = secrets
        self.environ = environ
        self.config_json = config_json
        self.resume = resume
        self.retry_errors = frozenset(retry_errors)
        self.on_progress = on_progress
        self.evaluator_key = evaluator_key
        """llm_judgement's API key (job.yaml's evaluator_api_key resolved), for shards' runners."""
        self.store = store
        self._records: dict[str, TrialResult] = {}
        self._running: set[TrialRun] = set()
        self._stopping = False
        self._kept: list[str] = []

    @property
    def name(self) -> str:
        return self.job.job_name

    def stop(self, *, now: bool = False) -> None:
        """Start no more trials and stop the running ones (each still writes its record, unless
        `now`: then they are killed)."""
        self._stopping = True
        for run in list(self._running):
            run.stop(now=now)

    async def run(self) -> JobRun:
        started = datetime.now(UTC)
        await asyncio.to_thread(self._write_config)
        tries = await asyncio.to_thread(self._earlier_records)
        concurrency = asyncio.Semaphore(self.job.spec.n_concurrent_trials)
        self._report()
        runs = []
        for unit in self.plan.units:
            if unit.shard is not None:
                rows = [t for t in unit.shard.trials if t.name not in self._records]
                if rows:
                    runs.append(self._run_shard(unit.shard, rows, tries, concurrency))
            elif unit.name not in self._records:
                runs.append(self._run_trial(unit, tries.get(unit.name, 0) + 1, concurrency))
        await asyncio.gather(*runs)
        result = await asyncio.to_thread(self._write_result, started)
        return JobRun(result, stopped=self._stopping, kept=self._kept)

    # --- config.json and the records already there ----------------------------------------------

    def _write_config(self) -> None:
        key = job_config_key(self.store.prefix, self.name)
        if self.resume and self.store.exists(key):
            return  # the job's config.json is the one of its first run
        if not self.store.put_new(key, self.config_json.encode(), "application/json"):
            raise InvalidInput.one(
                self.store.uri(key), None, f"a job named {self.name!r} has started here meanwhile"
            )

    def _earlier_records(self) -> dict[str, int]:
        """With resume: keep the records the rule keeps, move the others aside; the number of
        tries each trial to run again has had (0 for one that never ran)."""
        tries: dict[str, int] = {}
        if not self.resume:
            return tries
        for planned in self.plan.trials:
            directory = self._trial_dir(planned)
            result = _read_record(directory / RESULT_JSON)
            if keeps_record(result, self.retry_errors):
                assert result is not None
                self._records[planned.name] = result
                continue
            own_files = directory.is_dir() and any(
                p.name != RETRIES_DIR for p in directory.iterdir()
            )
            kept = _kept_tries(directory) if directory.is_dir() else 0
            done = tries_so_far(result, own_files=own_files, kept=kept)
            if own_files:
                _move_to_retries(directory, done)
            tries[planned.name] = done
        return tries

    def _trial_dir(self, planned: PlannedTrial) -> Path:
        return self.store.path(trial_files(self.store, self.name, planned.key).rstrip("/"))

    # --- trials -----------------------------------------------------------------------------

    async def _run_trial(
        self, planned: PlannedTrial, try_number: int, concurrency: asyncio.Semaphore
    ) -> None:
        spec = trial_spec(self.job, planned, storage=LOCAL_STORAGE, runner_image=LOCAL_RUNNER_IMAGE)
        trial = LocalTrial(
            planned, spec, self.secrets.get(planned.key.agent, {}), try_number=try_number
        )
        run = TrialRun(trial, self.store, self.sandboxes, environ=self.environ)
        if (error := task_error(planned)) is not None:
            if not self._stopping:
                self._finished(planned, await run.record_unrunnable(error))
            return
        result = await self._run(run, planned.name, concurrency)
        if result is not None:
            self._finished(planned, result)
        else:
            self._report()

    async def _run(
        self, run: TrialRun, name: str, concurrency: asyncio.Semaphore
    ) -> TrialResult | None:
        """Run a trial (or a shard) in one of the job's slots, unless the job is stopping."""
        result = None
        async with concurrency:
            if self._stopping:
                return None
            self._running.add(run)
            self._report()
            try:
                result = await run.run()
            except Exception:
                log.exception("%s failed to run", name)
            finally:
                self._running.discard(run)
        if run.kept is not None:
            self._kept.append(f"{name}: {run.kept}")
        return result

    async def _run_shard(
        self,
        shard: PlannedShard,
        rows: list[PlannedTrial],
        tries: Mapping[str, int],
        concurrency: asyncio.Semaphore,
    ) -> None:
        """Run the rows of a shard that have no record yet, in one sandbox and one runner: one
        row at a time, so one of the job's n_concurrent_trials."""
        # Each row's own try: a resumed job runs rows that have had different numbers of tries.
        items = [
            RowItem(id=t.key.task, attempt=t.key.attempt, try_number=tries.get(t.name, 0) + 1)
            for t in rows
        ]
        spec = shard_spec(
            self.job,
            shard,
            items,
            storage=LOCAL_STORAGE,
            runner_image=LOCAL_RUNNER_IMAGE,
        )
        shard_try = max(item.try_number or 1 for item in items)
        trial = LocalTrial(
            rows[0], spec, self.secrets.get(shard.key.agent, {}), try_number=shard_try
        )
        run = ShardRun(
            trial,
            rows,
            self.store,
            self.sandboxes,
            environ=self.environ,
            evaluator_key=self.evaluator_key,
        )
        await self._run(run, shard.name, concurrency)
        self._records.update(run.results)
        self._report()

    def _finished(self, planned: PlannedTrial, result: TrialResult) -> None:
        self._records[planned.name] = result
        self._report()

    def _outcomes(self) -> list[TrialOutcome]:
        """Every trial of the plan, in order: its record's outcome, or a pending one."""
        outcomes = []
        for planned in self.plan.trials:
            record = self._records.get(planned.name)
            key = planned.key
            outcomes.append(
                TrialOutcome.from_result(record)
                if record is not None
                else TrialOutcome(key.task, key.dataset, key.agent, key.attempt)
            )
        return outcomes

    def _report(self) -> None:
        metrics = [m.type for m in self.job.spec.metrics]
        self.on_progress(
            Progress(
                total=len(self.plan),
                finished=len(self._records),
                running=len(self._running),
                summary=summarize(self._outcomes(), metrics=metrics),
            )
        )

    # --- the job's result.json --------------------------------------------------------------

    def _write_result(self, started: datetime) -> JobResult:
        first, _ = trial_span(self._records.values())
        result = aggregate(
            self.name,
            self._outcomes(),
            metrics=[m.type for m in self.job.spec.metrics],
            started_at=min(started, first) if first else started,
            ended_at=datetime.now(UTC),
        )
        key = job_result_key(self.store.prefix, self.name)
        self.store.put_bytes(key, result.to_json().encode(), "application/json")
        if self.plan.shards:
            self._write_row_files(result)
        return result

    def _write_row_files(self, result: JobResult) -> None:
        """Seed 002's results.jsonl, evaluation.json and summary over the rows that ran."""
        lines = []
        for shard in self.plan.shards:
            verifier = RowVerifier.of(row_verifier(self.job, shard)).label()
            for planned in shard.trials:
                record = self._records.get(planned.name)
                if record is None:
                    continue  # never ran (the job was stopped)
                prefix = trial_files(self.store, self.name, planned.key)
                try:
                    line = parse_line(self.store.get_bytes(prefix + ROW_LINE), prefix + ROW_LINE)
                except (StorageError, InvalidInput):
                    line = None
                lines.append(line_of_record(record, line, verifier=verifier))
        datasets = list(dict.fromkeys(shard.key.dataset for shard in self.plan.shards))
        spec = self.job.spec
        files = row_files(
            lines,
            RowFileSettings(save_results=spec.save_results, save_summary=spec.save_summary),
            benchmark_name=datasets[0] if len(datasets) == 1 else self.name,
            total_time_seconds=result.total_duration_sec,
            at=result.ended_at or datetime.now(UTC),
            uri=lambda name: str(self.store.path(job_prefix(self.store.prefix, self.name) + name)),
        )
        for name, data in files.items():
            self.store.put_bytes(job_prefix(self.store.prefix, self.name) + name, data)


def _read_record(path: Path) -> TrialResult | None:
    try:
        return TrialResult.from_json(path.read_bytes(), str(path))
    except (OSError, InvalidInput):
        return None


def _kept_tries(directory: Path) -> int:
    """How many earlier tries `<trial>/retries/` holds (the highest number there)."""
    numbers = [int(p.name) for p in (directory / RETRIES_DIR).glob("*") if p.name.isdigit()]
    return max(numbers, default=0)


def _move_to_retries(directory: Path, try_number: int) -> None:
    """Move a trial's files (all but retries/) to `<trial>/retries/<try_number>/`."""
    target = directory / RETRIES_DIR / str(try_number)
    target.mkdir(parents=True, exist_ok=False)
    for entry in sorted(directory.iterdir()):
        if entry.name != RETRIES_DIR:
            shutil.move(entry, target / entry.name)


def resolved_secrets(
    job: RolloutJob, values: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """Each agent's Secret-backed values (`${VAR}` in job.yaml: env, endpoint headers, a model's
    key) by the runner variable that carries them (`agent_secret_carriers`), as its runner gets
    them."""
    return {
        agent.name: {
            carrier.variable: values[agent.name][carrier.slot]
            for carrier in agent_secret_carriers(agent)
        }
        for agent in job.spec.agents
    }
