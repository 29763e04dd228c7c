"""Where a task's verifier comes from, and what kind it is (seed 004, "Verifier resolution").

A verifier is a metric that compares the agent's answer with the row's ground truth (seed 002's
six), a Python `evaluate(metadata, trajectory)` in a file of the dataset (seed 004's Python
verifier), or a shell script that writes a reward file in the sandbox (tests/test.sh, the
Harbor convention). The first declaration found, in this order, is the task's verifier:

1. job.yaml's `evaluation_metric` (`--metric` on the command line);
2. the task's own declaration (task.toml's `[verifier]` `metric` or `python`, Shape B);
3. dataset.toml's `[verifier]` `metric` or `python` (shared by every task of the dataset);
4. what the files show: tests/test.sh is the shell verifier, else tests/evaluate.py the Python
   one; a data dataset (Shape A) with neither compares answers by `exact_match`, seed 002's
   default metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Metric(StrEnum):
    """Seed 002's evaluation metrics (`evaluation_metric`)."""

    EXACT_MATCH = "exact_match"
    F1_SCORE = "f1_score"
    CONTAINS_ANSWER = "contains_answer"
    NUMERIC_MATCH = "numeric_match"
    SIMILARITY = "similarity"
    LLM_JUDGEMENT = "llm_judgement"


DEFAULT_METRIC = Metric.EXACT_MATCH
"""Seed 002's default `evaluation_metric`."""

PYTHON_VERIFIER = "tests/evaluate.py"
"""Where seed 004's Python verifier is found when nothing declares one."""

EVALUATE_FUNCTION = "evaluate"
"""The function a Python verifier defines: `evaluate(metadata, trajectory)`."""


class VerifierKind(StrEnum):
    METRIC = "metric"
    PYTHON = "python"
    SHELL = "shell"


class VerifierSource(StrEnum):
    """Where the verifier was declared, for `rollout validate` and error messages."""

    JOB = "job.yaml"
    TASK = "task.toml"
    DATASET = "dataset.toml"
    FILES = "files"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class VerifierChoice:
    """A task's verifier: a metric, or a script (relative to the task's or dataset's files)."""

    kind: VerifierKind
    source: VerifierSource
    metric: Metric | None = None
    script: str | None = None

    def __post_init__(self) -> None:
        if (self.kind is VerifierKind.METRIC) != (self.metric is not None):
            raise ValueError("a metric verifier names its metric, and only it does")
        if (self.kind is not VerifierKind.METRIC) != (self.script is not None):
            raise ValueError("a script verifier names its script, and only it does")

    @classmethod
    def of_metric(cls, metric: Metric | str, source: VerifierSource) -> VerifierChoice:
        return cls(VerifierKind.METRIC, source, metric=Metric(metric))

    @classmethod
    def of_python(cls, script: str, source: VerifierSource) -> VerifierChoice:
        return cls(VerifierKind.PYTHON, source, script=script)

    def under(self, job_metric: Metric | None) -> VerifierChoice:
        """This verifier, unless the job names a metric: job.yaml's evaluation_metric comes
        first in the order (1 above)."""
        if job_metric is None:
            return self
        return VerifierChoice.of_metric(job_metric, VerifierSource.JOB)

    def describe(self) -> str:
        """`metric exact_match (dataset.toml)`, `python tests/evaluate.py (files)`."""
        what = self.metric.value if self.metric is not None else self.script
        return f"{self.kind.value} {what} ({self.source.value})"
