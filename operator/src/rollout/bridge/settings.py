"""The bridge's settings as users give them: a flag and a ROLLOUT_* variable each.

The variables are the contract with the Helm chart (its `bridge:` values set them). Where a
setting means what the operator's does (the watched namespaces, the health port, the log level,
the storage the bridge writes with), it is the operator's own `Setting`, so one name means one
thing in both Deployments.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Mapping

from pydantic import Field, ValidationError, field_validator

from rollout.api.base import ApiModel
from rollout.api.environment import DOCKER_HOST_PATTERN, EnvironmentType
from rollout.api.job_settings import LogLevel
from rollout.api.storage import StorageLocation
from rollout.bridge.cost import parse_provider_prices
from rollout.controller.options import OPERATOR_SETTINGS, STORAGE_SETTINGS
from rollout.controller.prices import UnitPrices
from rollout.settings import Setting, comma_list, resolve
from rollout.storage import StorageCredentials
from rollout.storage.settings import BUCKET, read_credentials, read_location

DEFAULT_LIMIT = 16
"""Trials one bridge runs at once per provider, unless ROLLOUT_BRIDGE_LIMITS says otherwise."""


def _limits(text: str) -> dict[str, int]:
    """`docker=16,modal=50`: trials at once per provider."""
    limits: dict[str, int] = {}
    for part in comma_list(text):
        name, equals, number = part.partition("=")
        provider = EnvironmentType.parse(name)
        if not equals or provider not in BRIDGE_TYPES:
            types = ", ".join(t.value for t in BRIDGE_TYPES)
            raise ValueError(f"{part!r} is not PROVIDER=N (a provider: {types})")
        try:
            limits[provider] = int(number)
        except ValueError:
            raise ValueError(f"{part!r}: {number!r} is not a whole number") from None
    return limits


BRIDGE_TYPES = tuple(t for t in EnvironmentType if t.runs_on_bridge)
"""The environment types a bridge runs (those without a provider fail their trials, saying so)."""

IDENTITY = Setting(
    "identity",
    "ROLLOUT_BRIDGE_IDENTITY",
    "--identity",
    "who claims trials; the same after a restart, so the bridge takes back its trials "
    "(default: the host name)",
    metavar="NAME",
)


def _docker_hosts(text: str) -> list[str]:
    hosts = comma_list(text)
    for host in hosts:
        if not re.match(DOCKER_HOST_PATTERN, host):
            raise ValueError(f"{host!r} is not tcp://HOST:PORT or ssh://USER@HOST[:PORT]")
    return hosts


DOCKER_HOSTS = Setting(
    "docker_hosts",
    "ROLLOUT_BRIDGE_DOCKER_HOSTS",
    "--docker-host",
    "remote Docker engines to clear of this bridge's leftover containers at start (those of "
    "trials deleted while it was down), beside the engines of the trials it sees",
    _docker_hosts,
    "ADDRESS",
    repeatable=True,
)


def _prices(text: str) -> dict[str, UnitPrices]:
    return parse_provider_prices(text, [t.value for t in BRIDGE_TYPES])


UNIT_PRICES = Setting(
    "unit_prices",
    "ROLLOUT_BRIDGE_UNIT_PRICES",
    "--unit-prices",
    'unit prices per provider, JSON: {"modal": {"cpu": 0.047, "memory": 0.008}} (per core-hour, '
    "GiB-hour, device-hour as the operator's ROLLOUT_UNIT_PRICES); none: trials' cost null",
    _prices,
    "JSON",
)
LIMITS = Setting(
    "limits",
    "ROLLOUT_BRIDGE_LIMITS",
    "--limit",
    f"trials run at once per provider, e.g. docker=16 (default: {DEFAULT_LIMIT} each)",
    _limits,
    "PROVIDER=N",
)


def _operator_setting(variable: str) -> Setting:
    return next(s for s in OPERATOR_SETTINGS if s.variable == variable)


SETTINGS: tuple[Setting, ...] = (
    IDENTITY,
    _operator_setting("ROLLOUT_NAMESPACES"),
    LIMITS,
    DOCKER_HOSTS,
    UNIT_PRICES,
    _operator_setting("ROLLOUT_METRICS_PORT"),
    _operator_setting("ROLLOUT_HEALTH_PORT"),
    _operator_setting("ROLLOUT_LOG_LEVEL"),
    *(
        s.but(help=s.help.replace("default bucket", "bucket").replace("operator", "bridge"))
        for s in STORAGE_SETTINGS
    ),
)
"""Every setting of the bridge, in the order of `rollout-bridge --help`."""


class BridgeSettings(ApiModel):
    """What one bridge process runs, and how."""

    identity: str = Field(
        min_length=1, max_length=63, description="Who claims trials (stable across restarts)."
    )
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch; empty: the whole cluster."
    )
    limits: dict[str, int] = Field(
        default_factory=dict, description="Trials at once per provider; absent: DEFAULT_LIMIT."
    )
    docker_hosts: list[str] = Field(
        default_factory=list, description="Engines swept for leftovers from the start."
    )
    unit_prices: dict[str, UnitPrices] = Field(
        default_factory=dict, description="Unit prices by provider; absent: cost unknown."
    )
    metrics_port: int = Field(9090, ge=1, le=65535, description="Prometheus /metrics port.")
    health_port: int = Field(8080, ge=1, le=65535, description="/healthz port.")
    log_level: LogLevel = Field(LogLevel.INFO, description="Log level.")
    storage: StorageLocation | None = Field(
        None,
        description="How the bridge reaches the default bucket (the operator's); a job's own "
        "bucket is reached as its spec.storage says, with the bridge's credentials.",
    )
    storage_credentials: StorageCredentials | None = Field(
        None, description="The bridge's storage credentials; None: boto3's default chain."
    )

    @field_validator("limits")
    @classmethod
    def _positive(cls, limits: dict[str, int]) -> dict[str, int]:
        for provider, limit in limits.items():
            if limit < 1:
                raise ValueError(f"{provider}={limit}: a limit is 1 or more")
        return limits

    def limit(self, provider: str) -> int:
        return self.limits.get(provider, DEFAULT_LIMIT)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for setting in SETTINGS:
        setting.add_flag(parser, show_variable=True)


def from_args(args: argparse.Namespace | None, environ: Mapping[str, str]) -> BridgeSettings:
    """The settings from flags over the variables of `environ`; InvalidInput naming each bad
    value where it was written."""
    resolved = resolve(SETTINGS, environ, args)
    values = {
        name: value
        for name, value in resolved.values.items()
        if name in BridgeSettings.model_fields and name not in ("storage", "storage_credentials")
    }
    values.setdefault("identity", socket.gethostname())
    if BUCKET.name in resolved.values:
        values["storage"] = read_location(resolved, StorageLocation)
        values["storage_credentials"] = read_credentials(resolved, environ)
    settings: BridgeSettings | None = None
    try:
        settings = BridgeSettings(**values)
    except ValidationError as err:
        resolved.report_invalid(err)
    resolved.raise_problems()
    assert settings is not None
    return settings


def from_env(environ: Mapping[str, str] | None = None) -> BridgeSettings:
    return from_args(None, os.environ if environ is None else environ)
