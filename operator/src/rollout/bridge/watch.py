"""The bridge's watch of RolloutTrials: only those whose environment is not a Pod.

The operator labels every RolloutTrial it creates with its environment type
(`rollout.dev/environment`), so the API server sends the bridge only the trials it may run
(`SELECTOR`): a cluster busy with a hundred thousand Pod trials costs the bridge nothing. kopf's
watch, which the bridge had before, took every RolloutTrial of the cluster and kept about
2.7 KB for each. This is the operator's own watch (`controller.watches.Watch`: a paged listing,
then a watch with bookmarks, listed again after a 410); its index keeps the unfinished bridge
trials (a trial's body, which the bridge's queue holds anyway), so that after a listing, first or
again, the bridge looks at each of them (`Bridge.resync`).

A trial without the label (made by an operator from before it) matches the selector too
(`notin` takes a missing label), and `claim.for_bridge` decides from its spec, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout.api.environment import EnvironmentType
from rollout.api.names import LABEL_ENVIRONMENT
from rollout.bridge.claim import FINISHED, for_bridge, phase
from rollout.bridge.controller import Bridge, Key, key_of
from rollout.controller.kubeapi import OURS, TRIALS, KubeApi
from rollout.controller.watches import Index, Watch, start_watches, stop_watches

SELECTOR = "{} notin ({})".format(
    LABEL_ENVIRONMENT,
    ",".join(sorted(kind.value for kind in EnvironmentType if not kind.runs_on_bridge)),
)
"""The RolloutTrials the API server sends the bridge: every one not labelled as a Pod's."""


@dataclass(frozen=True, slots=True)
class Unfinished:
    """An unfinished bridge trial as last seen."""

    namespace: str
    body: Mapping[str, Any]


UnfinishedIndex = Index[Key, Unfinished]


def unfinished(body: Mapping[str, Any]) -> dict[Key, Unfinished] | None:
    if not for_bridge(body) or phase(body) in FINISHED:
        return None
    key = key_of(body)
    return {key: Unfinished(key[0], body)}


class TrialWatch:
    """The watches of the bridge's trials in each namespace (none: the whole cluster), one
    index for all; every event of a bridge trial goes to `bridge.observe`."""

    def __init__(self, api: KubeApi, namespaces: Sequence[str], bridge: Bridge) -> None:
        self.bridge = bridge
        self.index: UnfinishedIndex = Index(unfinished)
        every: Sequence[str | None] = list(namespaces) or [None]
        self.watches = [
            Watch(
                api,
                api_path=OURS,
                plural=TRIALS,
                namespace=namespace,
                index=self.index,
                handler=self._changed,
                on_relist=self._listed,
                label_selector=SELECTOR,
            )
            for namespace in every
        ]

    async def start(self) -> None:
        """List every watched namespace, have the bridge look at what was listed, then watch;
        if a listing fails, nothing is watched (kopf retries the startup handler)."""
        await start_watches(self.watches)
        self._listed()

    def stop(self) -> None:
        stop_watches(self.watches)

    def _changed(self, kind: str, body: Mapping[str, Any]) -> None:
        if for_bridge(body):
            self.bridge.observe(body, deleted=kind == "DELETED")

    def _listed(self) -> None:
        self.bridge.resync(entry.body for entry in self.index.values())
