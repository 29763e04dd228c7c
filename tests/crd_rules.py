"""What an apiserver demands of a CRD's openAPIV3Schema, checked by code.

`structural_violations` walks a schema and reports every breach of the structural-schema rules of
apiextensions.k8s.io/v1 (see the Kubernetes docs, "Specifying a structural schema"), plus this
project's own: every field described, no titles, no open objects unless allowed.

`to_json_schema` turns the Kubernetes dialect (nullable, x-kubernetes-*, boolean
exclusiveMinimum) into a Draft 4 JSON schema that `jsonschema` can validate sample objects with.
With `forbid_unknown=True` objects refuse keys they do not declare: the apiserver would silently
prune such keys, so a sample that has them disagrees with the schema.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema

TYPES = {"object", "array", "string", "integer", "number", "boolean"}
ALLOWED_KEYS = {
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "uniqueItems",
    "required",
    "items",
    "properties",
    "additionalProperties",
    "anyOf",
    "example",
    "externalDocs",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-embedded-resource",
}
INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]
# Regex features Go's RE2 (the apiserver's engine) lacks.
NOT_RE2 = re.compile(r"\(\?[=!<]|\\[1-9]")


def structural_violations(
    root: dict[str, Any], *, open_paths: frozenset[str] = frozenset()
) -> list[str]:
    """Every rule the schema breaks, as `<path>: <rule>`; empty when the apiserver would take it.

    `open_paths` are the JSON paths allowed `x-kubernetes-preserve-unknown-fields`.
    """
    found: list[str] = []
    if root.get("type") != "object":
        found.append("<root>: type must be object")
    props = root.get("properties", {})
    if props.get("metadata") not in (None, {"type": "object"}):
        found.append("<root>.metadata: may only say type: object")
    for key in ("apiVersion", "kind"):
        if key in props and props[key].get("type") != "string":
            found.append(f"<root>.{key}: must be a string")
    _walk(root, "<root>", found, open_paths)
    return found


def _walk(
    node: Any, path: str, found: list[str], open_paths: frozenset[str], *, field: bool = False
) -> None:
    if not isinstance(node, dict):
        found.append(f"{path}: a schema must be an object")
        return
    for key in node:
        if key not in ALLOWED_KEYS:
            found.append(f"{path}: {key!r} is not allowed")
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if preserve and path not in open_paths:
        found.append(f"{path}: x-kubernetes-preserve-unknown-fields where it was not expected")
    type_ = node.get("type")
    if type_ is None and not (int_or_string or preserve):
        found.append(f"{path}: no type")
    if type_ is not None and type_ not in TYPES:
        found.append(f"{path}: type {type_!r} is not one of {sorted(TYPES)}")
    if int_or_string and type_ is not None:
        found.append(f"{path}: x-kubernetes-int-or-string must not have a type")
    if "anyOf" in node and not (int_or_string and node["anyOf"] == INT_OR_STRING):
        found.append(f"{path}: anyOf is only allowed as int-or-string")
    if "nullable" in node and not isinstance(node["nullable"], bool):
        found.append(f"{path}: nullable must be a boolean")
    for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if key in node and (not isinstance(node[key], bool) or bound not in node):
            found.append(f"{path}: {key} must be a boolean beside {bound}")
    if node.get("uniqueItems") is True:
        found.append(f"{path}: uniqueItems true is forbidden")
    # Every field says what it is (items and map values are described by their field).
    if field and path != "<root>.metadata" and not node.get("description"):
        found.append(f"{path}: no description")
    if "pattern" in node:
        try:
            re.compile(node["pattern"])
        except re.error as err:
            found.append(f"{path}: pattern does not compile: {err}")
        if NOT_RE2.search(node["pattern"]):
            found.append(f"{path}: pattern uses lookaround or backreferences (not RE2)")
    if "enum" in node and type_ in TYPES:
        for value in node["enum"]:
            if not _has_type(value, type_):
                found.append(f"{path}: enum value {value!r} is not a {type_}")
    if "default" in node:
        try:
            jsonschema.Draft4Validator(to_json_schema(node)).validate(node["default"])
        except jsonschema.ValidationError as err:
            found.append(f"{path}: default {node['default']!r} is invalid: {err.message}")
        except Exception as err:  # a schema too broken to check a default against
            found.append(f"{path}: default cannot be checked: {err}")
    if "properties" in node and "additionalProperties" in node:
        found.append(f"{path}: properties and additionalProperties together")
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
        found.append(f"{path}: additionalProperties must be a schema")
    if ("properties" in node or "additionalProperties" in node) and type_ != "object":
        found.append(f"{path}: properties need type object")
    if type_ == "array" and not isinstance(node.get("items"), dict):
        found.append(f"{path}: an array needs one items schema")
    if "items" in node and type_ != "array":
        found.append(f"{path}: items need type array")
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            found.append(f"{path}: required {name!r} is not a property")
    _check_list_map(node, path, found)
    for name, sub in node.get("properties", {}).items():
        _walk(sub, f"{path}.{name}", found, open_paths, field=True)
    if isinstance(node.get("items"), dict):
        _walk(node["items"], f"{path}[]", found, open_paths)
    if isinstance(node.get("additionalProperties"), dict):
        _walk(node["additionalProperties"], f"{path}{{}}", found, open_paths)


def _check_list_map(node: dict[str, Any], path: str, found: list[str]) -> None:
    list_type = node.get("x-kubernetes-list-type")
    if list_type is None:
        if "x-kubernetes-list-map-keys" in node:
            found.append(f"{path}: list-map-keys without list-type map")
        return
    if list_type not in ("atomic", "set", "map"):
        found.append(f"{path}: unknown list-type {list_type!r}")
    if node.get("type") != "array":
        found.append(f"{path}: list-type on a non-array")
    if list_type != "map":
        return
    items = node.get("items", {})
    keys = node.get("x-kubernetes-list-map-keys") or []
    if items.get("type") != "object" or not keys:
        found.append(f"{path}: a list-map needs object items and list-map-keys")
    for key in keys:
        prop = items.get("properties", {}).get(key)
        if prop is None:
            found.append(f"{path}: list-map key {key!r} is not a property of the items")
        elif key not in items.get("required", []) and "default" not in prop:
            found.append(f"{path}: list-map key {key!r} must be required or defaulted")
        elif prop.get("type") not in ("string", "integer", "boolean", "number"):
            found.append(f"{path}: list-map key {key!r} must be a scalar")


def _has_type(value: Any, type_: str) -> bool:
    match type_:
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
    return False


def to_json_schema(node: dict[str, Any], *, forbid_unknown: bool = False) -> dict[str, Any]:
    """A Draft 4 JSON schema that accepts what the apiserver's validation accepts."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description", "default"):
            continue
        if key == "properties":
            out[key] = {
                name: to_json_schema(sub, forbid_unknown=forbid_unknown)
                for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = to_json_schema(value, forbid_unknown=forbid_unknown)
        else:
            out[key] = value
    if forbid_unknown and "properties" in node:
        out["additionalProperties"] = False
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def validate_object(schema: dict[str, Any], obj: Any, *, forbid_unknown: bool = True) -> None:
    """Raise jsonschema.ValidationError when `obj` does not fit the CRD schema."""
    validator = jsonschema.Draft4Validator(to_json_schema(schema, forbid_unknown=forbid_unknown))
    validator.validate(obj)
