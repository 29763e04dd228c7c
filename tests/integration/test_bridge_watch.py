"""The bridge's watch of RolloutTrials (`rollout.bridge.watch.TrialWatch`), against the test's
Kubernetes API under the chart's bridge RBAC: the API server sends it only the trials whose
environment is not a Pod (and unlabelled ones, made by an older operator); after its listing the
bridge looks at each unfinished bridge trial; then every change of one reaches it, its deletion
too. The bridge is a recorder here: what it does with a trial is test_bridge.py's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes
import pytest
from bridge_kit import bridge_trial
from prometheus_client import CollectorRegistry

from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_TRIALS
from rollout.bridge.kube import BridgeApi
from rollout.bridge.watch import SELECTOR, TrialWatch
from rollout.controller.metrics import OperatorMetrics

pytestmark = pytest.mark.integration


class Recorder:
    """Stands in for the `Bridge`: what the watch handed it, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bool]] = []
        self.listings: list[list[str]] = []

    def observe(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        self.events.append((body["metadata"]["name"], deleted))

    def resync(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        self.listings.append(sorted(body["metadata"]["name"] for body in bodies))


async def test_the_bridge_is_sent_only_trials_whose_environment_is_not_a_pod(kube: Kube) -> None:
    await kube.apply_chart_rbac()
    await kube.create(ROLLOUT_TRIALS, bridge_trial("docker-waiting", "docker"))
    await kube.create(ROLLOUT_TRIALS, bridge_trial("a-pods", "kubernetes"))
    await kube.create(ROLLOUT_TRIALS, bridge_trial("unlabelled", None))
    await kube.create(ROLLOUT_TRIALS, bridge_trial("docker-done", "docker"))
    await kube.patch_status(ROLLOUT_TRIALS, "docker-done", {"phase": "Succeeded"})

    client = kubernetes.client.ApiClient(kube.client_configuration(Identity.BRIDGE))
    api = BridgeApi(client, metrics=OperatorMetrics(CollectorRegistry()))
    recorder = Recorder()
    watch = TrialWatch(api, [kube.namespace], recorder)
    mark = kube.mark()
    await watch.start()
    try:
        # The listing: the unfinished bridge trials, the unlabelled one decided by its spec.
        assert recorder.listings == [["docker-waiting", "unlabelled"]]
        assert len(watch.index) == 2

        # A Pod trial made now never reaches the bridge; a Modal one made after it does.
        await kube.create(ROLLOUT_TRIALS, bridge_trial("b-pods", "kubernetes"))
        await kube.create(ROLLOUT_TRIALS, bridge_trial("modal", "modal"))
        await kube.wait_for(lambda: ("modal", False) in recorder.events, what="the modal trial")
        claimed = {"metadata": {"annotations": {"rollout.dev/bridge": "elsewhere"}}}
        await kube.patch(ROLLOUT_TRIALS, "docker-waiting", claimed)
        await kube.delete(ROLLOUT_TRIALS, "modal")
        await kube.wait_for(lambda: ("modal", True) in recorder.events, what="the deletion")
        assert recorder.events == [
            ("modal", False),
            ("docker-waiting", False),
            ("modal", True),
        ]
    finally:
        watch.stop()
        api.close()

    # Every listing and watch of trials asked the API server for the bridge's trials only.
    asked = [c for c in kube.calls(since=mark) if c.resource == ROLLOUT_TRIALS]
    assert {c.method for c in asked} == {"GET"}  # a listing, then a watch
    assert {c.params.get("labelSelector") for c in asked} == {SELECTOR}
    assert SELECTOR == "rollout.dev/environment notin (kubernetes,local)"
