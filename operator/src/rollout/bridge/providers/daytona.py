"""The `daytona` provider: each trial's sandbox is a Daytona sandbox (https://daytona.io).

Written against the official Python SDK `daytona` 0.226.1 and its asyncio client
(`daytona.AsyncDaytona`); it is an optional extra (`pip install 'rollout-operator[daytona]'`),
imported by `DaytonaProvider.connect` alone: the provider and its sandboxes take the SDK module
and its client as arguments, so tests give them a fake of the same shape.

Daytona makes a sandbox from a registry image or from the task's Dockerfile
(`Image.from_dockerfile`, built by Daytona as a snapshot) with the trial's resources in whole
cores and GiB, its labels, and a lifetime of its own: a sandbox that no bridge ends (its bridge
died) is destroyed at its time to live, or, kept for preserveEnv, stops when idle that long.
Every `Environment` operation is a request to the sandbox's toolbox or its file API
(`daytona_sandbox.DaytonaSandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import re
import secrets
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from rollout.api.errors import ErrorType
from rollout.api.names import LABEL_COMPONENT
from rollout.api.quantity import parse_quantity
from rollout.api.resources import LABEL_TRIAL, RolloutTrialSpec
from rollout.api.trials import child_name, label_value
from rollout.bridge.providers.base import (
    BRIDGE_COMPONENT,
    LABEL_BRIDGE,
    LABEL_NAMESPACE,
    LABEL_PRESERVED,
    OwnedSandbox,
    Provider,
    ProviderError,
    SandboxRequest,
)
from rollout.bridge.providers.daytona_sandbox import DaytonaSandbox
from rollout.bridge.providers.scripts import RESPONSE_TIMEOUT_SEC

log = logging.getLogger(__name__)

SDK_MODULE = "daytona"
PIP_INSTALL = "pip install 'rollout-operator[daytona]'"
API_KEY = "DAYTONA_API_KEY"
API_URL = "DAYTONA_API_URL"
TARGET = "DAYTONA_TARGET"
DEFAULT_API_URL = "https://app.daytona.io/api"
"""The SDK's own default, named here so that the SDK never reads the address elsewhere."""

START_TIMEOUT_SEC = 300.0
"""How long a sandbox of a registry image may take to start (Daytona pulls it first)."""
LIFETIME_MARGIN_SEC = 900.0
"""Beyond the sum of a trial's phase timeouts: uploads, collection, kills, a slow start."""
GIB = Decimal(2**30)

_QUOTA = re.compile(
    r"quota|exceed|insufficient|not enough|no (available )?runners?|capacity|out of (cpu|memory"
    r"|gpu|disk)",
    re.IGNORECASE,
)
"""What Daytona says when an organization's limits or its runners cannot hold a sandbox."""
_PULL = re.compile(
    r"pull|manifest|no such image|not found|does not exist|unauthorized|denied|invalid image"
    r"|failed to resolve|repository",
    re.IGNORECASE,
)
"""What a failed pull of a registry image says."""
_BUILD_FAILED = re.compile(r"build[_ ]failed|entered error state", re.IGNORECASE)
"""How the SDK reports a sandbox whose snapshot (image) could not be made."""


class DaytonaProvider(Provider):
    """Trials' sandboxes in one Daytona organization (the API key's)."""

    name = "daytona"

    def __init__(
        self,
        client: Any,
        sdk: Any,
        *,
        api_url: str = DEFAULT_API_URL,
        start_timeout_sec: float = START_TIMEOUT_SEC,
        response_timeout_sec: float = RESPONSE_TIMEOUT_SEC,
        sandbox_options: Mapping[str, Any] | None = None,
    ) -> None:
        """`client`: an `AsyncDaytona`; `sdk`: the `daytona` module (its parameter, image and
        error classes); `sandbox_options`: keyword arguments of every `DaytonaSandbox`."""
        self.client = client
        self.sdk = sdk
        self.api_url = api_url
        self.start_timeout_sec = start_timeout_sec
        self.response_timeout_sec = response_timeout_sec
        self.sandbox_options = dict(sandbox_options or {})

    @classmethod
    async def connect(cls, environ: Mapping[str, str]) -> DaytonaProvider:
        """A provider with the SDK's client of the organization whose key `environ` holds
        (DAYTONA_API_KEY; DAYTONA_API_URL and DAYTONA_TARGET when set), checked to answer.

        Raises ProviderError (environment_start_failed) naming what is missing or refused."""
        try:
            daytona: Any = importlib.import_module(SDK_MODULE)  # an optional extra
        except ImportError:
            raise ProviderError(
                f"the daytona provider needs the Daytona SDK (the Python package "
                f"'{SDK_MODULE}'), which the bridge lacks: {PIP_INSTALL}",
                ErrorType.ENVIRONMENT_START_FAILED,
            ) from None
        api_key = environ.get(API_KEY, "").strip()
        if not api_key:
            raise ProviderError(
                f"the daytona provider needs {API_KEY} in the bridge's environment (and "
                f"{API_URL}, {TARGET} where the organization is not Daytona's cloud or its "
                "default region)",
                ErrorType.ENVIRONMENT_START_FAILED,
            )
        api_url = environ.get(API_URL, "").strip() or DEFAULT_API_URL
        config = daytona.DaytonaConfig(
            api_key=api_key, api_url=api_url, target=environ.get(TARGET, "").strip() or None
        )
        try:
            client = daytona.AsyncDaytona(config)
        except daytona.DaytonaError as err:
            raise ProviderError(
                f"the Daytona client could not be made for {api_url}: {err}",
                ErrorType.ENVIRONMENT_START_FAILED,
            ) from None
        provider = cls(client, daytona, api_url=api_url)
        try:
            await provider.check()
        except ProviderError:
            await provider.aclose()
            raise
        return provider

    async def check(self) -> None:
        """One page of one sandbox: the key is good and the API answers."""
        pages = self.client.list(
            self.sdk.ListSandboxesQuery(limit=1), request_timeout=self.response_timeout_sec
        )
        try:
            await anext(pages, None)
        except self.sdk.DaytonaError as err:
            raise ProviderError(
                f"Daytona at {self.api_url} refused the bridge: {err}",
                ErrorType.ENVIRONMENT_START_FAILED,
            ) from None
        finally:
            await pages.aclose()

    async def start(self, request: SandboxRequest) -> DaytonaSandbox:
        spec = request.spec
        builds = spec.builds_image
        params = self.sdk.CreateSandboxFromImageParams(
            name=sandbox_name(request.namespace, request.trial_name),
            image=self._image(request) if builds else spec.image,
            resources=self.sdk.Resources(**sandbox_resources(spec)),
            labels=dict(request.labels),
            **lifetime(spec, preserved=spec.preserve_env),
        )
        timeout = spec.timeouts.build_sec if builds else self.start_timeout_sec
        what = "built from the task's Dockerfile" if builds else f"of image {spec.image}"
        creating = asyncio.ensure_future(self.client.create(params, timeout=timeout))
        try:
            created = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Daytona goes on making the sandbox: delete it once it is there.
            with contextlib.suppress(Exception):
                await (await creating).delete(timeout=self.response_timeout_sec)
            raise
        except self.sdk.DaytonaError as err:
            left = getattr(err, "sandbox_id", None)
            if left:  # a create that timed out leaves its sandbox starting
                with contextlib.suppress(Exception):
                    await self.terminate(left)
            raise start_error(self.sdk, err, builds=builds, what=what) from None
        log.info("started Daytona sandbox %s (%s)", created.name, created.id)
        return DaytonaSandbox(created, self.sdk, **self.sandbox_options)

    def _image(self, request: SandboxRequest) -> Any:
        """The SDK's Image of the task's environment/Dockerfile (its directory the context)."""
        if request.task_dir is None:
            raise ProviderError(
                "the trial's image must be built, but the bridge has no task files",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            )
        dockerfile = request.task_dir / "environment" / "Dockerfile"
        try:
            return self.sdk.Image.from_dockerfile(dockerfile)
        except self.sdk.DaytonaError as err:
            raise ProviderError(
                f"the task's image cannot be built by Daytona: {err}",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            ) from None

    async def owned(self, bridge: str) -> list[OwnedSandbox]:
        query = self.sdk.ListSandboxesQuery(
            labels={LABEL_BRIDGE: label_value(bridge), LABEL_COMPONENT: BRIDGE_COMPONENT}
        )
        found: list[OwnedSandbox] = []
        try:
            async for sandbox in self.client.list(query, request_timeout=self.response_timeout_sec):
                labels = sandbox.labels or {}
                found.append(
                    OwnedSandbox(
                        sandbox_id=str(sandbox.id),
                        namespace=labels.get(LABEL_NAMESPACE, ""),
                        trial_name=labels.get(LABEL_TRIAL, ""),
                        preserved=labels.get(LABEL_PRESERVED) == "true",
                    )
                )
        except self.sdk.DaytonaError as err:
            raise ProviderError(f"cannot list the sandboxes in Daytona: {err}") from None
        return found

    async def terminate(self, sandbox_id: str) -> None:
        try:
            sandbox = await self.client.get(sandbox_id, request_timeout=self.response_timeout_sec)
            await sandbox.delete(timeout=self.response_timeout_sec)
        except self.sdk.DaytonaNotFoundError:
            return
        except self.sdk.DaytonaError as err:
            raise ProviderError(f"cannot delete Daytona sandbox {sandbox_id}: {err}") from None

    async def aclose(self) -> None:
        await self.client.close()


def sandbox_name(namespace: str, trial_name: str) -> str:
    """`<namespace>-<trial>-<random>`: readable, new for every start (a kept sandbox of an
    earlier start keeps its name), at most 63 characters."""
    return child_name(f"{namespace}-{trial_name}", secrets.token_hex(3))


def sandbox_resources(spec: RolloutTrialSpec) -> dict[str, int]:
    """`Resources` arguments: Daytona takes whole cores and GiB, so each quantity is rounded up
    (at least 1); GPUs as they are asked for (none: the field is left out)."""
    resources = spec.resources
    wanted = {
        "cpu": _whole(parse_quantity(str(resources.cpus))),
        "memory": _whole(parse_quantity(str(resources.memory)) / GIB),
        "disk": _whole(parse_quantity(str(resources.storage)) / GIB),
    }
    if resources.gpus:
        wanted["gpu"] = resources.gpus
    return wanted


def _whole(amount: Decimal) -> int:
    return max(1, math.ceil(amount))


def lifetime(spec: RolloutTrialSpec, *, preserved: bool) -> dict[str, int]:
    """How long Daytona lets the sandbox live on its own, in minutes: the sum of the trial's
    phase timeouts and `LIFETIME_MARGIN_SEC`. A sandbox is destroyed at that age whatever its
    state (`ttl_minutes`), and at once when stopped (`auto_delete_interval` 0), so none outlives
    a bridge that died. A kept one (preserveEnv) has no age limit: it stops when idle that long
    and stays, stopped, for the user. Auto-stop never ends a running trial's sandbox: a trial
    is never idle longer than it lasts."""
    timeouts = spec.timeouts
    total = (
        timeouts.build_sec
        + timeouts.agent_install_sec
        + timeouts.agent_sec
        + timeouts.verifier_sec
        + LIFETIME_MARGIN_SEC
    )
    minutes = math.ceil(total / 60)
    if preserved:
        return {"auto_stop_interval": minutes}
    return {"auto_stop_interval": 0, "ttl_minutes": minutes, "auto_delete_interval": 0}


def start_error(sdk: Any, err: Exception, *, builds: bool, what: str) -> ProviderError:
    """The trial's error for a sandbox Daytona would not make or start (see the README table)."""
    text = str(getattr(err, "message", None) or err)
    message = f"the Daytona sandbox {what} did not start: {text}"
    if isinstance(err, sdk.DaytonaQueueTimeoutError | sdk.DaytonaSpotEvictedError):
        kind = ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    elif isinstance(err, sdk.DaytonaConnectionError):
        kind = ErrorType.ENVIRONMENT_START_FAILED
    elif isinstance(err, sdk.DaytonaTimeoutError):
        kind = ErrorType.ENVIRONMENT_BUILD_TIMEOUT if builds else ErrorType.ENVIRONMENT_START_FAILED
    elif isinstance(err, sdk.DaytonaRateLimitError) or _QUOTA.search(text):
        kind = ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    elif isinstance(err, sdk.DaytonaAuthenticationError | sdk.DaytonaForbiddenError):
        kind = ErrorType.ENVIRONMENT_START_FAILED
    elif builds and _BUILD_FAILED.search(text):
        kind = ErrorType.ENVIRONMENT_BUILD_FAILED
    elif not builds and (_BUILD_FAILED.search(text) or _PULL.search(text)):
        kind = ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
    else:
        kind = ErrorType.ENVIRONMENT_START_FAILED
    return ProviderError(message, kind)
