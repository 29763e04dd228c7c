"""`Bridge.resync`, what the bridge does after its watch listed the trials (at its start, or
again after it missed events): a trial waiting for a slot that the listing no longer has was
deleted, finished or claimed meanwhile, and waits no more; a listed one is looked at again."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import kubernetes
from prometheus_client import CollectorRegistry

from rollout.bridge.controller import Bridge
from rollout.bridge.kube import BridgeApi
from rollout.bridge.metrics import BridgeMetrics
from rollout.bridge.providers.registry import Providers
from rollout.bridge.settings import BridgeSettings
from rollout.controller.metrics import OperatorMetrics

SLOT = "docker tcp://127.0.0.1:2375"


def trial(name: str, claimed_by: str | None = None) -> dict[str, Any]:
    annotations = {"rollout.dev/bridge": claimed_by} if claimed_by else {}
    return {
        "metadata": {"namespace": "ns", "name": name, "annotations": annotations},
        "spec": {"environmentType": "docker", "dockerHost": "tcp://127.0.0.1:2375"},
    }


def test_waiting_trials_the_listing_no_longer_has_wait_no_more() -> None:
    registry = CollectorRegistry()
    metrics = BridgeMetrics(registry)
    api = BridgeApi(
        kubernetes.client.ApiClient(kubernetes.client.Configuration()),
        metrics=OperatorMetrics(CollectorRegistry()),
    )
    bridge = Bridge(BridgeSettings(identity="me"), api, Providers({}), metrics=metrics)
    try:
        bridge.waiting[SLOT] = OrderedDict(
            {("ns", "deleted"): trial("deleted"), ("ns", "taken"): trial("taken")}
        )
        metrics.waiting.labels("docker").set(2)  # as counted when they came
        # Listed again: "taken", now another bridge's; "deleted" is not in the listing.
        bridge.resync([trial("taken", claimed_by="another-bridge")])
        assert bridge.waiting[SLOT] == OrderedDict()
        assert bridge.runs == {}  # neither was started
        waiting = registry.get_sample_value("rollout_bridge_waiting_trials", {"provider": "docker"})
        assert waiting == 0
    finally:
        api.close()
