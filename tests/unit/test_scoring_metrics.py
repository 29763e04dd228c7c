"""Seed 002's metrics (`rollout.api.scoring`): the normalisation, each metric, the ground
truth's forms, and the reading of a judge's reply."""

from __future__ import annotations

import pytest

from rollout.api.scoring import (
    extract_numbers,
    judge_messages,
    normalize_answer,
    parse_judge_score,
    score_answer,
)
from rollout.api.verifiers import Metric

# --- the normalisation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("Paris", "paris"),
        ("  PARIS \t\n France ", "paris france"),  # case, whitespace collapsed and stripped
        ("Paris, France!", "paris france"),  # ASCII punctuation
        ("«Paris» — France¿", "paris france"),  # Unicode punctuation
        ("U.S.A.", "usa"),  # deleted, not replaced by a space
        ("don't", "dont"),
        ("The Eiffel Tower", "eiffel tower"),  # articles
        ("a cat and an owl", "cat and owl"),
        ("theatre anatomy banana", "theatre anatomy banana"),  # articles only as whole words
        ("The, the; THE.", ""),
        ("\uff30\uff41\uff52\uff49\uff53 \ufb01ne", "paris fine"),  # NFKC: full width, ligature
        ("price: 5°C", "price 5°c"),  # a symbol that is not punctuation stays
        ("", ""),
    ],
)
def test_normalize_answer(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


# --- exact_match ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicted", "truth", "score"),
    [
        ("Paris", "Paris", 1.0),  # seed 002
        ("paris", "Paris", 1.0),
        ("  The Paris. ", "paris", 1.0),
        ("Paris France", "Paris", 0.0),
        ("Lyon", "Paris", 0.0),
        ("H2O", "H2O", 1.0),
        ("405", 405, 1.0),  # a number is compared in its str() form
        ("405", 405.0, 0.0),  # "405.0": numeric_match is the metric for that
        ("405.0", 405.0, 1.0),
        ("True", True, 1.0),  # a bool is "true" / "false"
        ("false", False, 1.0),
        ("yes", True, 0.0),
    ],
)
def test_exact_match(predicted: str, truth: object, score: float) -> None:
    assert score_answer(Metric.EXACT_MATCH, predicted, truth) == score


# --- f1_score ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicted", "truth", "score"),
    [
        # seed 002's partial overlap: tokens [capital, is, paris] vs [paris, france]:
        # precision 1/3, recall 1/2, F1 = 2 * (1/6) / (5/6) = 0.4
        ("the capital is Paris", "Paris France", 0.4),
        ("Paris", "Paris", 1.0),
        ("Paris, France.", "the paris FRANCE", 1.0),
        ("Lyon", "Paris", 0.0),
        # multiset overlap: "paris" twice in the answer counts once against one in the truth
        ("paris paris", "paris", 2 * 0.5 * 1.0 / 1.5),
        ("paris paris", "paris paris lyon", 2 * 1.0 * (2 / 3) / (1 + 2 / 3)),
        ("", "", 1.0),  # both empty
        ("the", "a", 1.0),  # both empty once normalised
        ("", "Paris", 0.0),  # one empty
        ("Paris", "the", 0.0),
    ],
)
def test_f1_score(predicted: str, truth: str, score: float) -> None:
    assert score_answer(Metric.F1_SCORE, predicted, truth) == pytest.approx(score)


# --- contains_answer --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("predicted", "truth", "score"),
    [
        ("The capital of France is Paris.", "Paris", 1.0),
        ("It is New York City", "new york", 1.0),  # several tokens, adjacent and in order
        ("It is York, New", "new york", 0.0),
        ("new and york", "new york", 0.0),
        ("Parisian food", "Paris", 0.0),  # token boundaries, not a substring
        ("Paris", "Paris, France", 0.0),
        ("", "", 1.0),
        ("anything", "the", 0.0),  # a ground truth with no token is contained in nothing else
        ("", "Paris", 0.0),
    ],
)
def test_contains_answer(predicted: str, truth: str, score: float) -> None:
    assert score_answer(Metric.CONTAINS_ANSWER, predicted, truth) == score


# --- numeric_match ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("405", [405.0]),
        ("405.0", [405.0]),
        ("The answer is 405.", [405.0]),
        ("1,234", [1234.0]),
        ("1,234,567.5", [1234567.5]),
        ("1,2345", [1.0, 2345.0]),  # not thousands groups
        ("3,5", [3.0, 5.0]),  # no decimal comma
        ("-3.5", [-3.5]),
        ("x=-3 and +2", [-3.0, 2.0]),
        ("\u22127", [-7.0]),  # the Unicode minus sign
        ("pages 3-5", [3.0, 5.0]),  # a hyphen between numbers is no sign
        ("COVID-19", [19.0]),
        ("1e3", [1000.0]),
        ("2.5E-4", [0.00025]),
        ("$12", [12.0]),
        ("50%", [50.0]),
        (".5", [0.5]),
        ("1.2.3", [1.2]),
        ("1/2", [1.0, 2.0]),
        ("\uff14\uff10\uff15", [405.0]),  # full-width digits
        ("five", []),
        ("1e999", []),  # too large for a float
    ],
)
def test_extract_numbers(text: str, numbers: list[float]) -> None:
    assert extract_numbers(text) == pytest.approx(numbers)


@pytest.mark.parametrize(
    ("predicted", "truth", "score"),
    [
        ("405", "405.0", 1.0),  # seed 002
        ("405.0", 405, 1.0),
        ("15 * 27 = 405", "405", 1.0),  # the answer's LAST number
        ("405, or maybe 406", "405", 0.0),
        ("It costs $1,234.", 1234, 1.0),
        ("about 50%", "50", 1.0),
        ("0.5", "50%", 0.0),  # a percent sign does not divide by 100
        ("-3.5", -3.5, 1.0),
        ("1e3", "1000", 1.0),
        ("Natalia sold 48 + 24 = 72 clips", "She sold 48/2 = 24 in May. #### 72", 1.0),
        ("no number here", "405", 0.0),
        ("405", "no number", 0.0),
        ("405", True, 0.0),  # a bool is text ("true"): no number
        ("1", 10**400, 0.0),  # an integer too large for a float is no number
    ],
)
def test_numeric_match(predicted: str, truth: object, score: float) -> None:
    assert score_answer(Metric.NUMERIC_MATCH, predicted, truth) == score


@pytest.mark.parametrize(
    ("predicted", "truth", "score"),
    [
        # near zero the tolerance is absolute: 1e-6
        ("0.000001", 0, 1.0),
        ("0.0000011", 0, 0.0),
        ("1.000001", 1, 1.0),
        ("1.0000011", 1, 0.0),
        ("0.30000000000000004", 0.3, 1.0),  # float arithmetic's noise
        # for large numbers it is relative: 1e-6 of the truth
        ("1000000.9", 1_000_000, 1.0),
        ("1000001.1", 1_000_000, 0.0),
        ("-1000000.9", -1_000_000, 1.0),
        ("1000000", -1_000_000, 0.0),
    ],
)
def test_numeric_match_tolerance(predicted: str, truth: object, score: float) -> None:
    assert score_answer(Metric.NUMERIC_MATCH, predicted, truth) == score


# --- similarity -------------------------------------------------------------------------------


def test_similarity_is_the_sequence_matcher_ratio_of_normalised_texts() -> None:
    assert score_answer(Metric.SIMILARITY, "The Paris!", "paris") == 1.0
    assert score_answer(Metric.SIMILARITY, "abcd", "wxyz") == 0.0
    # "paris" vs "pariss": 2 * 5 matched / 11 characters
    assert score_answer(Metric.SIMILARITY, "Paris", "Pariss") == pytest.approx(10 / 11)
    assert score_answer(Metric.SIMILARITY, "", "") == 1.0


# --- the ground truth's forms -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "predicted", "truths", "score"),
    [
        (Metric.EXACT_MATCH, "NYC", ["New York City", "NYC"], 1.0),
        (Metric.EXACT_MATCH, "LA", ["New York City", "NYC"], 0.0),
        (Metric.F1_SCORE, "new york", ["New York City", "York"], 0.8),  # the best of them
        (Metric.CONTAINS_ANSWER, "I think NYC", ("New York", "NYC"), 1.0),
        (Metric.NUMERIC_MATCH, "12", ["twelve", 12], 1.0),
        (Metric.SIMILARITY, "paris", ["lyon", "paris"], 1.0),
    ],
)
def test_a_list_of_acceptable_answers_scores_the_best(
    metric: Metric, predicted: str, truths: object, score: float
) -> None:
    assert score_answer(metric, predicted, truths) == pytest.approx(score)


@pytest.mark.parametrize(
    ("truth", "problem"),
    [
        (None, "no ground truth"),
        ([], "empty list"),
        (["Paris", None], "no ground truth"),
        ({"answer": "Paris"}, "is a dict"),
        ([["Paris"]], "is a list"),
    ],
)
@pytest.mark.parametrize("metric", [m for m in Metric if m is not Metric.LLM_JUDGEMENT])
def test_a_ground_truth_that_is_none_or_of_another_type_is_refused(
    metric: Metric, truth: object, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        score_answer(metric, "Paris", truth)


def test_llm_judgement_is_not_scored_here() -> None:
    with pytest.raises(ValueError, match="judge model"):
        score_answer(Metric.LLM_JUDGEMENT, "Paris", "Paris")


def test_a_metric_may_be_named_by_its_string() -> None:
    assert score_answer("f1_score", "the capital is Paris", "Paris France") == pytest.approx(0.4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not_a_metric"):
        score_answer("not_a_metric", "Paris", "Paris")  # type: ignore[arg-type]


# --- llm_judgement: the prompt and the reply --------------------------------------------------


def test_judge_messages_ask_for_a_score_line_and_carry_the_three_texts() -> None:
    messages = judge_messages("What is the capital of France?", "It is Paris", "Paris")
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "What is the capital of France?" in user
    assert "It is Paris" in user
    assert "Reference answer:\nParis" in user
    assert "SCORE: <number>" in messages[0]["content"]
    assert "between 0.0 and 1.0" in user


def test_judge_messages_list_every_acceptable_answer() -> None:
    user = judge_messages("Q?", "A", ["NYC", "New York City", 5])[1]["content"]
    assert "any one of them is correct" in user
    assert "- NYC\n- New York City\n- 5" in user
    with pytest.raises(ValueError, match="no ground truth"):
        judge_messages("Q?", "A", None)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("The answer matches.\nSCORE: 0.8", 0.8),
        ("SCORE: 1", 1.0),
        ("SCORE: 0", 0.0),
        ("score: .5", 0.5),
        ("**Score:** 0.75", 0.75),
        ("Final score = 0.9.", 0.9),
        ("SCORE: 80%", 0.8),
        ("0.8", 0.8),
        ("  1.0.\n", 1.0),
        ("75%", 0.75),
        ('{"score": 0.8}', 0.8),
        ('{"Score": 1}', 1.0),
        ('Here you go:\n```json\n{"reasoning": "ok", "score": 0.3}\n```', 0.3),
        ("SCORE: 0.8\nTo repeat, SCORE: 0.8", 0.8),  # the same number twice is one score
        # none, or not exactly one
        ("The answer is correct.", None),
        ("", None),
        ("SCORE: 0.5\nOn reflection, SCORE: 0.9", None),  # two different scores
        ("SCORE: 1.5", None),  # out of range
        ("SCORE: -0.2", None),
        ("SCORE: 80", None),  # 80 without % is out of range
        ("SCORE: 150%", None),
        ("SCORE: high", None),
        ('{"score": "high"}', None),
        ('{"score": true}', None),
        ('{"verdict": 1}', None),
        ("2", None),
        ("0.5 or 0.6", None),
        ("NaN", None),
    ],
)
def test_parse_judge_score(reply: str, score: float | None) -> None:
    found = parse_judge_score(reply)
    if score is None:
        assert found is None
    else:
        assert found == pytest.approx(score)
