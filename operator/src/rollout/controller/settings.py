"""kopf's settings for the operator, chosen in one place (called from the startup handler).

- Our own domain for what kopf stores on RolloutJobs: the finalizer `rollout.dev/finalizer` (the
  job's daemon needs it, so that kopf can stop the daemon before the job goes and nothing is
  created for a job on its way out; kopf puts it on every object a daemon serves; where no
  operator runs any more, `rollout release` takes it off deleted jobs) and, should any
  handler ever need them, progress and diff-base annotations under `rollout.dev/`, never
  kopf.zalando.org. RolloutTrials and Pods get none of these: only indexes, `on.event` handlers
  and the job's daemon touch them, and those store nothing on the objects.
- Trial Pods are listed and watched by label selector (`rollout.dev/trial` present), sent to the
  API server, so the operator never lists every Pod of the cluster; the Pod handlers' own
  `labels=` filter is only client-side, which is why the selector is set here as well.
- Events are posted for warnings and errors only (`posting.level`), not for every handler run.
- Watches ask the server to end after `WATCH_SERVER_TIMEOUT_SEC` and give up on a silent stream
  after `WATCH_CLIENT_TIMEOUT_SEC` (kopf resumes from the last resourceVersion either way), and
  every other request has `REQUEST_TIMEOUT_SEC`. Values already set on the settings (a test's
  faster ones) are kept. kopf sends the server timeout as `timeoutSeconds=<str(value)>` and the
  API server parses that as an integer: `270.0` is refused with 400 (`strconv.ParseInt: parsing
  "270.0": invalid syntax`) and every watch, so the operator, dies at start. It is therefore
  always a whole number of seconds here, whatever it was set to.
- kopf runs one worker per object, and a worker holds one of the `worker_limit` slots of its
  resource's watch until it has been idle for `queueing.idle_timeout` (kopf's default: 5 s).
  Trials and Pods are many, and their handlers only index and wake a job's reconciler, so a
  worker is let go after `IDLE_WORKER_SEC`: with kopf's default, a watch could take on only
  worker_limit / 5 new objects per second (10 per second with the chart's default of 50), and
  its events (and so the index) would fall behind when thousands of trials start or go.
- kopf works out the "essence" of every object on every event it gets (a deep copy of the body
  without its metadata and status: `DiffBaseStorage.build`), to tell whether the object changed
  for a change handler or a daemon. Only RolloutJobs and RolloutImages have daemons and nothing
  has change handlers, so the essence of any other kind (`ESSENTIAL_KINDS`) is left empty
  (`DaemonKindsDiffBase`): trials and their Pods are thousands, a Pod's body is kilobytes (the
  shim, the trial spec), and copying each on each of its events was a fifth of the operator's
  CPU while it started 2,000 trials.
- The worker limit and peering come from the operator's configuration.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import kopf

from rollout.api.resources import FINALIZER, GROUP, LABEL_TRIAL, RolloutImage, RolloutJob
from rollout.controller.config import OperatorConfig

DIFFBASE_KEY = "last-handled-configuration"
WATCH_SERVER_TIMEOUT_SEC = 270
WATCH_CLIENT_TIMEOUT_SEC = 300.0
WATCH_CONNECT_TIMEOUT_SEC = 30.0
REQUEST_TIMEOUT_SEC = 60.0
IDLE_WORKER_SEC = 0.5
TRIAL_POD_SELECTOR = LABEL_TRIAL
"""A label selector: Pods that have the `rollout.dev/trial` label, whatever its value."""
ESSENTIAL_KINDS = frozenset({RolloutJob.resource.kind, RolloutImage.resource.kind})
"""The kinds whose handlers need kopf's diff of an object (daemons, change handlers): a handler
of that sort on another kind must add it here."""


class DaemonKindsDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotations diff base (under our prefix) that works out the essence of the
    `ESSENTIAL_KINDS` only; any other object's is empty (see the module docstring). An object
    that does not say its kind gets the full essence, as before."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[str | tuple[str, ...] | list[str] | None] | None = None,
    ) -> kopf.BodyEssence:
        kind = body.get("kind")
        if kind is None or kind in ESSENTIAL_KINDS:
            return super().build(body=body, extra_fields=extra_fields)
        return kopf.BodyEssence()


def configure_settings(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """Set the operator's kopf settings (see the module docstring)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = DaemonKindsDiffBase(prefix=GROUP, key=DIFFBASE_KEY)
    settings.posting.level = logging.WARNING
    settings.watching.label_selectors["v1", "pods"] = TRIAL_POD_SELECTOR

    settings.watching.server_timeout = whole_seconds(
        settings.watching.server_timeout or WATCH_SERVER_TIMEOUT_SEC
    )
    if settings.watching.client_timeout is None:
        settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT_SEC
    if settings.watching.connect_timeout is None:
        settings.watching.connect_timeout = WATCH_CONNECT_TIMEOUT_SEC
    if settings.networking.connect_timeout is None:
        settings.networking.connect_timeout = WATCH_CONNECT_TIMEOUT_SEC
    request_timeout = settings.networking.request_timeout
    if request_timeout is None or request_timeout > REQUEST_TIMEOUT_SEC:
        settings.networking.request_timeout = REQUEST_TIMEOUT_SEC

    settings.queueing.worker_limit = config.worker_limit
    settings.queueing.idle_timeout = min(settings.queueing.idle_timeout, IDLE_WORKER_SEC)

    if config.peering_name:
        settings.peering.name = config.peering_name
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.clusterwide = config.clusterwide_peering
    else:
        settings.peering.standalone = True
        settings.peering.mandatory = False


def whole_seconds(value: float) -> int:
    """A timeout as the API server's `timeoutSeconds` accepts it: a positive integer, rounded up."""
    return max(1, math.ceil(value))
