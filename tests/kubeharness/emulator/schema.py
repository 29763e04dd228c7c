"""A custom resource's body as kube-apiserver takes it: numbers decoded, nulls and unknown fields
pruned, defaults applied, then validated against the CRD's structural schema, with
kube-apiserver's messages (its metadata is checked by `names`).

Checked against the suite's kube-apiserver (1.24) with malformed RolloutJobs
(tests/integration/test_faults_malformed.py runs the same cases on both backends):

- numbers: a JSON integer that fits int64 is an integer, and so is a whole float up to 2^53 (Go's
  JSON decoding and go-openapi's `IsFloat64AJSONInteger`: `nConcurrentTrials: 2.0` is taken and
  stored as 2); anything else is a "number" (`2**63` is refused where an integer is wanted);
- a null under a property that is not `nullable` is dropped, or replaced by the property's
  default (`nAttempts: null` becomes 1); null items of a list are kept (and refused);
- defaults are applied to absent properties of the objects that are there (not to objects that
  are absent: no `environment`, no `environment.type`);
- validation reports every error, the path without list indices as 1.24 writes it
  (`spec.agents.name`), each in kube-apiserver's words: `Required value`, `Invalid value: "string":
  <path> in body must be of type integer: "string"`, `Unsupported value: "x": supported values:
  ...`, `should be greater than or equal to 1`, `should have at least 1 items`, `should be at
  least 1 chars long`, `should match '<pattern>'`, int-or-string's three errors;

Not checked, as kube-apiserver 1.24 does not check them either: duplicate keys of a list-map
(`x-kubernetes-list-type: map`; two status conditions of one type are taken). What is not
emulated: CEL rules (`x-kubernetes-validations`, none in our CRDs), `multipleOf`,
`uniqueItems` (forbidden in structural schemas), formats other than `date-time`, and the order in
which a real server lists several errors of one object (tests compare single errors).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
INT64 = 2**63
MAX_JSON_INTEGER = 2**53 - 1
"""go-openapi's largest float that still counts as an integer."""


# ---- numbers ---------------------------------------------------------------------------------


def decoded_numbers(value: Any) -> Any:
    """`value` with its numbers as Go's JSON decoding and go-openapi see them: integers that fit
    int64 stay integers, whole floats up to 2^53 become integers, the rest are floats."""
    if isinstance(value, dict):
        return {key: decoded_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decoded_numbers(item) for item in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -INT64 <= value < INT64:
        return float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_JSON_INTEGER:
        return int(value)
    return value


# ---- nulls and defaults -------------------------------------------------------------------------


def defaulted(value: Any, schema: Mapping[str, Any]) -> Any:
    """`value` (already pruned of unknown fields) with the nulls of non-nullable properties
    dropped or defaulted, and the defaults of absent properties filled in."""
    if isinstance(value, list):
        items = schema.get("items")
        return [defaulted(item, items) for item in value] if isinstance(items, Mapping) else value
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    result: dict[str, Any] = {}
    for key, item in value.items():
        sub = (
            properties.get(key)
            if isinstance(properties, Mapping)
            else additional
            if isinstance(additional, Mapping)
            else None
        )
        if item is None and isinstance(sub, Mapping) and not sub.get("nullable"):
            if "default" in sub:
                result[key] = copy.deepcopy(sub["default"])
            continue  # a null where none is allowed: dropped, as if it were not there
        result[key] = defaulted(item, sub) if isinstance(sub, Mapping) else item
    if isinstance(properties, Mapping):
        for key, sub in properties.items():
            if key not in result and isinstance(sub, Mapping) and "default" in sub:
                result[key] = copy.deepcopy(sub["default"])
    return result


# ---- validation ---------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    """What go-openapi calls a value's type in its messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _has_type(value: Any, wanted: str) -> bool:
    found = _type_name(value)
    return found == wanted or (wanted == "number" and found == "integer")


def _shown(value: Any) -> str:
    """A value in a field error, as Go prints it there (strings quoted, numbers bare)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _number(value)
    if value is None:
        return "null"
    return str(value)


def _number(value: float | int) -> str:
    """A bound or a number as Go's %v prints a float64: `1`, `0.5`, `1e+21`."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, float) and abs(value) >= 1e21:
        return f"{value:g}"
    return str(value)


def schema_errors(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    """Every way `value` breaks `schema`, as kube-apiserver 1.24 words them."""
    errors: list[str] = []
    if value is None:
        if not schema.get("nullable"):
            wanted = schema.get("type") or ("integer,string" if _int_or_string(schema) else None)
            if wanted:
                errors.append(_type_error(path, value, wanted))
        return errors
    if _int_or_string(schema) and _type_name(value) not in ("integer", "string"):
        # The int-or-string type, its anyOf, and the anyOf's first branch: three errors.
        return [
            _type_error(path, value, "integer,string"),
            f'<nil>: Invalid value: "": "{path}" must validate at least one schema (anyOf)',
            _type_error(path, value, "integer"),
        ]
    wanted = schema.get("type")
    if wanted and not _has_type(value, wanted):
        errors.append(_type_error(path, value, wanted))
        if "enum" in schema:
            errors += _enum_errors(value, schema, path)
        return errors
    if "enum" in schema:
        errors += _enum_errors(value, schema, path)
    if isinstance(value, str):
        errors += _string_errors(value, schema, path)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        errors += _number_errors(value, schema, path)
    elif isinstance(value, list):
        errors += _list_errors(value, schema, path)
    elif isinstance(value, dict):
        errors += _object_errors(value, schema, path)
    return errors


def _int_or_string(schema: Mapping[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string"))


def _type_error(path: str, value: Any, wanted: str) -> str:
    found = _type_name(value)
    return f'{path}: Invalid value: "{found}": {path} in body must be of type {wanted}: "{found}"'


def _enum_errors(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    allowed = schema["enum"]
    if any(_type_name(value) == _type_name(a) and value == a for a in allowed):
        return []
    supported = ", ".join(_shown(a) for a in allowed)
    return [f"{path}: Unsupported value: {_shown(value)}: supported values: {supported}"]


def _string_errors(value: str, schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    shown = _shown(value)
    length = len(value)
    if "minLength" in schema and length < schema["minLength"]:
        errors.append(
            f"{path}: Invalid value: {shown}: {path} in body should be at least "
            f"{schema['minLength']} chars long"
        )
    if "maxLength" in schema and length > schema["maxLength"]:
        errors.append(
            f"{path}: Invalid value: {shown}: {path} in body should be at most "
            f"{schema['maxLength']} chars long"
        )
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        errors.append(
            f"{path}: Invalid value: {shown}: {path} in body should match '{schema['pattern']}'"
        )
    if schema.get("format") == "date-time" and not _DATE_TIME.fullmatch(value):
        errors.append(
            f"{path}: Invalid value: {shown}: {path} in body must be of type date-time: {shown}"
        )
    return errors


def _number_errors(value: float | int, schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    shown = _shown(value)
    if "minimum" in schema:
        bound = schema["minimum"]
        if schema.get("exclusiveMinimum") and not value > bound:
            errors.append(
                f"{path}: Invalid value: {shown}: {path} in body should be greater than "
                f"{_number(bound)}"
            )
        elif not value >= bound:
            errors.append(
                f"{path}: Invalid value: {shown}: {path} in body should be greater than or "
                f"equal to {_number(bound)}"
            )
    if "maximum" in schema:
        bound = schema["maximum"]
        if schema.get("exclusiveMaximum") and not value < bound:
            errors.append(
                f"{path}: Invalid value: {shown}: {path} in body should be less than "
                f"{_number(bound)}"
            )
        elif not value <= bound:
            errors.append(
                f"{path}: Invalid value: {shown}: {path} in body should be less than or equal "
                f"to {_number(bound)}"
            )
    return errors


def _list_errors(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            f"{path}: Invalid value: {len(value)}: {path} in body should have at least "
            f"{schema['minItems']} items"
        )
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(
            f"{path}: Invalid value: {len(value)}: {path} in body should have at most "
            f"{schema['maxItems']} items"
        )
    items = schema.get("items")
    if isinstance(items, Mapping):
        for item in value:
            # 1.24 leaves list indices out of a path (`spec.agents.name`).
            errors += schema_errors(item, items, path)
    return errors


def _object_errors(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(f"{_join(path, name)}: Required value")
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if isinstance(properties, Mapping) and key in properties:
            errors += schema_errors(item, properties[key], _join(path, key))
        elif isinstance(additional, Mapping):
            errors += schema_errors(item, additional, _join(path, key))
    return errors


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def invalid_message(kind: str, group: str, name: str, errors: list[str]) -> str:
    """kube-apiserver's 422 message: `<Kind>.<group> "<name>" is invalid: <error>` (several in
    brackets)."""
    what = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    qualified = f"{kind}.{group}" if group else kind
    return f'{qualified} "{name}" is invalid: {what}'
