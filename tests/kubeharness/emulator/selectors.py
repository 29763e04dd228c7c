"""Label and field selectors, parsed and matched as the API server does for lists and watches."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from kubeharness.emulator.errors import bad_request


def _lookup(body: Mapping[str, Any], dotted: str) -> Any:
    value: Any = body
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _split_selector(text: str) -> list[str]:
    """Split a selector on the commas that are not inside `in (...)` lists."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return [part for part in parts if part]


_SET_TERM = re.compile(r"(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)")
_EQUALITY_TERM = re.compile(r"(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)")
_EXISTS_TERM = re.compile(r"(?P<neg>!?)\s*(?P<key>[^\s!=()]+)")


@dataclasses.dataclass(frozen=True)
class Selector:
    """A parsed `labelSelector` plus `fieldSelector`; `matches(body)` says if an object is in."""

    labels: tuple[tuple[str, str, frozenset[str]], ...] = ()
    fields: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def parse(cls, label_selector: str = "", field_selector: str = "") -> Selector:
        labels: list[tuple[str, str, frozenset[str]]] = []
        for term in _split_selector(label_selector):
            if match := _SET_TERM.fullmatch(term):
                values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
                labels.append((match["key"], match["op"], values))
            elif match := _EQUALITY_TERM.fullmatch(term):
                op = "!=" if match["op"] == "!=" else "="
                labels.append((match["key"], op, frozenset({match["value"]})))
            elif match := _EXISTS_TERM.fullmatch(term):
                labels.append((match["key"], "!" if match["neg"] else "exists", frozenset()))
            else:
                raise bad_request(f"Unable to parse labelSelector term {term!r}")
        fields: list[tuple[str, str, str]] = []
        for term in _split_selector(field_selector):
            if match := _EQUALITY_TERM.fullmatch(term):
                fields.append((match["key"], "!=" if match["op"] == "!=" else "=", match["value"]))
            else:
                raise bad_request(f"Unable to parse fieldSelector term {term!r}")
        return cls(labels=tuple(labels), fields=tuple(fields))

    def matches(self, body: Mapping[str, Any]) -> bool:
        labels: Mapping[str, str] = body.get("metadata", {}).get("labels") or {}
        for key, op, values in self.labels:
            present = key in labels
            if op == "exists" and not present:
                return False
            if op == "!" and present:
                return False
            if op in ("=", "in") and labels.get(key) not in values:
                return False
            if op in ("!=", "notin") and present and labels[key] in values:
                return False
        for path, op, expected in self.fields:
            actual = _lookup(body, path)
            actual_text = "" if actual is None else str(actual)
            if (actual_text == expected) != (op == "="):
                return False
        return True
