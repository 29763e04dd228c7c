"""Scoring one row's answer: a metric, the llm_judgement evaluator, or the dataset's Python
verifier (`rollout.api.verifiers`), with the seed's error types.

| what happens                                        | error type                |
| --------------------------------------------------- | ------------------------- |
| a metric's row has no ground truth it can compare   | task_invalid              |
| evaluate.py raises, returns a wrong type, won't load| verifier_failed           |
| evaluate.py runs past the verifier timeout          | verifier_timeout          |
| its value gives no reward (the coercion rule)       | verifier_reward_invalid   |
| the evaluator cannot be reached, or answers no chat | verifier_failed           |
| the evaluator runs past the verifier timeout        | verifier_timeout          |
| the evaluator's settings are refused                | verifier_failed           |
| the evaluator's reply holds no score                | verifier_reward_invalid   |

Whatever the verifier printed, and what it was given, goes to the row's logs/verifier/: the
metric and the score (stdout.txt), the reward (reward.txt), and a Python verifier's output.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.reward import CoercedReward
from rollout.api.rowrun import EvaluatorSettings, RowVerifier
from rollout.api.scoring import acceptable_answers, score_answer
from rollout.api.verifiers import Metric, VerifierKind
from rollout_runner.judge import JudgeFailed, JudgeSettings, JudgeUnparsable, judge
from rollout_runner.pyverifier import run_python_verifier
from rollout_runner.rowdata import RowData

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """A row's score (a reward), or why it has none; and the verifier's output for its logs."""

    reward: CoercedReward | None
    error_type: ErrorType | None = None
    message: str | None = None
    output: str = ""


async def score_row(
    verifier: RowVerifier,
    row: RowData,
    answer: str,
    trajectory: dict[str, Any],
    *,
    rows_dir: Path,
    timeout_sec: float,
    evaluator: EvaluatorSettings | None,
    evaluator_key: str | None,
) -> Verdict:
    """Score `answer` for `row`; never raises for the row's own problems."""
    if verifier.kind is VerifierKind.PYTHON:
        assert verifier.script is not None  # RowVerifier's rule
        verdict = await run_python_verifier(
            rows_dir / verifier.script, row.metadata, trajectory, timeout_sec=timeout_sec
        )
        return Verdict(verdict.reward, verdict.error_type, verdict.message, verdict.log)
    assert verifier.metric is not None
    if row.answer is None:
        return Verdict(
            None,
            ErrorType.TASK_INVALID,
            f"Row {row.id!r} has no ground truth (answer, ground_truth or expected) for the "
            f"{verifier.metric.value} metric to compare with",
        )
    try:
        acceptable_answers(row.answer)
    except ValueError as err:
        return Verdict(
            None,
            ErrorType.TASK_INVALID,
            f"Row {row.id!r}'s ground truth cannot be compared by the {verifier.metric.value} "
            f"metric: {err}",
        )
    if verifier.metric is Metric.LLM_JUDGEMENT:
        return await _judged(row, answer, evaluator, evaluator_key, timeout_sec)
    score = score_answer(verifier.metric, answer, row.answer)
    output = _described(verifier.metric.value, answer, row.answer, score)
    return Verdict(CoercedReward(score), output=output)


async def _judged(
    row: RowData,
    answer: str,
    evaluator: EvaluatorSettings | None,
    key: str | None,
    timeout_sec: float,
) -> Verdict:
    if evaluator is None:
        return Verdict(None, ErrorType.VERIFIER_FAILED, "llm_judgement has no evaluator settings")
    try:
        settings = JudgeSettings(
            model=evaluator.model_name,
            base_url=evaluator.base_url,
            api_key=key,
            temperature=evaluator.temperature,
            max_retries=evaluator.max_retries,
            extra_params=dict(evaluator.extra_params),
        )
    except ValueError as err:
        return Verdict(
            None, ErrorType.VERIFIER_FAILED, f"The evaluator's settings are refused: {err}"
        )
    try:
        # The verifier's timeout bounds the evaluator's calls and retries together; a call that
        # outlives it is left to finish in its thread, unread.
        async with asyncio.timeout(timeout_sec):
            verdict = await asyncio.to_thread(
                judge, settings, question=row.question, predicted=answer, ground_truth=row.answer
            )
    except TimeoutError:
        return Verdict(
            None,
            ErrorType.VERIFIER_TIMEOUT,
            f"The evaluator gave no score within the verifier's timeout of {timeout_sec:g} seconds",
        )
    except JudgeUnparsable as err:
        return Verdict(
            None,
            ErrorType.VERIFIER_REWARD_INVALID,
            f"The evaluator's reply holds no score from 0.0 to 1.0: {err}",
            output=f"evaluator reply:\n{err.reply}\n",
        )
    except JudgeFailed as err:
        return Verdict(None, ErrorType.VERIFIER_FAILED, f"The evaluator failed: {err}")
    output = _described("llm_judgement", answer, row.answer, verdict.score)
    output += f"evaluator reply ({verdict.attempts} attempt(s)):\n{verdict.reply}\n"
    return Verdict(CoercedReward(verdict.score), output=output)


def _described(metric: str, answer: str, truth: Any, score: float) -> str:
    shown = json.dumps(truth, ensure_ascii=False)
    return (
        f"metric: {metric}\npredicted: {json.dumps(answer, ensure_ascii=False)}\n"
        f"ground truth: {shown}\nscore: {score:g}\n"
    )


def oracle_answer(row: RowData) -> str:
    """The oracle's answer to a row: its ground truth (the first of several acceptable ones),
    as text. A row without one gets an empty answer, which its verifier then judges."""
    truth = row.answer
    if isinstance(truth, list):
        truth = truth[0] if truth else None
    if truth is None:
        return ""
    if isinstance(truth, str):
        return truth
    return json.dumps(truth, ensure_ascii=False)
