"""The operator's kopf handlers: thin registration, the work is elsewhere.

- startup: settings (`settings.configure_settings`), the shared `Runtime` in the memo, and the
  operator's own watches of RolloutTrials and trial Pods (`watches.py`), which list them into
  their indexes (`index.py`) before kopf starts any job's reconciler; their events only wake the
  job's reconciler (and note deleted Pods), and nothing is stored on trials or Pods: no
  annotations, no finalizers, no extra API writes;
- an `on.event` handler for RolloutJobs, which wakes the job's reconciler;
- one daemon per RolloutJob, the job's reconciler (`jobs.JobReconciler`), started for every job
  that exists when the operator starts and for every new one;
- an index of RolloutImages, an `on.event` handler that wakes the jobs waiting for one, and a
  daemon per RolloutImage that has not finished (`images.ImageReconciler`): only while it is
  Pending or Building, so kopf keeps its finalizer on an image only while it builds.

The memo may bring `config` (an OperatorConfig), `api_client` (a kubernetes ApiClient) and
`metrics` (an OperatorMetrics): tests and embedders set them; the `rollout-operator` process
gives the config and lets the rest default.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import kopf

from rollout.api.resources import (
    GROUP,
    VERSION,
    ImagePhase,
    RolloutImage,
    RolloutJob,
)
from rollout.api.trials import label_value
from rollout.controller.config import OperatorConfig
from rollout.controller.images import ImageReconciler
from rollout.controller.index import index_image, pod_trial_name
from rollout.controller.jobs import ImagesIndex, JobReconciler
from rollout.controller.kubeapi import KubeApi, default_api_client
from rollout.controller.metrics import OperatorMetrics, default_metrics
from rollout.controller.registry import DockerConfig
from rollout.controller.runtime import Runtime
from rollout.controller.settings import configure_settings
from rollout.controller.watches import start_watches, trial_watches

JOBS = RolloutJob.resource.plural
IMAGES = RolloutImage.resource.plural
FINISHED_IMAGE = (ImagePhase.READY.value, ImagePhase.FAILED.value)

log = logging.getLogger(__name__)


def runtime_of(memo: Any) -> Runtime:
    runtime: Runtime = memo.runtime
    return runtime


STARTUP_BACKOFF_SEC = 5.0
"""How soon kopf runs the startup handler again after it failed (the first listing of trials or
Pods refused: the API server restarting, RBAC not applied yet); kopf's default is a minute."""


@kopf.on.startup(backoff=STARTUP_BACKOFF_SEC)
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: OperatorConfig = getattr(memo, "config", None) or OperatorConfig.from_env()
    configure_settings(settings, config)
    metrics: OperatorMetrics = getattr(memo, "metrics", None) or default_metrics()
    api_client = getattr(memo, "api_client", None) or default_api_client()
    runtime = memo.runtime = Runtime(
        config,
        api=KubeApi(api_client, metrics=metrics),
        metrics=metrics,
        registry_config=_registry_config(config.image_registry_config),
    )

    def trial_changed(kind: str, body: Any) -> None:
        runtime.wake_for(body, (body.get("metadata") or {}).get("name"))

    def trial_pod_changed(kind: str, body: Any) -> None:
        if kind == "DELETED":
            runtime.note_pod_deleted(body)
        runtime.wake_for(body, pod_trial_name(body))

    runtime.watches = trial_watches(
        runtime.api,
        config.namespaces,
        trials=runtime.trials,
        pods=runtime.pods,
        on_trial=trial_changed,
        on_pod=trial_pod_changed,
        on_relist=runtime.wake_every_job,
    )
    # Listed before kopf starts any daemon: a job's reconciler sees every trial that exists.
    await start_watches(runtime.watches)
    log.info(
        "rollout-operator watching %s (%d trials, %d trial Pods), peering %s",
        ", ".join(config.namespaces) or "the whole cluster",
        len(runtime.trials),
        len(runtime.pods),
        config.peering_name or "off (standalone)",
    )


def _registry_config(path: str | None) -> DockerConfig | None:
    """The operator's registry credentials from their file (a mounted dockerconfigjson)."""
    if path is None:
        return None
    try:
        return DockerConfig.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        # Without them every look-up is anonymous: a private registry then refuses, and the
        # image's status says so. Better than no operator at all.
        log.error(
            "registry credentials %s cannot be read (%s): looking images up anonymously", path, err
        )
        return None


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    runtime = getattr(memo, "runtime", None)
    if isinstance(runtime, Runtime):
        runtime.close()


@kopf.index(GROUP, VERSION, IMAGES)
async def images_by_name(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any] | None:
    return index_image(body)


@kopf.on.event(GROUP, VERSION, JOBS)
async def job_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    runtime_of(memo).wake(namespace or "", label_value(name))


@kopf.daemon(GROUP, VERSION, JOBS, cancellation_backoff=5.0, cancellation_timeout=5.0)
async def reconcile_job(
    body: kopf.Body,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    # kopf passes each index as a keyword argument named after its handler.
    images: ImagesIndex = kwargs["images_by_name"]
    runtime = runtime_of(memo)

    def post_warning(reason: str, message: str) -> None:
        kopf.warn(body, reason=reason, message=message)

    reconciler = JobReconciler(
        runtime,
        body,
        trials=runtime.trials,
        pods=runtime.pods,
        images=images,
        post_warning=post_warning,
    )
    await reconciler.run(stopped)


@kopf.on.event(GROUP, VERSION, IMAGES)
async def image_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    runtime_of(memo).wake_image_waiters(namespace or "", name)


def _building(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") not in FINISHED_IMAGE


@kopf.daemon(
    GROUP,
    VERSION,
    IMAGES,
    when=_building,
    cancellation_backoff=5.0,
    cancellation_timeout=5.0,
)
async def build_image(
    body: kopf.Body, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    def post_warning(reason: str, message: str) -> None:
        kopf.warn(body, reason=reason, message=message)

    await ImageReconciler(runtime_of(memo), body, post_warning=post_warning).run(stopped)
