"""Scoring a data benchmark's answer against its ground truth: seed 002's metrics.

A data row (Shape A) carries its ground truth; the agent's final answer is compared with it by
the metric the job or the dataset names (`rollout.api.verifiers.Metric`). Everything here is
pure, so `rollout validate`, local mode and the runner score the same answer the same way.
`llm_judgement` needs a model, so only its prompt and the reading of its reply live here; the
runner makes the call (`rollout_runner.judge`).

The one normalisation (`normalize_answer`), SQuAD's with Unicode folded first, in this order:

1. Unicode NFKC (full-width letters and digits, ligatures and compatibility forms fold to their
   plain forms: full-width "Paris" is "Paris", the ligature "ﬁ" is "fi");
2. lowercase;
3. punctuation deleted (not replaced by a space, as SQuAD does: "U.S." is "us", "don't" is
   "dont"): every character of `string.punctuation` and every Unicode punctuation character
   (categories P*: "«", "—", "¿", "。"). Other symbols ("°", "€") stay;
4. the English articles "a", "an" and "the" removed where they are whole words;
5. whitespace collapsed to single spaces and stripped.

Tokens are the normalised text split on whitespace (so text without spaces, such as Chinese, is
one token).

The metrics, each a score in 0.0-1.0:

- `exact_match`: 1.0 when the normalised texts are equal.
- `f1_score`: SQuAD's token F1, counting shared tokens as a multiset; both sides without a token
  give 1.0, one side without a token gives 0.0.
- `contains_answer`: 1.0 when the ground truth's tokens appear, in order and adjacent, among the
  answer's tokens: on token boundaries, so "paris" is in "it is paris" but not in "parisian".
  A ground truth without a token is contained only in an answer without one.
- `numeric_match`: 1.0 when the answer's LAST number equals the ground truth's number within
  `NUMERIC_RELATIVE_TOLERANCE` (see `extract_numbers` for what a number is). The ground truth's
  number is the number itself when the ground truth is an int or a float, else the last number
  of its text, so a GSM8K solution ending "#### 72" gives 72. No number on either side: 0.0.
- `similarity`: `difflib.SequenceMatcher`'s ratio of the normalised texts (its defaults).

The ground truth is a string, an int or a float (compared in its `str()` form, so 405.0 is
"405.0": `numeric_match` is the metric that equates 405 and 405.0), a bool ("true" or "false"),
or a list of such acceptable answers, scored by the best of them. None, an empty list or any
other type raises ValueError, which the caller reports.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable

from rollout.api.verifiers import Metric

NUMERIC_RELATIVE_TOLERANCE = 1e-6
"""Two numbers match when |answer - truth| <= 1e-6 * max(1, |truth|): absolute near zero,
relative for large numbers, and loose enough that 0.1 + 0.2 matches 0.3."""

_ASCII_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPACE = re.compile(r"\s+")

# A number: an optional sign (only where it cannot be a hyphen or a minus between two operands:
# "3-5" is 3 and 5), digits with optional thousands groups ("1,234") or plain, an optional
# fraction, an optional exponent. It never starts inside another number ("1.2.3" is 1.2).
_NUMBER = re.compile(
    r"(?:(?<![\w.])[+-])?"
    r"(?<![\d.])"
    r"(?:(?:\d{1,3}(?:,\d{3}(?!\d))+|\d+)(?:\.\d*)?|\.\d+)"
    r"(?:[eE][+-]?\d+)?"
)
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-"})


def normalize_answer(text: str) -> str:
    """The normalised form of an answer (the module's docstring gives the rules)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(
        ch
        for ch in text
        if ch not in _ASCII_PUNCTUATION and not unicodedata.category(ch).startswith("P")
    )
    text = _ARTICLES.sub(" ", text)
    return _SPACE.sub(" ", text).strip()


def extract_numbers(text: str) -> list[float]:
    """The numbers written in `text`, in order.

    Recognised: integers and decimals ("405", "405.0", ".5", "405."), a sign where it is not a
    hyphen ("-3.5", "+2", "x=-3"; the Unicode minus counts as "-"), thousands separated by
    commas in groups of three ("1,234,567"), exponents ("1e3", "2.5E-4"). Whatever surrounds a
    number is ignored, so "$12" is 12 and "50%" is 50 (not 0.5). Not recognised: a decimal
    comma ("3,5" is 3 and 5), fractions ("1/2" is 1 and 2), numbers in words ("five").
    Numbers too large for a float are skipped.
    """
    text = unicodedata.normalize("NFKC", text).translate(_MINUS_SIGNS)
    numbers = []
    for match in _NUMBER.finditer(text):
        value = float(match.group().replace(",", ""))
        if math.isfinite(value):
            numbers.append(value)
    return numbers


def numbers_match(answer: float, truth: float) -> bool:
    """Whether `answer` equals `truth` within `NUMERIC_RELATIVE_TOLERANCE`."""
    return abs(answer - truth) <= NUMERIC_RELATIVE_TOLERANCE * max(1.0, abs(truth))


def score_answer(metric: Metric, predicted: str, ground_truth: object) -> float:
    """The score of `predicted` against `ground_truth` by `metric` (not `llm_judgement`).

    Raises ValueError for `llm_judgement`, an unknown metric and a ground truth that is None,
    an empty list or of a type the module's docstring does not list.
    """
    metric = Metric(metric)
    if metric is Metric.LLM_JUDGEMENT:
        raise ValueError(
            "llm_judgement is scored by a judge model (rollout_runner.judge), not by score_answer"
        )
    truths = acceptable_answers(ground_truth)
    if metric is Metric.NUMERIC_MATCH:
        return max(_numeric_match(predicted, truth) for truth in truths)
    text_metric = _TEXT_METRICS[metric]
    answer = normalize_answer(predicted)
    return max(text_metric(answer, normalize_answer(_text(truth))) for truth in truths)


def acceptable_answers(ground_truth: object) -> list[str | int | float | bool]:
    """The acceptable answers a ground truth names: itself, or the items of a list.

    Raises ValueError for None, an empty list, and anything but a string, a number or a bool
    (in a list too).
    """
    items = list(ground_truth) if isinstance(ground_truth, list | tuple) else [ground_truth]
    if not items:
        raise ValueError("the ground truth is an empty list: there is no acceptable answer")
    answers: list[str | int | float | bool] = []
    for item in items:
        if item is None:
            raise ValueError("the row has no ground truth (it is null)")
        if not isinstance(item, str | int | float | bool):
            raise ValueError(
                f"the ground truth is a {type(item).__name__}, not a string, a number, a bool "
                "or a list of them"
            )
        answers.append(item)
    return answers


def _text(truth: str | int | float | bool) -> str:
    if isinstance(truth, bool):
        return json.dumps(truth)  # "true", "false"
    return str(truth)


def _exact_match(answer: str, truth: str) -> float:
    return 1.0 if answer == truth else 0.0


def _f1_score(answer: str, truth: str) -> float:
    answer_tokens, truth_tokens = answer.split(), truth.split()
    if not answer_tokens or not truth_tokens:
        return 1.0 if answer_tokens == truth_tokens else 0.0
    shared = sum((Counter(answer_tokens) & Counter(truth_tokens)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(answer_tokens)
    recall = shared / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def _contains_answer(answer: str, truth: str) -> float:
    answer_tokens, truth_tokens = answer.split(), truth.split()
    if not truth_tokens:
        return 1.0 if not answer_tokens else 0.0
    width = len(truth_tokens)
    found = any(
        answer_tokens[start : start + width] == truth_tokens
        for start in range(len(answer_tokens) - width + 1)
    )
    return 1.0 if found else 0.0


def _similarity(answer: str, truth: str) -> float:
    return difflib.SequenceMatcher(None, answer, truth).ratio()


_TEXT_METRICS: dict[Metric, Callable[[str, str], float]] = {
    Metric.EXACT_MATCH: _exact_match,
    Metric.F1_SCORE: _f1_score,
    Metric.CONTAINS_ANSWER: _contains_answer,
    Metric.SIMILARITY: _similarity,
}


def _numeric_match(predicted: str, truth: str | int | float | bool) -> float:
    answers = extract_numbers(predicted)
    expected: float | None
    if isinstance(truth, int | float) and not isinstance(truth, bool):
        try:
            expected = float(truth)
        except OverflowError:  # an integer with hundreds of digits
            expected = None
        if expected is not None and not math.isfinite(expected):
            expected = None
    else:
        truth_numbers = extract_numbers(_text(truth))
        expected = truth_numbers[-1] if truth_numbers else None
    if not answers or expected is None:
        return 0.0
    return 1.0 if numbers_match(answers[-1], expected) else 0.0


# --- llm_judgement: the prompt and the reading of the reply ---------------------------------

SCORE_LINE = "SCORE: <number>"

_JUDGE_SYSTEM = (
    "You are a strict, impartial grader. You compare a candidate answer with the reference "
    "answer of a question and judge whether the candidate is correct: whether it states the "
    "same facts, values or conclusions as the reference. Ignore differences of wording, "
    "formatting, order and length; penalise missing, extra incorrect or contradicting content. "
    "Give a score between 0.0 (wrong) and 1.0 (fully correct); use values in between only for "
    "partially correct answers. Explain briefly, then end your reply with one final line of "
    f"exactly this form, with nothing after it:\n{SCORE_LINE}"
)


def judge_messages(question: str, predicted: str, ground_truth: object) -> list[dict[str, str]]:
    """The OpenAI chat messages that ask a judge model to score `predicted`.

    Raises ValueError for a ground truth `score_answer` refuses.
    """
    truths = acceptable_answers(ground_truth)
    if len(truths) == 1:
        reference = f"Reference answer:\n{_text(truths[0])}"
    else:
        listed = "\n".join(f"- {_text(truth)}" for truth in truths)
        reference = f"Reference answers (any one of them is correct):\n{listed}"
    user = (
        f"Question:\n{question}\n\n{reference}\n\nCandidate answer:\n{predicted}\n\n"
        f"Grade the candidate answer. End with the line {SCORE_LINE}, the number between "
        "0.0 and 1.0."
    )
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]


# "SCORE: 0.8", "**Score**: 0.8", "score = 80%", anywhere in a line, in any case.
_SCORE_LINE = re.compile(
    r"\bscore\b[\s*_\"']*[:=][\s*_\"']*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%?)", re.IGNORECASE
)
_BARE_NUMBER = re.compile(r"[\s*`]*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%?)[\s*`.]*")
_JSON_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_judge_score(reply: str) -> float | None:
    """The score a judge's reply gives, in 0.0-1.0, or None when there is not exactly one.

    Read, in this order (the first form present decides):

    1. "score" followed by ":" or "=" and a number, anywhere and in any case ("SCORE: 0.8",
       "**Score:** 0.8"). Every such mention must give the same number;
    2. the whole reply (or a ```json block) as JSON: `{"score": 0.8}`, or a bare number;
    3. the whole reply a bare number ("0.8", "0.8.").

    A number followed by "%" is a percentage ("SCORE: 80%" is 0.8); without it, 80 is out of
    range. A number outside 0.0-1.0, or mentions that disagree, give None.
    """
    mentions = {_percent(number, percent) for number, percent in _SCORE_LINE.findall(reply)}
    if mentions:
        return _in_range(mentions.pop()) if len(mentions) == 1 else None
    for candidate in (reply, *_JSON_FENCE.findall(reply)):
        found = _json_score(candidate)
        if found is not None:
            return _in_range(found)
    bare = _BARE_NUMBER.fullmatch(reply)
    return _in_range(_percent(*bare.groups())) if bare else None


def _percent(number: str, percent: str) -> float:
    value = float(number)
    return value / 100 if percent else value


def _in_range(value: float) -> float | None:
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def _json_score(text: str) -> float | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict):
        data = {str(key).lower(): value for key, value in data.items()}.get("score")
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    return None
