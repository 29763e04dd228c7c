"""Which provider runs a trial's sandbox: one per environment type and address, made on first use.

Remote Docker (`docker` with `dockerHost`) is one provider per engine address. The other types
have no provider in this version: their trials fail with a message that says so (the operator
refuses such jobs before it makes trials; a RolloutTrial made by hand still gets an answer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from rollout.api.environment import EnvironmentType
from rollout.api.errors import ErrorType
from rollout.api.resources import RolloutTrialSpec
from rollout.bridge.providers.base import Provider, ProviderError
from rollout.bridge.providers.docker import DockerProvider


def provider_key(spec: RolloutTrialSpec) -> str:
    """The provider a trial needs, as a key: `docker tcp://host:2376`, `modal`, ..."""
    if spec.environment_type is EnvironmentType.DOCKER:
        return f"docker {spec.docker_host or ''}".strip()
    return spec.environment_type.value


class Providers:
    """The bridge's providers, each connected once (`environ`: the bridge's own variables, for
    what a provider reads there, such as docker-py's DOCKER_TLS_VERIFY and DOCKER_CERT_PATH)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)
        self._providers: dict[str, Provider] = {}
        self._lock = asyncio.Lock()

    async def for_trial(self, spec: RolloutTrialSpec) -> Provider:
        """The trial's provider; ProviderError when the bridge has none for it."""
        key = provider_key(spec)
        async with self._lock:
            provider = self._providers.get(key)
            if provider is None:
                provider = self._providers[key] = await self._connect(spec)
            return provider

    async def _connect(self, spec: RolloutTrialSpec) -> Provider:
        if spec.environment_type is EnvironmentType.DOCKER:
            if spec.docker_host is None:
                raise ProviderError(
                    "environment type 'docker' without dockerHost runs as a Pod, not on the "
                    "bridge: the operator should have run this trial",
                    ErrorType.INTERNAL_ERROR,
                )
            return await DockerProvider.connect(spec.docker_host, self.environ)
        raise ProviderError(
            f"this bridge has no {spec.environment_type.value} provider (it runs 'docker' with "
            "a dockerHost)",
            ErrorType.INTERNAL_ERROR,
        )

    def connected(self) -> list[Provider]:
        return list(self._providers.values())

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
        self._providers.clear()
