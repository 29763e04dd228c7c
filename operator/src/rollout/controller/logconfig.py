"""Logging of the cluster's processes (the operator, the bridge): one format, quiet libraries."""

from __future__ import annotations

import logging
import sys

from rollout.api.job_settings import LogLevel

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_level: LogLevel) -> None:
    level = getattr(logging, log_level.value.upper(), logging.INFO)
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr, force=True)
    # kopf logs every handler call on every object at INFO ("Handler 'x' succeeded."): once per
    # event of every trial and Pod. Those only when asked for debug; kopf's own news stays.
    logging.getLogger("kopf").setLevel(level)
    per_object = logging.NOTSET if level <= logging.DEBUG else max(level, logging.WARNING)
    logging.getLogger("kopf.objects").setLevel(per_object)
    logging.getLogger("aiohttp.access").setLevel(max(level, logging.WARNING))  # /healthz probes
    logging.getLogger("botocore").setLevel(max(level, logging.WARNING))
    logging.getLogger("urllib3").setLevel(max(level, logging.WARNING))
