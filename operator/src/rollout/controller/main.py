"""`rollout-operator`: the operator process.

Reads its configuration from flags and ROLLOUT_* variables (`config.py`), configures logging,
serves Prometheus metrics on the metrics port (/metrics) and kopf's liveness endpoint on the
health port (/healthz), and runs kopf: cluster-wide or in the configured namespaces, with peering
unless ROLLOUT_PEERING is empty. SIGTERM stops it gracefully (kopf handles the signal).

Its identity among peers is given to kopf (`operator_identity`): the Pod's name (POD_NAME, from
the downward API in the chart), else the host name and process id. kopf would otherwise ask
`getpass.getuser()`, which fails where the process's uid has no passwd entry (images without a
user, OpenShift's arbitrary uids) and would stop the operator at start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any, cast

import kopf
from prometheus_client import start_http_server

from rollout.api.errors import InvalidInput
from rollout.controller import handlers, logconfig
from rollout.controller.config import OperatorConfig, add_arguments, from_args

ENV_POD_NAME = "POD_NAME"


def parse_config(argv: Sequence[str] | None = None) -> OperatorConfig:
    parser = argparse.ArgumentParser(
        prog="rollout-operator",
        description="The Kubernetes operator that runs RolloutJobs (agent evaluations).",
    )
    add_arguments(parser)
    return from_args(parser.parse_args(argv))


def configure_logging(config: OperatorConfig) -> None:
    logconfig.configure_logging(config.log_level)


def operator_identity(environ: Mapping[str, str] | None = None) -> str:
    """Who this operator is among its peers: its Pod's name, else `<host name>/<pid>`."""
    environ = os.environ if environ is None else environ
    pod = environ.get(ENV_POD_NAME, "").strip()
    return pod or f"{socket.gethostname()}/{os.getpid()}"


async def operate(config: OperatorConfig) -> None:
    """Run kopf with the operator's handlers until it is stopped."""
    assert handlers.reconcile_job is not None  # importing `handlers` registered them
    await kopf.operator(
        clusterwide=config.clusterwide,
        namespaces=config.namespaces,
        standalone=not config.peering_name,
        peering_name=config.peering_name,
        identity=cast(
            Any, operator_identity()
        ),  # kopf's Identity: a str NewType it does not export
        liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
        memo=kopf.Memo(config=config),
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except InvalidInput as err:
        print("rollout-operator: invalid configuration:", file=sys.stderr)
        for problem in err.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    configure_logging(config)
    start_http_server(config.metrics_port)
    asyncio.run(operate(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
