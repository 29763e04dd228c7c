"""The Kubernetes API's own ceiling for what the operator does per trial: a plain client creates
RolloutTrial + Pod pairs, with no operator, no watch and no decisions.

Run by `operator_throughput.py` (as a process of its own, like the operator) with KUBECONFIG set
and a JSON file of what to create:

    {"namespace": "...", "pairs": 2000, "concurrency": 16, "ordered": true,
     "trial": {...}, "pod": {...}}      # templates: a trial and its Pod as the operator made them

It uses the operator's own API client (`rollout.controller.kubeapi.KubeApi`: the same
`kubernetes` connection pool and credentials, the same raw JSON requests) at the operator's
concurrency (`jobexec.at_most`, `TRIAL_WRITERS` pairs at a time, each a trial then its Pod), and
prints one JSON line: {"pairs": n, "seconds": s, "cpu_seconds": c}. `ordered`: the trials are
created as the operator creates one job's, one request after the other in the order asked for
(`KubeApi.create_trial`, one lane), their Pods at once; else the trials go at once too.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))

from operator_bench_parts import ceiling_pair

from rollout.controller.jobexec import at_most
from rollout.controller.kubeapi import OURS, TRIALS, KubeApi, default_api_client, namespaced_path
from rollout.controller.metrics import OperatorMetrics


async def create_pairs(order: dict[str, Any]) -> dict[str, float]:
    namespace = str(order["namespace"])
    api_client = default_api_client()
    api = KubeApi(api_client, metrics=OperatorMetrics(CollectorRegistry()))

    ordered = bool(order.get("ordered", True))
    trials = namespaced_path(OURS, namespace, TRIALS)

    async def one(index: int) -> None:
        pair = ceiling_pair(order["trial"], order["pod"], index)
        if ordered:
            trial, _created = await api.create_trial(namespace, pair.trial)
        else:
            trial = await api._request("POST", trials, pair.trial) or {}
        await api.create_pod(namespace, pair.pod(str(trial["metadata"]["uid"])))

    pairs = int(order["pairs"])
    started, cpu = time.monotonic(), time.process_time()
    try:
        first = int(order.get("first", 0))  # names of their own in a second run
        await at_most([partial(one, first + i) for i in range(pairs)], int(order["concurrency"]))
    finally:
        api.close()
        api_client.close()
    return {
        "pairs": pairs,
        "seconds": time.monotonic() - started,
        "cpu_seconds": time.process_time() - cpu,
    }


def main() -> None:
    order = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(asyncio.run(create_pairs(order))))


if __name__ == "__main__":
    main()
