"""The `e2b` provider: each trial's sandbox is an E2B sandbox (a Firecracker microVM).

Written against the official Python SDK `e2b` 2.63 (`pip install 'rollout-operator[e2b]'`),
imported in `E2BProvider.connect` only: the provider takes the SDK module as an argument, so
tests hand it a double shaped like the SDK. Credentials come from the bridge's variables alone
(E2B_API_KEY, and E2B_DOMAIN for a self-hosted or regional E2B) and go to every SDK call as its
`api_key` and `domain` options, never from the SDK's own reading of os.environ.

E2B runs templates, not images. A trial's template is built with the SDK's template builder
(`AsyncTemplate().from_image(image)` for a registry image, `from_dockerfile` for the task's
environment/) under a name derived from what defines it (the image or the Dockerfile tree's
content hash, the working directory, and the sandbox size, which E2B fixes per template), so
the same trial setup builds once and every later trial, of any job or bridge run, starts from
it at once. A template's default user and working directory are E2B's (`user`, /home/user)
unless set: the provider sets Docker's (root, /), or the Dockerfile's USER and WORKDIR, or the
trial's workdir. Every `Environment` operation is a command or a filesystem call of the SDK
(`e2b_sandbox.E2BSandbox`).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.api.dockerfile import parse as parse_dockerfile
from rollout.api.errors import ErrorType
from rollout.api.names import LABEL_COMPONENT
from rollout.api.quantity import parse_quantity
from rollout.api.resources import LABEL_TRIAL, RolloutTrialSpec
from rollout.api.taskdir import DOCKERFILE, tree_hash
from rollout.api.trials import label_value
from rollout.bridge.providers.archives import TRANSFER_TIMEOUT_SEC
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
from rollout.bridge.providers.e2b_sandbox import ROOT, E2BSandbox, error_text
from rollout.bridge.providers.scripts import KILL_GRACE_SEC, RESPONSE_TIMEOUT_SEC

log = logging.getLogger(__name__)

SDK_MODULE = "e2b"
INSTALL_HINT = "pip install 'rollout-operator[e2b]'"
API_KEY_VARIABLE = "E2B_API_KEY"
DOMAIN_VARIABLE = "E2B_DOMAIN"
MAX_LIFETIME_SEC = 86_400
"""E2B's longest sandbox timeout (24 hours, on the Pro plan; 1 hour on Hobby)."""
LIFETIME_MARGIN_SEC = 1800
"""Added to the trial's phase timeouts for its setup, uploads and teardown."""
MAX_JOBS_REMEMBERED = 32
TEMPLATE_PREFIX = "rollout-"

_RESOURCE_REFUSAL = re.compile(
    r"cpu|memory|disk|quota|limit|capacity|concurrent|insufficient|not enough|exceed",
    re.IGNORECASE,
)
"""What E2B says when an account or the cloud cannot give a sandbox or a template its size."""
_PULL_REFUSAL = re.compile(
    r"pull|manifest|not found|no such image|unauthorized|denied|repository|registry",
    re.IGNORECASE,
)
"""What a template build from a registry image says when the image cannot be fetched."""

# --- Mapping the trial onto E2B ----------------------------------------------------------------


@dataclass(frozen=True)
class SandboxSize:
    """A template's size, in E2B's units (fixed per template: a sandbox has its template's)."""

    cpu_count: int
    """Whole vCPUs: the trial's cpus rounded up."""
    memory_mb: int
    """MiB, rounded up to an even number as E2B requires."""
    min_free_disk_mb: int
    """The trial's storage as the free disk E2B grows the template's filesystem to (best
    effort, never shrunk)."""


def sandbox_size(spec: RolloutTrialSpec) -> SandboxSize:
    """The trial's cpus, memory and storage (Kubernetes quantities) in E2B's units."""
    cpus = parse_quantity(spec.resources.cpus)
    memory_mib = math.ceil(parse_quantity(spec.resources.memory) / 2**20)
    storage_mib = math.ceil(parse_quantity(spec.resources.storage) / 2**20)
    return SandboxSize(
        cpu_count=max(1, math.ceil(cpus)),
        memory_mb=max(2, memory_mib + memory_mib % 2),
        min_free_disk_mb=max(0, storage_mib),
    )


def lifetime_sec(spec: RolloutTrialSpec) -> int:
    """The sandbox's timeout: every phase's, plus a margin, so that the sandbox of a bridge that
    died ends by itself; at most E2B's longest."""
    timeouts = spec.timeouts
    phases = timeouts.agent_install_sec + timeouts.agent_sec + timeouts.verifier_sec
    return min(MAX_LIFETIME_SEC, math.ceil(phases) + LIFETIME_MARGIN_SEC)


@dataclass(frozen=True)
class TemplateSource:
    """What a trial's template is made from: a registry image, or a task's environment/."""

    image: str | None = None
    environment_dir: Path | None = None
    content_hash: str | None = None
    """tree_hash of environment_dir."""


def template_name(source: TemplateSource, workdir: str | None, size: SandboxSize) -> str:
    """`rollout-<hash>`: the same for the same image (or Dockerfile tree), working directory
    and size, so a template built once serves every later trial that needs it."""
    key = json.dumps(
        {
            "image": source.image,
            "environment": source.content_hash,
            "workdir": workdir,
            "cpu_count": size.cpu_count,
            "memory_mb": size.memory_mb,
            "min_free_disk_mb": size.min_free_disk_mb,
        },
        sort_keys=True,
    )
    return TEMPLATE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:32]


def sandbox_request(request: SandboxRequest, template: str) -> dict[str, Any]:
    """`AsyncSandbox.create`'s arguments (credentials aside) for the trial's sandbox: its
    template, a timeout covering the trial, its labels as metadata, a kept sandbox paused at
    its timeout rather than killed, and a restricted egress as E2B's network rules."""
    spec = request.spec
    arguments: dict[str, Any] = {
        "template": template,
        "timeout": lifetime_sec(spec),
        "metadata": dict(request.labels),
        "lifecycle": {"on_timeout": "pause" if spec.preserve_env else "kill"},
    }
    if spec.egress is not None and spec.egress.restricted:
        arguments["network"] = {
            "deny_out": ["0.0.0.0/0"],
            "allow_out": list(spec.egress.allowed_hosts),
        }
    return arguments


def start_error_type(sdk: Any, err: BaseException) -> ErrorType:
    """The error type of a sandbox E2B would not create: resources when the account's limits
    or E2B's capacity refused it (429, 503, a size over the limits), the image when its
    template is gone, else a start failure (authentication, anything else)."""
    if isinstance(err, sdk.AuthenticationException):
        return ErrorType.ENVIRONMENT_START_FAILED
    if isinstance(err, (sdk.RateLimitException, sdk.ServiceBusyException)):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    if isinstance(err, sdk.NotEnoughSpaceException):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    if isinstance(err, sdk.SandboxException):
        status = getattr(err, "status_code", None)
        if status == 404 or isinstance(err, sdk.NotFoundException):
            return ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
        if status in (400, 403) and _RESOURCE_REFUSAL.search(str(err)):
            return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    return ErrorType.ENVIRONMENT_START_FAILED


def build_error_type(sdk: Any, err: BaseException, source: TemplateSource) -> ErrorType:
    """The error type of a template E2B would not build: the image when a registry image could
    not be fetched, resources when the size is over the account's limits or E2B is busy, the
    start when the credentials are refused, else the build."""
    if isinstance(err, sdk.AuthenticationException):
        return ErrorType.ENVIRONMENT_START_FAILED
    if isinstance(err, (sdk.RateLimitException, sdk.ServiceBusyException)):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    text = str(err)
    if source.image is not None and _PULL_REFUSAL.search(text):
        return ErrorType.ENVIRONMENT_IMAGE_PULL_FAILED
    if re.search(r"\b(cpu|memory|quota|limit)\b", text, re.IGNORECASE) and re.search(
        r"exceed|maximum|max|limit|quota|not allowed", text, re.IGNORECASE
    ):
        return ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED
    return ErrorType.ENVIRONMENT_BUILD_FAILED


# --- The provider ------------------------------------------------------------------------------


@dataclass
class _JobTemplates:
    """One job's template outcomes: a failed Dockerfile build fails the job's later trials
    alike (as local mode's image cache does), and force_build rebuilds once per job."""

    failed: dict[str, ProviderError] = field(default_factory=dict)
    forced: set[str] = field(default_factory=set)


class E2BProvider(Provider):
    """Trials' sandboxes on one E2B account (its API key)."""

    name = "e2b"

    def __init__(
        self,
        sdk: Any,
        api: Mapping[str, str],
        *,
        kill_grace_sec: float = KILL_GRACE_SEC,
        response_timeout_sec: float = RESPONSE_TIMEOUT_SEC,
        transfer_timeout_sec: float = TRANSFER_TIMEOUT_SEC,
    ) -> None:
        """`sdk`: the `e2b` module (or a double shaped like it); `api`: the connection options
        every SDK call takes (`api_key`, and `domain` when set)."""
        self.sdk = sdk
        self.api = dict(api)
        self.kill_grace_sec = kill_grace_sec
        self.response_timeout_sec = response_timeout_sec
        self.transfer_timeout_sec = transfer_timeout_sec
        self._locks: dict[str, asyncio.Lock] = {}
        self._ready: set[str] = set()
        self._jobs: OrderedDict[tuple[str, str], _JobTemplates] = OrderedDict()

    @classmethod
    async def connect(cls, environ: Mapping[str, str]) -> E2BProvider:
        """The provider of the account whose key is `environ`'s E2B_API_KEY. Raises
        ProviderError (environment_start_failed) naming what is missing: the SDK (and how to
        install it) or the variable."""
        try:
            sdk = importlib.import_module(SDK_MODULE)  # an optional extra
        except ImportError:
            raise ProviderError(
                f"the e2b provider needs the E2B SDK (the Python package {SDK_MODULE!r}), which "
                f"the bridge lacks: install it with {INSTALL_HINT}",
                ErrorType.ENVIRONMENT_START_FAILED,
            ) from None
        api_key = environ.get(API_KEY_VARIABLE, "").strip()
        if not api_key:
            raise ProviderError(
                f"the e2b provider needs an E2B API key in the bridge's {API_KEY_VARIABLE} "
                f"variable (and {DOMAIN_VARIABLE} for an E2B other than e2b.app)",
                ErrorType.ENVIRONMENT_START_FAILED,
            )
        api = {"api_key": api_key}
        domain = environ.get(DOMAIN_VARIABLE, "").strip()
        if domain:
            api["domain"] = domain
        return cls(sdk, api)

    # -- starting ------------------------------------------------------------------------------

    async def start(self, request: SandboxRequest) -> E2BSandbox:
        spec = request.spec
        if spec.resources.gpus > 0:
            raise ProviderError(
                f"E2B sandboxes have no GPUs, and the trial asks for {spec.resources.gpus}",
                ErrorType.ENVIRONMENT_RESOURCE_ALLOCATION_FAILED,
            )
        template = await self._template(request)
        arguments = sandbox_request(request, template)
        try:
            sandbox = await self.sdk.AsyncSandbox.create(**arguments, **self.api)
        except Exception as err:
            raise ProviderError(
                f"E2B did not start a sandbox of template {template}: {error_text(err)}",
                start_error_type(self.sdk, err),
            ) from None
        log.info("started E2B sandbox %s (template %s)", sandbox.sandbox_id, template)
        return E2BSandbox(
            self.sdk,
            sandbox,
            template,
            kill_grace_sec=self.kill_grace_sec,
            response_timeout_sec=self.response_timeout_sec,
            transfer_timeout_sec=self.transfer_timeout_sec,
        )

    async def _template(self, request: SandboxRequest) -> str:
        """The trial's template, built unless E2B has it (or, with force_build, unless this job
        built it already)."""
        spec = request.spec
        size = sandbox_size(spec)
        source = await self._source(request)
        name = template_name(source, spec.workdir, size)
        job = self._job(request.namespace, spec.job_name)
        async with self._locks.setdefault(name, asyncio.Lock()):
            if name in job.failed:
                raise job.failed[name]
            if spec.force_build:
                if name in job.forced:
                    return name
            elif name in self._ready or await self._exists(name):
                self._ready.add(name)
                return name
            try:
                await self._build(request, source, name, size)
            except ProviderError as err:
                if source.environment_dir is not None and err.error_type in (
                    ErrorType.ENVIRONMENT_BUILD_FAILED,
                    ErrorType.ENVIRONMENT_BUILD_TIMEOUT,
                ):
                    job.failed[name] = err
                raise
            job.forced.add(name)
            self._ready.add(name)
        return name

    async def _source(self, request: SandboxRequest) -> TemplateSource:
        spec = request.spec
        if not spec.builds_image:
            return TemplateSource(image=spec.image)
        if request.task_dir is None:
            raise ProviderError(
                "the trial's image must be built, but the bridge has no task files",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            )
        environment_dir = request.task_dir / "environment"
        if not await asyncio.to_thread((environment_dir / DOCKERFILE).is_file):
            raise ProviderError(
                f"the task has no environment/{DOCKERFILE} to build its E2B template from: add "
                "one, or set environment.docker_image in its task.toml to a registry image"
                + (" and unset force_build in the job" if spec.force_build else ""),
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            )
        content_hash = await asyncio.to_thread(tree_hash, environment_dir)
        return TemplateSource(environment_dir=environment_dir, content_hash=content_hash)

    def _job(self, namespace: str, job_name: str) -> _JobTemplates:
        key = (namespace, job_name)
        job = self._jobs.pop(key, None) or _JobTemplates()
        self._jobs[key] = job
        while len(self._jobs) > MAX_JOBS_REMEMBERED:
            self._jobs.popitem(last=False)
        return job

    async def _exists(self, name: str) -> bool:
        try:
            return bool(await self.sdk.AsyncTemplate.exists(name, **self.api))
        except Exception as err:
            raise ProviderError(
                f"E2B did not say whether template {name} exists: {error_text(err)}",
                start_error_type(self.sdk, err),
            ) from None

    async def _build(
        self, request: SandboxRequest, source: TemplateSource, name: str, size: SandboxSize
    ) -> None:
        spec = request.spec
        what = source.image or f"the task's environment/{DOCKERFILE}"
        try:
            definition = await asyncio.to_thread(self._definition, source, spec.workdir)
        except (ValueError, OSError) as err:  # a Dockerfile E2B's converter refuses
            raise ProviderError(
                f"E2B cannot build a template from {what}: {error_text(err)}",
                ErrorType.ENVIRONMENT_BUILD_FAILED,
            ) from None
        log.info("building E2B template %s from %s", name, what)
        building = self.sdk.AsyncTemplate.build(
            definition,
            name,
            cpu_count=size.cpu_count,
            memory_mb=size.memory_mb,
            min_free_disk_mb=size.min_free_disk_mb,
            skip_cache=spec.force_build,
            **self.api,
        )
        try:
            await asyncio.wait_for(building, spec.timeouts.build_sec)
        except TimeoutError:
            raise ProviderError(
                f"building the E2B template of {what} took longer than "
                f"{spec.timeouts.build_sec:g}s (environment.build_timeout_sec)",
                ErrorType.ENVIRONMENT_BUILD_TIMEOUT,
            ) from None
        except Exception as err:
            raise ProviderError(
                f"E2B did not build a template from {what}: {error_text(err)}",
                build_error_type(self.sdk, err, source),
            ) from None

    def _definition(self, source: TemplateSource, workdir: str | None) -> Any:
        """The SDK's template definition: the image, or the Dockerfile, with Docker's default
        user and working directory where it sets none (E2B's would be `user` in /home/user),
        and the trial's working directory when it has one. Blocking (reads the Dockerfile)."""
        if source.image is not None:
            builder = self.sdk.AsyncTemplate().from_image(source.image)
            builder = builder.set_user(ROOT).set_workdir(workdir or "/")
            return builder
        if source.environment_dir is None:
            raise ValueError("a template source names an image or an environment directory")
        dockerfile = source.environment_dir / DOCKERFILE
        keywords = {i.keyword for i in parse_dockerfile(dockerfile.read_text(encoding="utf-8"))}
        builder = self.sdk.AsyncTemplate(
            file_context_path=str(source.environment_dir)
        ).from_dockerfile(str(dockerfile))
        if "USER" not in keywords:
            builder = builder.set_user(ROOT)
        if workdir or "WORKDIR" not in keywords:
            builder = builder.set_workdir(workdir or "/")
        return builder

    # -- what the bridge holds -----------------------------------------------------------------

    async def owned(self, bridge: str) -> list[OwnedSandbox]:
        query = self.sdk.SandboxQuery(
            metadata={LABEL_BRIDGE: label_value(bridge), LABEL_COMPONENT: BRIDGE_COMPONENT}
        )
        found: list[OwnedSandbox] = []
        try:
            pages = self.sdk.AsyncSandbox.list(query=query, **self.api)
            while pages.has_next:
                for info in await pages.next_items():
                    labels = info.metadata or {}
                    found.append(
                        OwnedSandbox(
                            sandbox_id=str(info.sandbox_id),
                            namespace=labels.get(LABEL_NAMESPACE, ""),
                            trial_name=labels.get(LABEL_TRIAL, ""),
                            preserved=labels.get(LABEL_PRESERVED) == "true",
                        )
                    )
        except Exception as err:
            raise ProviderError(f"cannot list the E2B sandboxes: {error_text(err)}") from None
        return found

    async def terminate(self, sandbox_id: str) -> None:
        try:
            await self.sdk.AsyncSandbox.kill(sandbox_id, **self.api)
        except Exception as err:
            raise ProviderError(
                f"cannot kill E2B sandbox {sandbox_id}: {error_text(err)}"
            ) from None

    async def aclose(self) -> None:
        """Nothing to release: the SDK opens its connections per call."""
