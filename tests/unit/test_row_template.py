"""instruction.md.tpl: placeholders, the lettered choices, and what is left alone."""

from __future__ import annotations

import pytest

from rollout.api.rowtemplate import choice_letter, placeholders, render_row, render_value


def test_placeholders_in_order_of_first_use_with_whitespace_inside_braces() -> None:
    template = "Q: {{question}}\n{{ choices }}\nAgain: {{question}} {{\tid\t}}"
    assert placeholders(template) == ["question", "choices", "id"]


def test_render_replaces_every_placeholder() -> None:
    row = {"question": "What is 2+2?", "id": "q1"}
    assert render_row("[{{ id }}] {{question}}", row) == "[q1] What is 2+2?"


def test_a_list_becomes_a_lettered_block() -> None:
    row = {"q": "Pick one", "choices": ["red", "green", 3]}
    assert render_row("{{q}}\n{{choices}}", row) == "Pick one\n(A) red\n(B) green\n(C) 3"


def test_letters_go_on_after_z_as_spreadsheet_columns() -> None:
    assert [choice_letter(i) for i in (0, 1, 25, 26, 27, 51, 52, 701, 702)] == [
        "A",
        "B",
        "Z",
        "AA",
        "AB",
        "AZ",
        "BA",
        "ZZ",
        "AAA",
    ]
    block = render_value([str(i) for i in range(28)]).splitlines()
    assert block[25:] == ["(Z) 25", "(AA) 26", "(AB) 27"]
    with pytest.raises(ValueError, match="0 or more"):
        choice_letter(-1)


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (3, "3"),
        (2.5, "2.5"),
        (True, "true"),
        (None, "null"),
        ({"a": 1, "b": [1, 2]}, '{"a": 1, "b": [1, 2]}'),
        ("ünï", "ünï"),
        ([], ""),
        ([{"x": 1}], '(A) {"x": 1}'),
    ],
)
def test_other_values_are_rendered_as_json(value: object, rendered: str) -> None:
    assert render_row("{{v}}", {"v": value}) == rendered


def test_a_missing_field_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="no field 'choices'") as caught:
        render_row("{{question}} {{choices}}", {"question": "q"})
    assert not isinstance(caught.value, KeyError)


def test_braces_that_are_no_placeholder_are_left_as_they_are() -> None:
    template = 'JSON: {"a": {"b": 1}} and {{}} and {{ two words }} and {single} and {{x}}'
    assert placeholders(template) == ["x"]
    assert render_row(template, {"x": "X"}) == (
        'JSON: {"a": {"b": 1}} and {{}} and {{ two words }} and {single} and X'
    )


def test_a_value_holding_a_placeholder_is_not_expanded_again() -> None:
    row = {"a": "{{b}}", "b": "no"}
    assert render_row("{{a}}", row) == "{{b}}"
