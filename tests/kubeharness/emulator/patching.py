"""What becomes of a body: JSON merge patches, and pruning by a structural schema."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kubeharness.resources import Body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def prune(value: Any, schema: Mapping[str, Any]) -> Any:
    """Drop what a structural schema does not declare, as the API server does for custom resources.

    Best effort over the structural-schema rules: `properties`, `additionalProperties`, `items`,
    `x-kubernetes-preserve-unknown-fields` and `x-kubernetes-embedded-resource`. No validation.
    """
    if isinstance(value, list):
        items = schema.get("items")
        return [prune(item, items) for item in value] if isinstance(items, Mapping) else value
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    result: Body = {}
    for key, item in value.items():
        if isinstance(properties, Mapping) and key in properties:
            result[key] = prune(item, properties[key])
        elif isinstance(additional, Mapping):
            result[key] = prune(item, additional)
        elif (
            preserve
            or additional is True
            or (embedded and key in ("apiVersion", "kind", "metadata"))
        ):
            result[key] = item
    return result
