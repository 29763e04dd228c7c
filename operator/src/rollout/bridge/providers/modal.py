"""The `modal` provider: each trial's sandbox is a Modal Sandbox (https://modal.com).

Written against the `modal` Python SDK 1.6.4, an optional extra (`pip install
'rollout-operator[modal]'`), imported only by `ModalProvider.connect`: everything else takes the
SDK module as an argument, so tests drive the adapter with a stand-in shaped like it. Every SDK
call is the documented asynchronous form (`.aio`).

The bridge signs in with the Modal token of its own variables (MODAL_TOKEN_ID,
MODAL_TOKEN_SECRET; never Modal's config file) and starts every sandbox in one Modal App,
`APP_NAME`, in the environment MODAL_ENVIRONMENT names (Modal's default one without it). The
trial's image is pulled (`Image.from_registry`) or built from the task's environment/
(`Image.from_dockerfile`) once per job, before the sandbox is created, so that a failed pull or
build gets its own error type. The sandbox's first process is Modal's default one (it sleeps until
the sandbox ends); its lifetime (`sandbox_timeout_sec`) covers the trial's phases, so a sandbox
whose bridge died ends by itself. Every `Environment` operation is an exec or a filesystem call of
the SDK (`modal_sandbox.ModalSandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import math
import re
import secrets
from collections import OrderedDict
from collections.abc import Callable, Mapping
from decimal import ROUND_CEILING
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
from rollout.bridge.providers.modal_sandbox import APP_NAME, ModalSandbox, error_text
from rollout.bridge.providers.scripts import KILL_GRACE_SEC

log = logging.getLogger(__name__)

SDK_VERSION = "1.6.4"
"""The `modal` release the adapter is written against."""
INSTALL_HINT = "pip install 'rollout-operator[modal]'"
CREDENTIAL_VARIABLES = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")
"""Modal's own variables of a token (its id and secret), read from the bridge's environment."""
ENVIRONMENT = "MODAL_ENVIRONMENT"
"""Modal's own variable naming the Modal environment of the App (optional)."""
GPU_TYPE = "ROLLOUT_MODAL_GPU_TYPE"
"""The bridge's variable naming the Modal GPU type of a trial that asks for GPUs."""
DEFAULT_GPU_TYPE = "T4"
MAX_LIFETIME_SEC = 24 * 3600
"""The longest lifetime Modal gives a sandbox; a kept one (preserveEnv) gets it."""
LIFETIME_MARGIN_SEC = 1800
"""A sandbox's lifetime beyond its phases' timeouts: readiness, uploads, collection."""
MAX_JOBS_REMEMBERED = 32

_RESOURCE_WORDS = re.compile(r"\b(cpu|cpus|memory|gpu|gpus|resources?|capacity|quota)\b", re.I)
"""What a Modal InvalidError names when it refuses the resources asked for."""


# --- The SDK ----------------------------------------------------------------------------------


def import_sdk() -> Any:
    """The `modal` module; ProviderError saying how to install it when it is missing."""
    try:
        sdk = importlib.import_module("modal")
        importlib.import_module("modal.exception")
    except ImportError:
        raise ProviderError(
            f"the modal provider needs Modal's SDK (the Python package 'modal', written against "
            f"{SDK_VERSION}), which the bridge lacks: {INSTALL_HINT}",
            ErrorType.ENVIRONMENT_START_FAILED,
        ) from None
    return sdk


def credentials(environ: Mapping[str, str]) -> tuple[str, str]:
    """The Modal token in `environ`; ProviderError naming the variables that are missing."""
    missing = [name for name in CREDENTIAL_VARIABLES if not environ.get(name)]
    if missing:
        raise ProviderError(
            f"the modal provider needs a Modal token in the bridge's environment: "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set",
            ErrorType.ENVIRONMENT_START_FAILED,
        )
    token_id, token_secret = (environ[name] for name in CREDENTIAL_VARIABLES)
    return token_id, token_secret


def image_error_type(errors: Any, err: BaseException, *, builds: bool) -> ErrorType:
    """The error type of an image Modal could not pull (`builds` False) or build."""
    if isinstance(err, errors.ResourceExhaustedError):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    if isinstance(err, errors.ImageBuildError) and "timed out" in str(err):
        return (
            ErrorType.ENVIRONMENT_BUILD_TIMEOUT
            if builds
            else ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
        )
    if isinstance(err, (errors.ImageBuildError, errors.NotFoundError, errors.InvalidError)):
        return (
            ErrorType.ENVIRONMENT_BUILD_FAILED
            if builds
            else ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
        )
    return ErrorType.ENVIRONMENT_START_FAILED


def create_error_type(errors: Any, err: BaseException) -> ErrorType:
    """The error type of a sandbox Modal would not create: resource allocation when it lacks
    the capacity or quota (ResourceExhaustedError) or refuses the resources asked for, else a
    start failure (authentication, permissions, anything else)."""
    if isinstance(err, errors.ResourceExhaustedError):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    if isinstance(err, errors.InvalidError) and _RESOURCE_WORDS.search(str(err)):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    return ErrorType.ENVIRONMENT_START_FAILED


# --- Requests ---------------------------------------------------------------------------------


def sandbox_timeout_sec(spec: RolloutTrialSpec) -> int:
    """The sandbox's lifetime: its phases' timeouts plus `LIFETIME_MARGIN_SEC`, at most Modal's
    24 hours; the 24 hours for a sandbox kept after its trial (preserveEnv)."""
    if spec.preserve_env:
        return MAX_LIFETIME_SEC
    timeouts = spec.timeouts
    phases = timeouts.agent_install_sec + timeouts.agent_sec + timeouts.verifier_sec
    return min(math.ceil(phases) + LIFETIME_MARGIN_SEC, MAX_LIFETIME_SEC)


def resources(spec: RolloutTrialSpec, gpu_type: str) -> dict[str, Any]:
    """`Sandbox.create`'s resources: the task's cores and MiB as request and limit both (as the
    trial's container has them), and `gpu_type`:N for N GPUs. Storage has no Sandbox option."""
    cores = float(parse_quantity(spec.resources.cpus))
    memory_bytes = parse_quantity(spec.resources.memory)
    mib = int((memory_bytes / 2**20).to_integral_value(rounding=ROUND_CEILING))
    gpus = spec.resources.gpus
    return {
        "cpu": (cores, cores),
        "memory": (mib, mib),
        "gpu": f"{gpu_type}:{gpus}" if gpus > 0 else None,
    }


def sandbox_name(namespace: str, trial_name: str) -> str:
    """`<namespace>-<trial>-<random>`: readable in Modal's dashboard, new for every start (a
    name is unique within the App), at most 63 characters."""
    return child_name(f"{namespace}-{trial_name}", secrets.token_hex(3))


# --- The provider -----------------------------------------------------------------------------


class ModalProvider(Provider):
    """Trials' sandboxes in one Modal workspace, in the App `APP_NAME`.

    `sdk` is the `modal` module (or a stand-in shaped like it), `client` a `modal.Client`, `app`
    the `modal.App` the sandboxes belong to.
    """

    name = "modal"

    def __init__(
        self,
        sdk: Any,
        client: Any,
        app: Any,
        *,
        gpu_type: str = DEFAULT_GPU_TYPE,
        kill_grace_sec: float = KILL_GRACE_SEC,
    ) -> None:
        self.sdk = sdk
        self.client = client
        self.app = app
        self.gpu_type = gpu_type
        self.kill_grace_sec = kill_grace_sec
        self._images: OrderedDict[tuple[str, str], _JobImages] = OrderedDict()

    @classmethod
    async def connect(
        cls, environ: Mapping[str, str], *, kill_grace_sec: float = KILL_GRACE_SEC
    ) -> ModalProvider:
        """Import the SDK and sign in with `environ`'s token (`open`); raises ProviderError."""
        return await cls.open(import_sdk(), environ, kill_grace_sec=kill_grace_sec)

    @classmethod
    async def open(
        cls, sdk: Any, environ: Mapping[str, str], *, kill_grace_sec: float = KILL_GRACE_SEC
    ) -> ModalProvider:
        """A provider of `sdk` signed in with `environ`'s token, its App looked up (created when
        missing): ProviderError (environment_start_failed) when Modal refuses either."""
        token_id, token_secret = credentials(environ)
        errors = sdk.exception
        client = None
        try:
            client = await sdk.Client.from_credentials.aio(token_id, token_secret)
            app = await sdk.App.lookup.aio(
                APP_NAME,
                client=client,
                environment_name=environ.get(ENVIRONMENT) or None,
                create_if_missing=True,
            )
        except errors.Error as err:
            if client is not None:
                with contextlib.suppress(errors.Error):
                    await client.close.aio()
            raise ProviderError(
                f"Modal did not let the bridge use the App {APP_NAME!r} with the token of "
                f"{CREDENTIAL_VARIABLES[0]}: {error_text(err)}",
                ErrorType.ENVIRONMENT_START_FAILED,
            ) from None
        gpu_type = environ.get(GPU_TYPE) or DEFAULT_GPU_TYPE
        return cls(sdk, client, app, gpu_type=gpu_type, kill_grace_sec=kill_grace_sec)

    async def start(self, request: SandboxRequest) -> ModalSandbox:
        spec = request.spec
        image = await self._image(request)
        name = sandbox_name(request.namespace, request.trial_name)
        errors = self.sdk.exception
        try:
            created = await self.sdk.Sandbox.create.aio(
                app=self.app,
                name=name,
                tags=dict(request.labels),
                image=image,
                timeout=sandbox_timeout_sec(spec),
                workdir=spec.workdir or None,
                client=self.client,
                **resources(spec, self.gpu_type),
            )
        except errors.Error as err:
            raise ProviderError(
                f"Modal did not start a sandbox of image {spec.image}: {error_text(err)}",
                create_error_type(errors, err),
            ) from None
        log.info("started Modal sandbox %s (%s)", name, created.object_id)
        return ModalSandbox(self.sdk, created, name, kill_grace_sec=self.kill_grace_sec)

    async def _image(self, request: SandboxRequest) -> Any:
        """The trial's image, pulled or built (once per job)."""
        spec = request.spec
        builds = spec.builds_image
        if builds and request.task_dir is None:
            raise ProviderError(
                "the trial's image must be built, but the bridge has no task files",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            )
        images = self._images_of(request.namespace, spec.job_name)
        if builds and request.task_dir is not None:
            context = request.task_dir / "environment"
            return await images.ensure(
                f"build {context}",
                lambda: self.sdk.Image.from_dockerfile(
                    context / "Dockerfile", context_dir=context, force_build=spec.force_build
                ),
                self,
                builds=True,
                timeout_sec=spec.timeouts.build_sec,
                what=f"the image of {context}/Dockerfile",
            )
        return await images.ensure(
            f"pull {spec.image}",
            lambda: self.sdk.Image.from_registry(spec.image),
            self,
            builds=False,
            timeout_sec=spec.timeouts.build_sec,
            what=f"the image {spec.image}",
        )

    def _images_of(self, namespace: str, job_name: str) -> _JobImages:
        key = (namespace, job_name)
        images = self._images.pop(key, None) or _JobImages()
        self._images[key] = images
        while len(self._images) > MAX_JOBS_REMEMBERED:
            self._images.popitem(last=False)
        return images

    async def owned(self, bridge: str) -> list[OwnedSandbox]:
        errors = self.sdk.exception
        wanted = {LABEL_BRIDGE: label_value(bridge), LABEL_COMPONENT: BRIDGE_COMPONENT}
        owned = []
        try:
            async for found in self.sdk.Sandbox.list.aio(
                app_id=self.app.app_id, tags=wanted, client=self.client
            ):
                tags = await found.get_tags.aio()
                owned.append(
                    OwnedSandbox(
                        sandbox_id=str(found.object_id),
                        namespace=tags.get(LABEL_NAMESPACE, ""),
                        trial_name=tags.get(LABEL_TRIAL, ""),
                        preserved=tags.get(LABEL_PRESERVED) == "true",
                    )
                )
        except errors.Error as err:
            raise ProviderError(
                f"cannot list the sandboxes of the Modal App {APP_NAME}: {error_text(err)}"
            ) from None
        return owned

    async def terminate(self, sandbox_id: str) -> None:
        errors = self.sdk.exception
        try:
            found = await self.sdk.Sandbox.from_id.aio(sandbox_id, client=self.client)
            await found.terminate.aio()
        except errors.NotFoundError:
            return
        except errors.Error as err:
            raise ProviderError(
                f"cannot terminate the Modal sandbox {sandbox_id}: {error_text(err)}"
            ) from None

    async def aclose(self) -> None:
        with contextlib.suppress(self.sdk.exception.Error):
            await self.client.close.aio()


class _JobImages:
    """A job's images: each pulled or built once (its trials wait for the first), and a failed
    build failing the job's later trials alike, as local mode's image cache does (a failed pull
    is tried again by the next trial)."""

    def __init__(self) -> None:
        self._ready: dict[str, Any] = {}
        self._failed: dict[str, ProviderError] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(
        self,
        key: str,
        define: Callable[[], Any],
        provider: ModalProvider,
        *,
        builds: bool,
        timeout_sec: float,
        what: str,
    ) -> Any:
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key in self._failed:
                raise self._failed[key]
            if key not in self._ready:
                try:
                    self._ready[key] = await _build(
                        define(), provider, builds=builds, timeout_sec=timeout_sec, what=what
                    )
                except ProviderError as failure:
                    if builds:
                        self._failed[key] = failure
                    raise
            return self._ready[key]


async def _build(
    image: Any, provider: ModalProvider, *, builds: bool, timeout_sec: float, what: str
) -> Any:
    """`image` built (`Image.build`: a registry image is pulled, a Dockerfile built) within
    `timeout_sec`; ProviderError with the error type of the failure."""
    errors = provider.sdk.exception
    verb = "build" if builds else "pull"
    try:
        async with asyncio.timeout(timeout_sec):
            await image.build.aio(provider.app)
    except TimeoutError:
        raise ProviderError(
            f"Modal did not {verb} {what} within {timeout_sec:g}s",
            ErrorType.ENVIRONMENT_BUILD_TIMEOUT
            if builds
            else ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED,
        ) from None
    except errors.Error as err:
        raise ProviderError(
            f"Modal could not {verb} {what}: {error_text(err)}",
            image_error_type(errors, err, builds=builds),
        ) from None
    return image
