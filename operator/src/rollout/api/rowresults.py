"""Seed 002's result files for data rows: a line of results.jsonl per row, evaluation.json and
the summary, built from the rows' lines. Pure: the runner writes each row's line beside its
result.json (`ROW_LINE`), and the job's end (the operator, local mode, `rollout download`)
puts the files together with these functions.

results.jsonl: one line per row trial, in trial order, with seed 002's fields: task_id,
question, predicted_answer, success, ground_truth, score, error, trajectory. `success` is
whether the agent answered, with no error before the verifier (seed 002: "whether the task
completed successfully"); `score` is the row's reward, null when it has none. What the project
adds (the agent, dataset and attempt of the row, its error type, its verifier) is under
`rollout`, the key the trial files use for the same purpose.

evaluation.json: per metric (or Python verifier) the rows scored with it: `count` (rows with a
score), `mean` (of those scores), `passes` (scores of exactly 1.0, as pass_rate counts them),
`unscored` (rows without a score) and `distribution` (how many rows had each score, rounded to
two decimals, as a string key such as "0.5"); the same for the job as a whole under `overall`,
and per agent under `agents`.

summary_<benchmark>_<timestamp>.json: seed 002's summary. `average_score` is the mean score of
the rows that have one (null when none has); `successful_tasks` counts rows whose agent
answered without an error, `failed_tasks` the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError

from rollout.api.additions import TokenUsage
from rollout.api.base import ApiModel, FileModel
from rollout.api.endpoint import EndpointEvaluation
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.problems import validation_problems
from rollout.api.results import TrialResult, format_timestamp, is_passed

ROW_LINE = "row.json"
"""In a row's trial directory: its line of results.jsonl, as one JSON object."""

RESULTS_JSONL = "results.jsonl"
EVALUATION_JSON = "evaluation.json"


class RowAdditions(ApiModel):
    """What the project adds to a results.jsonl line, under `rollout`."""

    agent_name: str
    dataset_name: str
    attempt: int = Field(ge=1)
    error_type: ErrorType | None = None
    verifier: str | None = Field(None, description="The metric, or python <script>.")
    trace_id: str | None = Field(
        None, exclude_if=lambda v: v is None, description="The attempt's W3C trace id."
    )
    evaluation: EndpointEvaluation | None = Field(
        None, exclude_if=lambda v: v is None, description="An endpoint agent's own evaluation."
    )
    usage: TokenUsage | None = Field(
        None, exclude_if=lambda v: v is None, description="A model agent's tokens."
    )


class ResultLine(FileModel):
    """One line of results.jsonl (seed 002's fields, in its order)."""

    task_id: str
    question: str
    predicted_answer: str | None = None
    success: bool
    ground_truth: Any = None
    score: float | None = Field(None, allow_inf_nan=False)
    error: str | None = None
    trajectory: dict[str, Any] | None = None
    rollout: RowAdditions

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=False)


class MetricFigures(ApiModel):
    """evaluation.json's figures for one metric (or for everything, or one agent)."""

    count: int = 0
    mean: float | None = None
    passes: int = 0
    unscored: int = 0
    distribution: dict[str, int] = Field(default_factory=dict)


@dataclass
class _Tally:
    scores: list[float] = field(default_factory=list)
    unscored: int = 0

    def add(self, score: float | None) -> None:
        if score is None:
            self.unscored += 1
        else:
            self.scores.append(score)

    def figures(self) -> MetricFigures:
        distribution: dict[str, int] = {}
        for score in sorted(self.scores):
            key = str(round(score, 2))
            distribution[key] = distribution.get(key, 0) + 1
        return MetricFigures(
            count=len(self.scores),
            mean=sum(self.scores) / len(self.scores) if self.scores else None,
            passes=sum(1 for s in self.scores if is_passed(s)),
            unscored=self.unscored,
            distribution=distribution,
        )


class Evaluation(FileModel):
    """evaluation.json."""

    metrics: dict[str, MetricFigures]
    overall: MetricFigures
    agents: dict[str, MetricFigures]


def evaluation(lines: Iterable[ResultLine]) -> Evaluation:
    """evaluation.json over the rows' lines (see the module docstring)."""
    overall = _Tally()
    metrics: dict[str, _Tally] = {}
    agents: dict[str, _Tally] = {}
    for line in lines:
        overall.add(line.score)
        metric = line.rollout.verifier or "unscored"
        metrics.setdefault(metric, _Tally()).add(line.score)
        agents.setdefault(line.rollout.agent_name, _Tally()).add(line.score)
    return Evaluation(
        metrics={name: tally.figures() for name, tally in metrics.items()},
        overall=overall.figures(),
        agents={name: tally.figures() for name, tally in agents.items()},
    )


class Summary(FileModel):
    """summary_<benchmark>_<timestamp>.json, seed 002's fields."""

    benchmark_name: str
    total_tasks: int
    successful_tasks: int
    failed_tasks: int
    average_score: float | None
    metric: str | None
    total_time_seconds: float | None
    results_file: str | None
    evaluation_file: str | None
    timestamp: str


def summary(
    lines: Sequence[ResultLine],
    *,
    benchmark_name: str,
    total_time_seconds: float | None,
    results_file: str | None,
    evaluation_file: str | None,
    at: datetime,
) -> Summary:
    """The summary over the rows' lines; `metric` is the one every row was scored by, else the
    metrics joined by commas."""
    scores = [line.score for line in lines if line.score is not None]
    successful = sum(1 for line in lines if line.success)
    metrics = list(dict.fromkeys(line.rollout.verifier for line in lines if line.rollout.verifier))
    return Summary(
        benchmark_name=benchmark_name,
        total_tasks=len(lines),
        successful_tasks=successful,
        failed_tasks=len(lines) - successful,
        average_score=sum(scores) / len(scores) if scores else None,
        metric=",".join(metrics) if metrics else None,
        total_time_seconds=total_time_seconds,
        results_file=results_file,
        evaluation_file=evaluation_file,
        timestamp=format_timestamp(at),
    )


def summary_file_name(benchmark_name: str, at: datetime) -> str:
    """`summary_<benchmark>_<timestamp>.json`, the timestamp as seed 002 writes it
    (20250204T103000), the name made safe as a file name."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in benchmark_name) or "benchmark"
    return f"summary_{safe}_{at.strftime('%Y%m%dT%H%M%S')}.json"


def results_jsonl(lines: Iterable[ResultLine]) -> bytes:
    """results.jsonl's bytes: one line per row, in the order given."""
    return "".join(line.to_json() + "\n" for line in lines).encode()


def parse_line(data: bytes, where: str) -> ResultLine:
    """A row's line (its row.json); InvalidInput naming `where` when it is not one."""
    try:
        return ResultLine.model_validate_json(data)
    except ValidationError as err:
        raise InvalidInput(validation_problems(err, where)) from None


def line_from_result(result: TrialResult, *, verifier: str | None) -> ResultLine:
    """The line of a row whose runner wrote none (its shard never ran, or died before the row):
    what its result.json says, with an empty question and no answer."""
    error = result.error
    return ResultLine(
        task_id=result.task_name,
        question="",
        predicted_answer=None,
        success=False,
        ground_truth=None,
        score=result.reward,
        error=error.message if error is not None else None,
        trajectory=None,
        rollout=RowAdditions(
            agent_name=result.agent_name,
            dataset_name=result.dataset_name,
            attempt=result.attempt,
            error_type=error.type if error is not None else None,
            verifier=verifier,
        ),
    )


def line_of_record(
    record: TrialResult, line: ResultLine | None, *, verifier: str | None
) -> ResultLine:
    """A row's line of results.jsonl: its runner's (row.json) when it says what the row's
    record says (score and error type), else one made from the record. The runner writes
    row.json just before result.json: a runner lost in between leaves a line whose record the
    operator (or local mode) then writes otherwise."""
    error_type = record.error.type if record.error is not None else None
    if line is not None and (line.score, line.rollout.error_type) == (record.reward, error_type):
        return line
    return line_from_result(record, verifier=verifier)


@dataclass(frozen=True)
class RowFileSettings:
    """Which of seed 002's files a job writes (its save_results and save_summary)."""

    save_results: bool = True
    save_summary: bool = True


def row_files(
    lines: Sequence[ResultLine],
    settings: RowFileSettings,
    *,
    benchmark_name: str,
    total_time_seconds: float | None,
    at: datetime,
    uri: Callable[[str], str] = lambda name: name,
) -> dict[str, bytes]:
    """Seed 002's files of a job, by name under the job's directory: results.jsonl (with
    save_results), evaluation.json and the summary (with save_summary). `uri` gives the place
    of a file by its name, for the summary's results_file and evaluation_file."""
    files: dict[str, bytes] = {}
    if settings.save_results:
        files[RESULTS_JSONL] = results_jsonl(lines)
    if settings.save_summary:
        files[EVALUATION_JSON] = (evaluation(lines).model_dump_json(indent=2) + "\n").encode()
        made = summary(
            lines,
            benchmark_name=benchmark_name,
            total_time_seconds=total_time_seconds,
            results_file=uri(RESULTS_JSONL) if settings.save_results else None,
            evaluation_file=uri(EVALUATION_JSON),
            at=at,
        )
        name = summary_file_name(benchmark_name, at)
        files[name] = (made.model_dump_json(indent=2) + "\n").encode()
    return files
