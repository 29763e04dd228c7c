"""The API server's validation of built-in kinds the operator writes, where it matters.

Only NetworkPolicy (networking.k8s.io/v1) for now: the operator renders them itself, so the
emulator refuses what kube-apiserver refuses, with its messages (checked against the suite's
kube-apiserver: `NetworkPolicy.extensions "p" is invalid: <field>: <what>`, several joined in
brackets). Covered: the name, `policyTypes`, label selectors (pod, namespace), ports (protocol,
number or name) and peers (none, ipBlock with another peer, the CIDR and its `except`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any

import kmock

from kubeharness.emulator.errors import invalid
from kubeharness.emulator.names import (
    LABEL_VALUE,
    LABEL_VALUE_MESSAGE,
    NAME_PART,
    NAME_PART_MESSAGE,
    SUBDOMAIN,
    SUBDOMAIN_MESSAGE,
    label_value_errors,
    metadata_errors,
)
from kubeharness.resources import Body, resource_name

_PORT_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")

PROTOCOLS = ("TCP", "UDP", "SCTP")
POLICY_TYPES = ("Ingress", "Egress")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def check_builtin(resource: kmock.resource, body: Body) -> None:
    """Refuse `body` (a create's, or an update's result) as kube-apiserver would, with 422."""
    check = CHECKS.get(resource_name(resource))
    if check is None:
        return
    errors = check(body)
    if errors:
        kind = body.get("kind", "")
        name = (body.get("metadata") or {}).get("name", "")
        what = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        raise invalid(f'{kind}.extensions "{name}" is invalid: {what}')


def network_policy_errors(body: Body) -> list[str]:
    errors: list[str] = []
    name = str((body.get("metadata") or {}).get("name", ""))
    if not SUBDOMAIN.fullmatch(name) or len(name) > 253:
        errors.append(f'metadata.name: Invalid value: "{name}": {SUBDOMAIN_MESSAGE}')
    spec = body.get("spec") or {}
    errors += _selector_errors(spec.get("podSelector"), "spec.podSelector")
    for rule_kind, peers_key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(rule_kind) or []):
            where = f"spec.{rule_kind}[{i}]"
            for j, port in enumerate(rule.get("ports") or []):
                errors += _port_errors(port, f"{where}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers_key) or []):
                errors += _peer_errors(peer, f"{where}.{peers_key}[{j}]")
    types = spec.get("policyTypes") or []
    for i, kind in enumerate(types):
        if kind not in POLICY_TYPES:
            supported = ", ".join(f'"{t}"' for t in POLICY_TYPES)
            errors.append(
                f'spec.policyTypes[{i}]: Unsupported value: "{kind}": supported values: {supported}'
            )
    if len(types) > len(POLICY_TYPES):
        errors.append(f"spec.policyTypes: Invalid value: {types}: may not specify more than two")
    return errors


def pod_errors(body: Body) -> list[str]:
    """What kube-apiserver refuses in a Pod of the operator's making, of what a RolloutJob lets
    through to it: the name, labels, nodeSelector and tolerations (keys and values)."""
    errors = metadata_errors(body.get("metadata") or {})
    spec = body.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        errors += _label_key_errors(str(key), "spec.nodeSelector")
        errors += label_value_errors(value, "spec.nodeSelector")
    for i, toleration in enumerate(spec.get("tolerations") or []):
        where = f"spec.tolerations[{i}]"
        key = toleration.get("key") or ""
        if key:
            errors += _label_key_errors(str(key), f"{where}.key")
        operator = toleration.get("operator") or "Equal"
        value = toleration.get("value") or ""
        if operator == "Exists" and value:
            shown = (
                f'core.Toleration{{Key:"{key}", Operator:"{operator}", Value:"{value}", '
                f'Effect:"{toleration.get("effect") or ""}", TolerationSeconds:(*int64)(nil)}}'
            )
            errors.append(
                f"{where}.operator: Invalid value: {shown}: value must be empty when "
                "`operator` is 'Exists'"
            )
        elif operator == "Equal" and value:
            errors += label_value_errors(value, f"{where}.operator")  # sic: kube-apiserver's path
    return errors


def _selector_errors(selector: Any, where: str) -> list[str]:
    if not selector:
        return []
    errors: list[str] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        errors += _label_key_errors(key, f"{where}.matchLabels")
        if not LABEL_VALUE.fullmatch(str(value)) or len(str(value)) > 63:
            errors.append(f'{where}.matchLabels: Invalid value: "{value}": {LABEL_VALUE_MESSAGE}')
    for i, expression in enumerate(selector.get("matchExpressions") or []):
        at = f"{where}.matchExpressions[{i}]"
        operator, values = expression.get("operator"), expression.get("values")
        if operator in ("In", "NotIn") and not values:
            errors.append(
                f"{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            )
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(
                f"{at}.values: Forbidden: may not be specified when `operator` is "
                "'Exists' or 'DoesNotExist'"
            )
        elif operator not in OPERATORS:
            errors.append(
                f'{at}.operator: Invalid value: "{operator}": not a valid selector operator'
            )
        errors += _label_key_errors(str(expression.get("key", "")), f"{at}.key")
    return errors


def _label_key_errors(key: str, where: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    if (prefix and not SUBDOMAIN.fullmatch(prefix)) or not NAME_PART.fullmatch(name):
        return [f'{where}: Invalid value: "{key}": {NAME_PART_MESSAGE}']
    return []


def _port_errors(port: Mapping[str, Any], where: str) -> list[str]:
    errors: list[str] = []
    protocol = port.get("protocol", "TCP")
    if protocol not in PROTOCOLS:
        supported = ", ".join(f'"{p}"' for p in PROTOCOLS)
        errors.append(
            f'{where}.protocol: Unsupported value: "{protocol}": supported values: {supported}'
        )
    number = port.get("port")
    if isinstance(number, int) and not 1 <= number <= 65535:
        errors.append(
            f"{where}.port: Invalid value: {number}: must be between 1 and 65535, inclusive"
        )
    elif isinstance(number, str) and not _PORT_NAME.fullmatch(number):
        errors.append(
            f'{where}.port: Invalid value: "{number}": must contain only '
            "alpha-numeric characters (a-z, 0-9), and hyphens (-)"
        )
    return errors


def _peer_errors(peer: Mapping[str, Any], where: str) -> list[str]:
    selectors = [key for key in ("podSelector", "namespaceSelector") if key in peer]
    block = peer.get("ipBlock")
    if block is None and not selectors:
        return [f"{where}: Required value: must specify a peer"]
    if block is not None and selectors:
        return [f"{where}: Forbidden: may not specify both ipBlock and another peer"]
    errors: list[str] = []
    for key in selectors:
        errors += _selector_errors(peer[key], f"{where}.{key}")
    if block is not None:
        errors += _ip_block_errors(block, f"{where}.ipBlock")
    return errors


def _ip_block_errors(block: Mapping[str, Any], where: str) -> list[str]:
    cidr = block.get("cidr")
    if not cidr:
        return [f"{where}.cidr: Required value"]
    network = _cidr(str(cidr))
    if network is None:
        return [f'{where}.cidr: Invalid value: "{cidr}": not a valid CIDR']
    errors = []
    for i, excepted in enumerate(block.get("except") or []):
        inner = _cidr(str(excepted))
        if inner is None:
            errors.append(f'{where}.except[{i}]: Invalid value: "{excepted}": not a valid CIDR')
        elif (
            inner.version != network.version
            or not inner.subnet_of(network)  # type: ignore[arg-type]
            or inner.prefixlen <= network.prefixlen
        ):
            errors.append(
                f'{where}.except[{i}]: Invalid value: "{excepted}": must be a strict subset of '
                "`cidr`"
            )
    return errors


def _cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """A CIDR as kube-apiserver takes it: a prefix length is required, host bits may be set."""
    if "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


CHECKS: dict[str, Callable[[Body], list[str]]] = {
    "networking.k8s.io/v1/networkpolicies": network_policy_errors,
}
