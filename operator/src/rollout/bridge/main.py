"""`rollout-bridge`: the bridge controller process.

Reads its settings from flags and ROLLOUT_* variables (`settings.py`), configures logging as
the operator does, serves Prometheus metrics on the metrics port (/metrics, `metrics.py`), and
runs kopf with the bridge's handlers (`handlers.REGISTRY`): cluster-wide
or in the configured namespaces, standalone, with kopf's liveness endpoint on the health port
(/healthz). SIGTERM stops it gracefully: the runs under way are abandoned with their sandboxes
ended, and the next process under the same identity runs those trials again.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

from rollout.api.errors import InvalidInput
from rollout.bridge import handlers
from rollout.bridge.settings import BridgeSettings, add_arguments, from_args
from rollout.controller.logconfig import configure_logging


def parse_settings(argv: Sequence[str] | None = None) -> BridgeSettings:
    parser = argparse.ArgumentParser(
        prog="rollout-bridge",
        description="The bridge controller: runs RolloutTrials whose environment is not a Pod "
        "(a remote Docker engine) in that environment.",
    )
    add_arguments(parser)
    return from_args(parser.parse_args(argv), os.environ)


async def bridge(settings: BridgeSettings) -> None:
    """Run kopf with the bridge's handlers until it is stopped."""
    await kopf.operator(
        registry=handlers.REGISTRY,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        standalone=True,
        identity=cast(Any, settings.identity),  # kopf's Identity: a str NewType
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
        memo=kopf.Memo(settings=settings),
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = parse_settings(argv)
    except InvalidInput as err:
        print("rollout-bridge: invalid configuration:", file=sys.stderr)
        for problem in err.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    start_http_server(settings.metrics_port)
    asyncio.run(bridge(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
