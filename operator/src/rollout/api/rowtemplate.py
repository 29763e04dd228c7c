"""A data dataset's instruction template (seed 004's `instruction.md.tpl`), rendered with a row.

One template serves every row of a Shape A dataset, so it must say the same thing for every row
and fail loudly, naming the field, when a row lacks one it uses: an agent shown a half-filled
prompt would be scored on a question nobody asked.

The syntax is deliberately small, so that nothing in a prompt's prose is taken for syntax:

- `{{field}}` (whitespace inside the braces allowed: `{{ field }}`) is replaced by the row's
  value of `field`, looked up as written (no dotted paths, no filters). A field name is any run
  of characters other than braces and whitespace.
- Braces that do not form a placeholder (`{{ two words }}`, `{{}}`, a lone `{` of some JSON in
  the prompt) are left exactly as they are; there is no escape syntax because none is needed.
- Substitution is one pass: a value that itself contains `{{x}}` is not expanded again.
- A string is inserted as is. A list becomes a lettered block, one item a line, `(A) first`,
  `(B) second`, ... (seed 004's MCQ choices); after `(Z)` come `(AA)`, `(AB)`, ... as spreadsheet
  columns are named, so no two items share a letter. Anything else (numbers, booleans, null,
  objects, and non-string list items) is inserted as JSON: `3`, `true`, `null`, `{"a": 1}`.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")
"""`{{field}}` or `{{ field }}`; the field is group 1."""


def placeholders(template: str) -> list[str]:
    """The field names the template uses, in order of first use, each once."""
    return list(dict.fromkeys(match.group(1) for match in PLACEHOLDER.finditer(template)))


def render_row(template: str, row: Mapping[str, Any]) -> str:
    """The template with every placeholder replaced by the row's value (see the module's rules).

    Raises ValueError naming the first field the row lacks; `placeholders` lists them all for a
    caller that wants to report every one."""
    missing = [name for name in placeholders(template) if name not in row]
    if missing:
        listed = ", ".join(repr(name) for name in missing)
        raise ValueError(f"the row has no field {listed}, which the template uses")
    return PLACEHOLDER.sub(lambda match: render_value(row[match.group(1)]), template)


def render_value(value: Any) -> str:
    """One value as the template inserts it: a string as is, a list lettered, else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            f"({choice_letter(index)}) {_scalar(item)}" for index, item in enumerate(value)
        )
    return _scalar(value)


def choice_letter(index: int) -> str:
    """The letter of the choice at 0-based `index`: A..Z, then AA, AB, ... (bijective base 26)."""
    if index < 0:
        raise ValueError(f"a choice index is 0 or more, not {index}")
    letters = ""
    number = index + 1
    while number:
        number, rest = divmod(number - 1, 26)
        letters = string.ascii_uppercase[rest] + letters
    return letters


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
