"""A shard of data rows in local mode: one sandbox and one runner for its rows, as in a trial
Pod (`rollout.api.rowrun`). The runner writes each row's trial directory; what it could not
write (its sandbox did not start, it died halfway) is written here, one record per row, as
`rollout.local.trial` does for a task's trial. A shard stopped with Ctrl-C leaves the rows it
never reached without a record, for `--resume`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.layout import RESULT_JSON
from rollout.api.plan import PlannedTrial
from rollout.api.results import TrialError, TrialResult
from rollout.api.rowrun import EVALUATOR_API_KEY_ENV
from rollout.local.environments import Sandboxes
from rollout.local.trial import LocalTrial, TrialRun, runner_output, trial_files
from rollout.storage import DirectoryStore, StorageError


class ShardRun(TrialRun):
    """Runs one shard; `results` holds each of its rows' records, by trial name."""

    def __init__(
        self,
        trial: LocalTrial,
        rows: Sequence[PlannedTrial],
        store: DirectoryStore,
        sandboxes: Sandboxes,
        *,
        environ: Mapping[str, str],
        evaluator_key: str | None = None,
    ) -> None:
        super().__init__(trial, store, sandboxes, environ=environ)
        self.rows = list(rows)
        items = trial.spec.rows.items if trial.spec.rows is not None else []
        self.tries = {(i.id, i.attempt): i.try_number for i in items}
        """Each row's try number, as its spec item says (None: the shard's)."""
        self.results: dict[str, TrialResult] = {}
        self._evaluator_key = evaluator_key

    def _runner_env(self, started: datetime) -> dict[str, str]:
        env = super()._runner_env(started)
        if self._evaluator_key is not None:
            env[EVALUATOR_API_KEY_ENV] = self._evaluator_key
        return env

    async def _after_runner(
        self, code: int, log_path: Path, started: datetime
    ) -> TrialResult | None:
        await asyncio.to_thread(self._collect)
        if self._stopping:
            return None  # the rows it never reached run with --resume
        message = f"The runner ended (exit status {code}) without writing this row's record"
        error = TrialError(type=ErrorType.INTERNAL_ERROR, message=message)
        await self._write_missing(error, started, in_setup=False, notes=[runner_output(log_path)])
        return None

    async def _write_record(
        self,
        error: TrialError,
        *,
        started: datetime,
        in_setup: bool,
        notes: list[str] | None = None,
    ) -> TrialResult:
        """The shard could not run (its sandbox did not start): every row gets the error."""
        await self._write_missing(error, started, in_setup=in_setup, notes=notes)
        return self.results[self.rows[0].name]

    async def _write_missing(
        self, error: TrialError, started: datetime, *, in_setup: bool, notes: list[str] | None
    ) -> None:
        for row in self.rows:
            if row.name not in self.results:
                self.results[row.name] = await self._write_record_of(
                    row.key,
                    error,
                    started=started,
                    in_setup=in_setup,
                    notes=notes,
                    tries=self.tries.get((row.key.task, row.key.attempt)),
                )

    def _collect(self) -> None:
        """Each row's result.json, as its runner wrote it."""
        for row in self.rows:
            prefix = trial_files(self.store, self.trial.spec.job_name, row.key)
            try:
                data = self.store.get_bytes(prefix + RESULT_JSON)
                self.results[row.name] = TrialResult.from_json(data)
            except (StorageError, InvalidInput):
                continue
