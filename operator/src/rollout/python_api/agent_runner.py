"""Seed 002's `AgentRunner`: programmatic control over answering and scoring tasks one at a time,
in this process, with the config's model agent (`rollout_runner.model_agent`).

    runner = AgentRunner(load_config("rollout.json"), worker_id="custom_runner")
    await runner.start()
    try:
        for task in load_tasks("benchmark.jsonl"):
            result = await runner.run_task(task)
            print(result.task_id, result.predicted_answer, result.score, result.success)
    finally:
        await runner.stop()

The config is a `RolloutConfig` (`load_config`), a mapping of seed 002's keys, or any object with
seed 002's keys as attributes (`RolloutConfigLike`; keys it lacks, or holds as None, take seed
002's defaults). Either way it is checked as a RolloutConfig is, so the tools of seed 002's
sandbox server are refused by name here too.

What it reads: `model_name`, `base_url` (empty: the OpenAI API), `api_key` (a literal key, or
one `${VAR}` taken from this process's environment when the runner starts), `max_turns`,
`max_retries`, `system_prompt` / `system_prompt_file` (read when the runner starts), and for
scoring `evaluate_results`, `evaluation_metric` and the `evaluator_*` keys: `llm_judgement`
needs `evaluator_model_name` and `evaluator_base_url`, as a job does (`evaluator_api_key` is a
literal key or one `${VAR}`; without one the evaluator is called without a key).

`run_task(task)` answers the task (a `DataRow`, as `load_tasks` gives, or a dict of seed 002's
row keys) in a worker thread and, when `evaluate_results` is on and the task has a ground
truth, scores the answer by the metric (`rollout.api.scoring`; `llm_judgement` through
`rollout_runner.judge`). Its `TaskResult` has seed 002's result fields:

- `success`: the model gave a final answer; `predicted_answer` is it (None when it did not);
- `score`: the metric's score of the answer; 0.0 when there is no answer to score; None when
  nothing is scored (evaluation off, no ground truth, a ground truth the metric cannot compare,
  an evaluator that gave no score);
- `error`: why there is no answer (the model agent's message), else why there is no score, else
  None. Failures of the model or its server are never raised.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Protocol

from rollout.api.envrefs import env_references
from rollout.api.errors import InvalidInput, Problem
from rollout.api.rows import DataRow, parse_rows
from rollout.api.scoring import acceptable_answers, score_answer
from rollout.api.verifiers import Metric
from rollout.python_api.config import RolloutConfig
from rollout_runner.judge import JudgeFailed, JudgeSettings, JudgeUnparsable, judge
from rollout_runner.model_agent import (
    DEFAULT_BASE_URL,
    ModelAnswer,
    ModelSettings,
    answer_question,
)

log = logging.getLogger(__name__)

TASK_SOURCE = "run_task(task)"
"""How problems with a task given as a dict name it."""


class RolloutConfigLike(Protocol):
    """The seed 002 keys `AgentRunner` reads, as attributes (a `RolloutConfig` has them all)."""

    @property
    def model_name(self) -> str: ...
    @property
    def api_key(self) -> str: ...
    @property
    def base_url(self) -> str: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def max_retries(self) -> int: ...
    @property
    def system_prompt(self) -> str: ...
    @property
    def system_prompt_file(self) -> str | None: ...
    @property
    def evaluate_results(self) -> bool: ...
    @property
    def evaluation_metric(self) -> Metric | str: ...
    @property
    def evaluator_model_name(self) -> str | None: ...
    @property
    def evaluator_api_key(self) -> str | None: ...
    @property
    def evaluator_base_url(self) -> str | None: ...
    @property
    def evaluator_temperature(self) -> float: ...
    @property
    def evaluator_max_retries(self) -> int: ...
    @property
    def evaluator_extra_params(self) -> dict[str, Any]: ...


@dataclass
class TaskResult:
    """One task's result: seed 002's fields (a line of its results.jsonl)."""

    task_id: str
    question: str
    predicted_answer: str | None
    success: bool
    ground_truth: Any
    score: float | None
    error: str | None
    trajectory: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _State(StrEnum):
    NEW = "new"
    STARTED = "started"
    STOPPED = "stopped"


class AgentRunner:
    """Answers and scores tasks with the config's model agent (see the module)."""

    def __init__(
        self,
        config: RolloutConfig | RolloutConfigLike | Mapping[str, Any],
        worker_id: str = "runner",
    ) -> None:
        """Check the config (InvalidInput naming each key at fault); nothing is read or called
        before `start()`."""
        self.worker_id = worker_id
        self.config = _as_config(config)
        if self.config.evaluate_results and self.config.evaluation_metric is Metric.LLM_JUDGEMENT:
            missing = [
                key
                for key in ("evaluator_model_name", "evaluator_base_url")
                if getattr(self.config, key) is None
            ]
            if missing:
                raise InvalidInput(
                    [
                        Problem(self.config.file, key, "is not set: llm_judgement needs it")
                        for key in missing
                    ]
                )
        self._state = _State.NEW
        self._model: ModelSettings | None = None
        self._judge: JudgeSettings | None = None

    def __repr__(self) -> str:
        return f"AgentRunner(worker_id={self.worker_id!r}, model={self.config.model_name!r})"

    async def start(self) -> None:
        """Read the system prompt file and the API keys' variables, and check the settings.

        InvalidInput naming the config and the key for a prompt file that cannot be read, a
        `${VAR}` that is not set, a setting no request can be made with. Starting a started
        runner does nothing; a stopped one cannot start again (RuntimeError)."""
        if self._state is _State.STOPPED:
            raise RuntimeError(
                f"AgentRunner {self.worker_id!r} is stopped and cannot start again: make a new one"
            )
        if self._state is _State.STARTED:
            return
        config = self.config
        prompt = await asyncio.to_thread(config.system_prompt_text)
        api_key = _api_key(config, "api_key")
        try:
            self._model = ModelSettings(
                model=config.model_name,
                base_url=config.base_url.strip() or DEFAULT_BASE_URL,
                api_key=api_key,
                max_turns=config.max_turns,
                max_retries=config.max_retries,
                system_prompt=prompt,
            )
            if config.evaluate_results and config.evaluation_metric is Metric.LLM_JUDGEMENT:
                assert config.evaluator_model_name is not None  # checked in __init__
                assert config.evaluator_base_url is not None
                self._judge = JudgeSettings(
                    model=config.evaluator_model_name,
                    base_url=config.evaluator_base_url,
                    api_key=_api_key(config, "evaluator_api_key"),
                    temperature=config.evaluator_temperature,
                    max_retries=config.evaluator_max_retries,
                    extra_params=dict(config.evaluator_extra_params),
                )
        except ValueError as err:
            raise InvalidInput.one(config.file, None, str(err)) from None
        self._state = _State.STARTED
        log.info("AgentRunner %s started with model %s", self.worker_id, config.model_name)

    async def run_task(self, task: DataRow | Mapping[str, Any]) -> TaskResult:
        """Answer `task` and score the answer (see the module).

        RuntimeError before `start()` or after `stop()`; InvalidInput for a dict that is not a
        row (naming each field at fault); TypeError for anything else."""
        model = self._running()
        row = _as_row(task)
        answer: ModelAnswer = await asyncio.to_thread(
            answer_question, model, row.question, task_id=row.id, instruction=row.instruction
        )
        score, score_error = await self._score(row, answer.answer)
        log.info(
            "AgentRunner %s: task %s %s in %d turn(s)%s",
            self.worker_id,
            row.id,
            "answered" if answer.answer is not None else "not answered",
            answer.trajectory.get("total_turns", 0),
            "" if score is None else f", score {score:g}",
        )
        return TaskResult(
            task_id=row.id,
            question=row.question,
            predicted_answer=answer.answer,
            success=answer.answer is not None,
            ground_truth=row.answer,
            score=score,
            error=answer.error or score_error,
            trajectory=answer.trajectory,
        )

    async def stop(self) -> None:
        """No more tasks: `run_task` refuses from now on (a task under way finishes)."""
        if self._state is not _State.STOPPED:
            log.info("AgentRunner %s stopped", self.worker_id)
        self._state = _State.STOPPED

    def _running(self) -> ModelSettings:
        if self._state is _State.NEW:
            raise RuntimeError(
                f"AgentRunner {self.worker_id!r}: run_task before start(): await runner.start() "
                "first"
            )
        if self._state is _State.STOPPED:
            raise RuntimeError(
                f"AgentRunner {self.worker_id!r}: run_task after stop(): the runner is stopped"
            )
        assert self._model is not None
        return self._model

    async def _score(self, row: DataRow, predicted: str | None) -> tuple[float | None, str | None]:
        """The answer's score, or None and why there is none (None when not scoring is normal)."""
        config = self.config
        if not config.evaluate_results or row.answer is None:
            return None, None
        metric = config.evaluation_metric
        try:
            acceptable_answers(row.answer)
        except ValueError as err:
            return None, f"the ground truth cannot be scored by {metric.value}: {err}"
        if predicted is None:
            return 0.0, None
        if metric is not Metric.LLM_JUDGEMENT:
            return score_answer(metric, predicted, row.answer), None
        assert self._judge is not None  # made by start()
        try:
            verdict = await asyncio.to_thread(
                judge,
                self._judge,
                question=row.question,
                predicted=predicted,
                ground_truth=row.answer,
            )
        except JudgeUnparsable as err:
            return None, f"the evaluator's reply holds no score from 0.0 to 1.0: {err}"
        except JudgeFailed as err:
            return None, f"the evaluator failed: {err}"
        return verdict.score, None


def _as_config(config: RolloutConfig | RolloutConfigLike | Mapping[str, Any]) -> RolloutConfig:
    """The config as a checked RolloutConfig."""
    if isinstance(config, RolloutConfig):
        return config
    if isinstance(config, Mapping):
        return RolloutConfig.from_mapping(config)
    values = {
        key: value
        for key in RolloutConfig.model_fields
        if (value := getattr(config, key, None)) is not None
    }
    return RolloutConfig.from_mapping(values, file=type(config).__name__)


def _api_key(config: RolloutConfig, key: str) -> str | None:
    """A key of the config: itself, or the value of the one `${VAR}` it is; None for none."""
    value = (getattr(config, key) or "").strip()
    if not value:
        return None
    names = env_references(value)
    if not names:
        return str(value)
    [name] = names  # RolloutConfig allows one reference and nothing else
    resolved = os.environ.get(name)
    if not resolved:
        raise InvalidInput.one(
            config.file, key, f"refers to ${{{name}}}, which is not set in this environment"
        )
    return resolved


def _as_row(task: DataRow | Mapping[str, Any]) -> DataRow:
    if isinstance(task, DataRow):
        return task
    if not isinstance(task, Mapping):
        raise TypeError(
            f"run_task takes a row (load_tasks) or a dict of seed 002's row keys, not a "
            f"{type(task).__name__}"
        )
    try:
        [row] = parse_rows([(1, dict(task))], file=TASK_SOURCE)
    except InvalidInput as err:
        prefix = "line 1: "
        raise InvalidInput(
            [
                Problem(p.file, (p.field or "").removeprefix(prefix) or None, p.message)
                for p in err.problems
            ]
        ) from None
    return row
