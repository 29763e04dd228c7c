"""kopf's settings for the operator, chosen in one place (called from the startup handler).

- Our own domain for what kopf stores on RolloutJobs: the finalizer `rollout.dev/finalizer` (the
  job's daemon needs it, so that kopf can stop the daemon before the job goes and nothing is
  created for a job on its way out; kopf puts it on every object a daemon serves; where no
  operator runs any more, `rollout release` takes it off deleted jobs) and, should any
  handler ever need them, progress and diff-base annotations under `rollout.dev/`, never
  kopf.zalando.org. kopf watches RolloutJobs and RolloutImages only: RolloutTrials and trial
  Pods are the operator's own watches (`watches`), which store nothing on them.
- Events are posted for warnings and errors only (`posting.level`), not for every handler run.
- Watches ask the server to end after `WATCH_SERVER_TIMEOUT_SEC` and give up on a silent stream
  after `WATCH_CLIENT_TIMEOUT_SEC` (kopf resumes from the last resourceVersion either way, and
  so do the operator's own watches), and every other request has `REQUEST_TIMEOUT_SEC`. Values
  already set on the settings (a test's faster ones) are kept. kopf sends the server timeout as
  `timeoutSeconds=<str(value)>` and the API server parses that as an integer: `270.0` is
  refused with 400 (`strconv.ParseInt: parsing "270.0": invalid syntax`) and every watch, so
  the operator, dies at start. It is therefore always a whole number of seconds here, whatever
  it was set to.
- kopf runs one worker per object, and a worker holds one of the `worker_limit` slots of its
  resource's watch until it has been idle for `queueing.idle_timeout` (kopf's default: 5 s); a
  worker is let go after `IDLE_WORKER_SEC`, so that a burst of jobs does not hold the slots.
- The worker limit and peering come from the operator's configuration.
"""

from __future__ import annotations

import logging
import math

import kopf

from rollout.api.resources import FINALIZER, GROUP
from rollout.controller.config import OperatorConfig

DIFFBASE_KEY = "last-handled-configuration"
WATCH_SERVER_TIMEOUT_SEC = 270
WATCH_CLIENT_TIMEOUT_SEC = 300.0
WATCH_CONNECT_TIMEOUT_SEC = 30.0
REQUEST_TIMEOUT_SEC = 60.0
IDLE_WORKER_SEC = 0.5


def configure_settings(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    """Set the operator's kopf settings (see the module docstring)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key=DIFFBASE_KEY
    )
    settings.posting.level = logging.WARNING

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
