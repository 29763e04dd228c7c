"""Names as kube-apiserver checks them (apimachinery's validation): DNS subdomains, qualified
names (label and annotation keys), label values; its messages, word for word."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',"
    "  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def metadata_errors(meta: Mapping[str, Any]) -> list[str]:
    """What kube-apiserver refuses in an object's metadata: its name, labels and annotations."""
    errors: list[str] = []
    name = meta.get("name")
    if isinstance(name, str):
        errors += subdomain_errors(name, "metadata.name")
    for key, value in (meta.get("labels") or {}).items():
        errors += qualified_name_errors(str(key), "metadata.labels")
        errors += label_value_errors(value, "metadata.labels")
    for key in meta.get("annotations") or {}:
        errors += qualified_name_errors(str(key).lower(), "metadata.annotations")
    return errors


def subdomain_errors(name: str, where: str) -> list[str]:
    errors = []
    if len(name) > 253:
        errors.append(f'{where}: Invalid value: "{name}": must be no more than 253 characters')
    if not SUBDOMAIN.fullmatch(name):
        errors.append(f'{where}: Invalid value: "{name}": {SUBDOMAIN_MESSAGE}')
    return errors


def qualified_name_errors(key: str, where: str) -> list[str]:
    """A label or annotation key: an optional DNS subdomain prefix and a name part of at most
    63 characters."""
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash and (not prefix or len(prefix) > 253 or not SUBDOMAIN.fullmatch(prefix)):
        errors.append(f'{where}: Invalid value: "{key}": prefix part {SUBDOMAIN_MESSAGE}')
    if not name:
        errors.append(f'{where}: Invalid value: "{key}": name part must be non-empty')
    elif len(name) > 63:
        errors.append(
            f'{where}: Invalid value: "{key}": name part must be no more than 63 characters'
        )
    elif not NAME_PART.fullmatch(name):
        errors.append(f'{where}: Invalid value: "{key}": {NAME_PART_MESSAGE}')
    return errors


def label_value_errors(value: Any, where: str) -> list[str]:
    text = str(value)
    errors = []
    if len(text) > 63:
        errors.append(f'{where}: Invalid value: "{text}": must be no more than 63 characters')
    if not LABEL_VALUE.fullmatch(text):
        errors.append(f'{where}: Invalid value: "{text}": {LABEL_VALUE_MESSAGE}')
    return errors
