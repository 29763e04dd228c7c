"""The bridge's kopf handlers, in a registry of their own (`REGISTRY`).

Its own registry, not kopf's default: a process (a test, an embedder) may run the operator and
a bridge side by side, and each must run only its own handlers.

- login: kopf's own login through the kubernetes client (a registry of one's own has none);
- startup: settings (standalone: one bridge identity runs as one Pod, and claims, not peering,
  keep two bridges off one trial), the `Bridge` in the memo, and its watch of RolloutTrials
  (`watch.TrialWatch`: the trials whose environment is not a Pod, selected by the API server,
  each event to `Bridge.observe`). kopf watches nothing here. Like the operator, the bridge
  stores nothing on a trial (no kopf annotations, no finalizers): its only writes are its claim
  and the trial's status;
- cleanup: the watch stopped, then `Bridge.close`, which abandons the runs under way for the next
  process to take.

The memo may bring `settings` (BridgeSettings), `api_client` (a kubernetes ApiClient),
`environ` (the variables providers read), `work_root` (where runs keep their scratch files) and
`metrics` (BridgeMetrics, in a registry of its own where several bridges share a process).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf
from prometheus_client import CollectorRegistry

from rollout.bridge.controller import Bridge
from rollout.bridge.kube import BridgeApi
from rollout.bridge.metrics import BridgeMetrics
from rollout.bridge.providers.registry import Providers
from rollout.bridge.settings import BridgeSettings, from_env
from rollout.bridge.watch import TrialWatch
from rollout.controller.kubeapi import default_api_client
from rollout.controller.metrics import OperatorMetrics

REGISTRY = kopf.OperatorRegistry()

log = logging.getLogger(__name__)


def bridge_of(memo: Any) -> Bridge:
    bridge: Bridge = memo.bridge
    return bridge


@kopf.on.login(registry=REGISTRY)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The credentials of the kubernetes client (in-cluster, else KUBECONFIG): kopf registers
    this for its own default registry only."""
    return kopf.login_via_client(**kwargs)


@kopf.on.startup(registry=REGISTRY)
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: BridgeSettings = memo.get("settings") or from_env()
    settings.peering.standalone = True
    settings.posting.level = logging.WARNING
    api_client = memo.get("api_client") or default_api_client()
    # The operator's metrics object only counts this client's writes: a registry of its own.
    api = BridgeApi(api_client, metrics=OperatorMetrics(CollectorRegistry()))
    environ = memo.get("environ") or dict(os.environ)
    metrics = memo.get("metrics") or BridgeMetrics()
    bridge = Bridge(
        config, api, Providers(environ), work_root=memo.get("work_root"), metrics=metrics
    )
    watch = TrialWatch(api, config.namespaces, bridge)
    try:
        await watch.start()
    except BaseException:  # kopf tries the startup again, with a new client
        api.close()
        raise
    memo.bridge, memo.trial_watch = bridge, watch
    bridge.start_sweeping()
    log.info(
        "bridge %s starts, watching %s (%d unfinished trials)",
        config.identity,
        ", ".join(config.namespaces) or "the whole cluster",
        len(watch.index),
    )


@kopf.on.cleanup(registry=REGISTRY)
async def stop(memo: kopf.Memo, **_: Any) -> None:
    if "trial_watch" in memo:
        memo.trial_watch.stop()
    if "bridge" in memo:
        await bridge_of(memo).close()
        bridge_of(memo).api.close()
