"""pydantic's JSON schema made into what an apiserver accepts: a structural schema.

pydantic's JSON schema is not what an apiserver accepts. `structural_schema` rewrites it into a
structural OpenAPI v3 schema (apiextensions.k8s.io/v1):

- `$ref`s are inlined (the apiserver has no definitions); a field's own description wins over
  its model's docstring;
- `title`s go; `anyOf: [X, {type: null}]` becomes X with `nullable: true`;
- `anyOf: [{type: integer}, {type: string}]` is kept, marked `x-kubernetes-int-or-string`: the
  one union a structural schema allows;
- `const` becomes a one-value `enum`; JSON Schema's numeric `exclusiveMinimum: 0` becomes
  OpenAPI's `minimum: 0` with `exclusiveMinimum: true`;
- `additionalProperties: false` (the models forbid unknown keys) goes: the apiserver prunes
  unknown fields instead, and `additionalProperties` may not sit beside `properties`;
- only scalar defaults of the spec are kept (the apiserver applies them, and they equal the
  models' defaults); status carries no defaults;
- anything else the rewrite does not know is an error, so that a model change cannot slip a
  schema past this module that the apiserver would refuse.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# Keys copied as they are (after their values are rewritten where they hold schemas).
_KEPT = {
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
    "required",
    "items",
    "properties",
    "additionalProperties",
    "anyOf",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}
_DROPPED = {"title", "examples", "readOnly", "writeOnly", "deprecated"}
_FORMATS = {"date-time", "date", "int32", "int64", "float", "double", "byte"}
# Key order in the output, for readable diffs.
_ORDER = [
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "x-kubernetes-int-or-string",
    "anyOf",
    "pattern",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "items",
    "properties",
    "additionalProperties",
    "required",
]


class SchemaError(ValueError):
    """The model's schema cannot be made structural; the message names the JSON path."""


def structural_schema(model: type[BaseModel], *, keep_defaults: bool = True) -> dict[str, Any]:
    """The model's JSON schema rewritten into a structural OpenAPI v3 schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions = raw.pop("$defs", {})
    return _Rewriter(definitions, keep_defaults).rewrite(raw, model.__name__, ())


class _Rewriter:
    def __init__(self, definitions: dict[str, Any], keep_defaults: bool) -> None:
        self.definitions = definitions
        self.keep_defaults = keep_defaults

    def rewrite(self, node: dict[str, Any], path: str, stack: tuple[str, ...]) -> dict[str, Any]:
        node, stack = self._inline(node, path, stack)
        if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
            # The remaining variant may itself be a reference: rewrite the result again.
            return self.rewrite(self._union(node, path), path, stack)
        out: dict[str, Any] = {}
        for key, value in node.items():
            where = f"{path}.{key}"
            if key in _DROPPED:
                continue
            if key == "const":
                out["enum"] = [value]
                if "type" not in node:
                    out["type"] = _json_type(value, where)
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                out[bound] = value
                out[key] = True
            elif key == "properties":
                out[key] = {
                    name: self.rewrite(sub, f"{path}.{name}", stack) for name, sub in value.items()
                }
            elif key == "items":
                if not isinstance(value, dict):
                    raise SchemaError(f"{where}: items must be one schema")
                out[key] = self.rewrite(value, f"{path}[]", stack)
            elif key == "additionalProperties":
                if isinstance(value, dict):
                    out[key] = self.rewrite(value, f"{path}{{}}", stack)
                elif value is True and "properties" not in node:
                    out["x-kubernetes-preserve-unknown-fields"] = True
                # False: the apiserver prunes unknown fields rather than refusing them.
            elif key == "default":
                if self.keep_defaults and isinstance(value, str | int | float | bool):
                    out[key] = value
            elif key == "format":
                if value in _FORMATS:
                    out[key] = value
            elif key in _KEPT:
                out[key] = value
            else:
                raise SchemaError(f"{where}: {key!r} has no place in a structural schema")
        if "properties" in out and "additionalProperties" in out:
            raise SchemaError(f"{path}: both properties and additionalProperties")
        if "type" not in out and not out.get("x-kubernetes-int-or-string"):
            raise SchemaError(f"{path}: no type")
        return ordered(out)

    def _inline(
        self, node: dict[str, Any], path: str, stack: tuple[str, ...]
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`node` with a `$ref` (or a one-element `allOf`) replaced by what it points to; the
        node's own keys (its field description, default) win over the definition's. Returns the
        definitions entered too, to catch a model that contains itself."""
        while True:
            if "$ref" in node:
                name = node["$ref"].removeprefix("#/$defs/")
                if name in stack:
                    raise SchemaError(f"{path}: {name} refers to itself; a CRD cannot")
                if name not in self.definitions:
                    raise SchemaError(f"{path}: unknown reference {node['$ref']}")
                stack = (*stack, name)
                rest = {k: v for k, v in node.items() if k != "$ref"}
                node = {**self.definitions[name], **rest}
            elif "allOf" in node and len(node["allOf"]) == 1:
                rest = {k: v for k, v in node.items() if k != "allOf"}
                node = {**node["allOf"][0], **rest}
            elif "allOf" in node:
                raise SchemaError(f"{path}: allOf of several schemas is not supported")
            else:
                return node, stack

    def _union(self, node: dict[str, Any], path: str) -> dict[str, Any]:
        """Rewrite `anyOf` into nullable and/or int-or-string; refuse any other union."""
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        variants = [v for v in node["anyOf"] if v != {"type": "null"}]
        if len(variants) < len(node["anyOf"]):
            rest["nullable"] = True
        if len(variants) == 1:
            # The node's own keys (description, default, nullable) win over the variant's.
            return {**variants[0], **rest}
        if sorted(v.get("type", "") for v in variants) == ["integer", "string"] and all(
            set(v) == {"type"} for v in variants
        ):
            rest["x-kubernetes-int-or-string"] = True
            rest["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            return rest
        raise SchemaError(f"{path}: a union of {variants} is not a structural schema")


def _json_type(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise SchemaError(f"{where}: constant {value!r} of unsupported type")


def ordered(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with its keys in the order the CRD files use, for readable diffs."""
    rank = {key: index for index, key in enumerate(_ORDER)}
    return {key: node[key] for key in sorted(node, key=lambda k: (rank.get(k, len(rank)), k))}
