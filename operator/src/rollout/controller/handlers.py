"""The operator's kopf handlers: thin registration, the work is elsewhere.

- startup: settings (`settings.configure_settings`) and the shared `Runtime` in the memo;
- indexes of RolloutTrials (by job) and trial Pods (by trial), which kopf fills from its initial
  listings before any other handler runs (`index.py`);
- `on.event` handlers for RolloutJobs, RolloutTrials and trial Pods: they only wake the job's
  reconciler (and note deleted Pods). `on.event` stores nothing on the objects: no annotations,
  no finalizers, so trials and Pods cost no extra API writes;
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
    LABEL_TRIAL,
    VERSION,
    ImagePhase,
    RolloutImage,
    RolloutJob,
    RolloutTrial,
)
from rollout.api.trials import label_value
from rollout.controller.config import OperatorConfig
from rollout.controller.images import ImageReconciler
from rollout.controller.index import (
    PodEntry,
    TrialEntry,
    index_image,
    index_pod,
    index_trial,
    pod_trial_name,
)
from rollout.controller.jobs import ImagesIndex, JobReconciler, PodsIndex, TrialsIndex
from rollout.controller.kubeapi import KubeApi, default_api_client
from rollout.controller.metrics import OperatorMetrics, default_metrics
from rollout.controller.registry import DockerConfig
from rollout.controller.runtime import Runtime
from rollout.controller.settings import configure_settings

JOBS = RolloutJob.resource.plural
TRIALS = RolloutTrial.resource.plural
IMAGES = RolloutImage.resource.plural
FINISHED_IMAGE = (ImagePhase.READY.value, ImagePhase.FAILED.value)
TRIAL_PODS = {LABEL_TRIAL: kopf.PRESENT}

log = logging.getLogger(__name__)


def runtime_of(memo: Any) -> Runtime:
    runtime: Runtime = memo.runtime
    return runtime


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: OperatorConfig = getattr(memo, "config", None) or OperatorConfig.from_env()
    configure_settings(settings, config)
    metrics: OperatorMetrics = getattr(memo, "metrics", None) or default_metrics()
    api_client = getattr(memo, "api_client", None) or default_api_client()
    memo.runtime = Runtime(
        config,
        api=KubeApi(api_client, metrics=metrics),
        metrics=metrics,
        registry_config=_registry_config(config.image_registry_config),
    )
    log.info(
        "rollout-operator watching %s, peering %s",
        ", ".join(config.namespaces) or "the whole cluster",
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


@kopf.index(GROUP, VERSION, TRIALS)
async def trials_by_job(body: kopf.Body, **_: Any) -> dict[str, TrialEntry] | None:
    return index_trial(body)


@kopf.index("v1", "pods", labels=TRIAL_PODS)
async def trial_pods(body: kopf.Body, **_: Any) -> dict[tuple[str, str], PodEntry] | None:
    return index_pod(body)


@kopf.index(GROUP, VERSION, IMAGES)
async def images_by_name(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any] | None:
    return index_image(body)


@kopf.on.event(GROUP, VERSION, JOBS)
async def job_changed(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    runtime_of(memo).wake(namespace or "", label_value(name))


@kopf.on.event(GROUP, VERSION, TRIALS)
async def trial_changed(name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    runtime_of(memo).wake_for(body, name)


@kopf.on.event("v1", "pods", labels=TRIAL_PODS)
async def trial_pod_changed(
    event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    runtime = runtime_of(memo)
    if event.get("type") == "DELETED":
        runtime.note_pod_deleted(body)
    runtime.wake_for(body, pod_trial_name(body))


@kopf.daemon(GROUP, VERSION, JOBS, cancellation_backoff=5.0, cancellation_timeout=5.0)
async def reconcile_job(
    body: kopf.Body,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    **kwargs: Any,
) -> None:
    # kopf passes each index as a keyword argument named after its handler.
    trials: TrialsIndex = kwargs["trials_by_job"]
    pods: PodsIndex = kwargs["trial_pods"]
    images: ImagesIndex = kwargs["images_by_name"]

    def post_warning(reason: str, message: str) -> None:
        kopf.warn(body, reason=reason, message=message)

    reconciler = JobReconciler(
        runtime_of(memo),
        body,
        trials=trials,
        pods=pods,
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
