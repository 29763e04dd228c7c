"""Which provider runs a trial's sandbox: one per environment type and address, made on first use.

Remote Docker (`docker` with `dockerHost`) is one provider per engine address; Modal, Daytona and
E2B one each, signed in with the bridge's own variables (the chart fills them from a Secret).
A provider that cannot be made (its SDK or credentials missing, its service refusing) fails the
trial that needed it with the reason, and is tried again for the next trial.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from rollout.api.environment import EnvironmentType
from rollout.api.errors import ErrorType
from rollout.api.resources import RolloutTrialSpec
from rollout.bridge.providers.base import Provider, ProviderError
from rollout.bridge.providers.daytona import DaytonaProvider
from rollout.bridge.providers.docker import DockerProvider
from rollout.bridge.providers.e2b import E2BProvider
from rollout.bridge.providers.modal import ModalProvider

CLOUD: Mapping[EnvironmentType, Callable[[Mapping[str, str]], Awaitable[Provider]]] = {
    EnvironmentType.MODAL: ModalProvider.connect,
    EnvironmentType.DAYTONA: DaytonaProvider.connect,
    EnvironmentType.E2B: E2BProvider.connect,
}
"""How each cloud provider signs in from the bridge's variables (its SDK imported then)."""


def provider_key(spec: RolloutTrialSpec) -> str:
    """The provider a trial needs, as a key: `docker tcp://host:2376`, `modal`, ..."""
    if spec.environment_type is EnvironmentType.DOCKER:
        return f"docker {spec.docker_host or ''}".strip()
    return spec.environment_type.value


class Providers:
    """The bridge's providers, each connected once (`environ`: the bridge's own variables, for
    what a provider reads there: docker-py's DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, a cloud
    provider's credentials)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)
        self._providers: dict[str, Provider] = {}
        self._lock = asyncio.Lock()

    async def for_trial(
        self,
        spec: RolloutTrialSpec,
        *,
        credentials: Mapping[str, str] | None = None,
        account: str = "",
    ) -> Provider:
        """The trial's provider; ProviderError when the bridge has none for it. `credentials`
        (the job's provider Secret's keys, named `account`) go over the bridge's variables: one
        provider per account."""
        kind = spec.environment_type
        if kind is EnvironmentType.DOCKER:
            if spec.docker_host is None:
                raise ProviderError(
                    "environment type 'docker' without dockerHost runs as a Pod, not on the "
                    "bridge: the operator should have run this trial",
                    ErrorType.INTERNAL_ERROR,
                )
            return await self.for_docker_host(spec.docker_host)
        connect = CLOUD.get(kind)
        if connect is None:
            raise ProviderError(
                f"the bridge has no {kind.value} provider: a trial of this type is not the "
                "bridge's",
                ErrorType.INTERNAL_ERROR,
            )
        environ = {**self.environ, **(credentials or {})}
        return await self._connected(f"{kind.value} {account}".strip(), lambda: connect(environ))

    async def for_docker_host(self, address: str) -> Provider:
        """The provider of the remote engine at `address`; ProviderError when none answers."""
        return await self._connected(
            f"docker {address}", lambda: DockerProvider.connect(address, self.environ)
        )

    async def _connected(self, key: str, connect: Callable[[], Awaitable[Provider]]) -> Provider:
        async with self._lock:  # one sign-in per provider, by the first trial that needs it
            provider = self._providers.get(key)
            if provider is None:
                provider = self._providers[key] = await connect()
            return provider

    def connected(self) -> list[Provider]:
        return list(self._providers.values())

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()
        self._providers.clear()
