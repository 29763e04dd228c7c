"""The operator's own watches of trials and trial Pods (`rollout.controller.watches`), as the
operator (the chart's RBAC) against the loopback API: listed, followed, resumed where the server
ended a watch, and listed again when the server no longer has the watch's resourceVersion."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
from operator_kit import (
    job_manifest,
    job_phase,
    make_dataset,
    operator_config,
    operator_memo,
    play_kubelet,
    publish,
)
from prometheus_client import CollectorRegistry
from s3_kit import S3Settings

from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import PODS, ROLLOUT_JOBS
from rollout.controller.kubeapi import CORE, KubeApi
from rollout.controller.metrics import OperatorMetrics
from rollout.controller.watches import PodsIndex, Watch, pods_index
from rollout.storage import ObjectStore

LABEL = "rollout.dev/trial"


def pod(name: str, trial: str | None) -> dict[str, Any]:
    labels = {LABEL: trial} if trial else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


class Seen:
    """What a watch handed over: its events and its new listings."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.relists = 0

    def event(self, kind: str, body: Any) -> None:
        self.events.append((kind, body["metadata"]["name"]))

    def relisted(self) -> None:
        self.relists += 1


@contextlib.contextmanager
def operator_api(kube: Kube) -> Iterator[KubeApi]:
    """The operator's API client for `kube`, as the operator (the chart's RBAC)."""
    client = kubernetes.client.ApiClient(kube.client_configuration(Identity.OPERATOR))
    api = KubeApi(client, metrics=OperatorMetrics(CollectorRegistry()))
    try:
        yield api
    finally:
        api.close()


def trial_pods_watch(kube: Kube, api: KubeApi, index: PodsIndex, seen: Seen) -> Watch:
    return Watch(
        api,
        api_path=CORE,
        plural="pods",
        namespace=kube.namespace,
        index=index,
        handler=seen.event,
        on_relist=seen.relisted,
        label_selector=LABEL,
        server_timeout=1,  # the server ends each watch after a second: it must resume
    )


def trials_in(index: PodsIndex, namespace: str) -> set[str]:
    return {
        entry.trial for t in ("t1", "t2", "t3", "t4") for entry in index.get((namespace, t), ())
    }


async def test_a_watch_lists_then_follows_and_resumes_where_the_server_ended_it(
    kube: Kube,
) -> None:
    await kube.create(PODS, pod("first", "t1"))
    await kube.create(PODS, pod("stranger", None))  # no trial label: not the operator's
    index, seen = pods_index(), Seen()
    with operator_api(kube) as api:
        watch = trial_pods_watch(kube, api, index, seen)
        await watch.start()
        try:
            assert trials_in(index, kube.namespace) == {"t1"}
            assert seen.events == []  # a first listing is no event
            await kube.create(PODS, pod("second", "t2"))
            await kube.wait_for(lambda: trials_in(index, kube.namespace) == {"t1", "t2"})
            await asyncio.sleep(2.5)  # the server ends the watch twice meanwhile
            await kube.create(PODS, pod("third", "t3"))
            await kube.delete(PODS, "second")
            await kube.wait_for(lambda: trials_in(index, kube.namespace) == {"t1", "t3"})
        finally:
            watch.stop()
    assert ("ADDED", "second") in seen.events
    assert ("ADDED", "third") in seen.events
    assert seen.events[-1] == ("DELETED", "second")
    assert seen.relists == 0
    watches = [c for c in kube.calls() if c.is_watch and c.resource == PODS]
    assert len(watches) >= 3
    for call in watches:
        assert call.params["labelSelector"] == LABEL
        assert call.params["timeoutSeconds"] == "1"  # an integer, as the API server parses it
        assert call.params["allowWatchBookmarks"] == "true"
        assert call.params.get("resourceVersion")  # every one resumes from a listing's version


async def test_a_watch_whose_version_was_compacted_away_lists_again(emulated_kube: Kube) -> None:
    """etcd compacts its history (kube-apiserver asks every 5 minutes): a watch that was away
    longer resumes from a version the server no longer has, gets 410 Gone, and lists again;
    what it missed is then in the index, and `on_relist` says events were missed."""
    kube = emulated_kube
    await kube.create(PODS, pod("first", "t1"))
    await kube.create(PODS, pod("second", "t2"))
    index, seen = pods_index(), Seen()
    with operator_api(kube) as api:
        watch = trial_pods_watch(kube, api, index, seen)
        await watch.start()
        try:
            watched = len([c for c in kube.calls() if c.is_watch])
            kube.fail("GET", PODS, status=503, reason="ServiceUnavailable", times=2)
            # The watch ends within a second; its next two tries are refused: it is away.
            await kube.wait_for(
                lambda: len([c for c in kube.calls() if c.is_watch]) >= watched + 2,
                what="two refused watches",
            )
            await kube.delete(PODS, "first")
            await kube.create(PODS, pod("fourth", "t4"))
            await kube.create(PODS, pod("stranger", None))  # the revision moves past the watch's
            kube.emulator.compact()  # type: ignore[attr-defined]
            await kube.wait_for(lambda: seen.relists == 1, what="a new listing")
            assert trials_in(index, kube.namespace) == {"t2", "t4"}
            assert ("DELETED", "first") not in seen.events  # missed: the listing told
            await kube.create(PODS, pod("third", "t3"))  # it watches again, from the listing
            await kube.wait_for(lambda: trials_in(index, kube.namespace) == {"t2", "t3", "t4"})
        finally:
            watch.stop()
    gone = [c for c in kube.calls() if c.is_watch and c.resource == PODS]
    assert len(gone) >= 4


async def test_an_operator_whose_first_listing_is_refused_starts_again_with_one_set_of_watches(
    emulated_kube: Kube, store: ObjectStore, s3_settings: S3Settings, tmp_path: Path
) -> None:
    """A listing refused at start (the API server restarting) fails kopf's startup handler,
    which kopf runs again: the watches that had started stop, and one set goes on."""
    kube = emulated_kube
    dataset = publish(store, make_dataset(tmp_path / "set", ["only"]))
    kube.fail("GET", PODS, status=503, reason="ServiceUnavailable", times=1)
    memo = operator_memo(kube, operator_config(s3_settings))
    async with kube.operator(memo=memo, ready_timeout=30):
        await kube.wait_for(lambda: len(watch_threads()) == 2, what="one set of watches")
        await kube.create(ROLLOUT_JOBS, job_manifest("after", [dataset]))
        await play_kubelet(kube, lambda: job_phase(kube, "after", "Completed"))
    lists = [c for c in kube.calls() if c.resource == PODS and c.method == "GET" and not c.is_watch]
    assert len(lists) >= 2  # refused, then again
    await kube.wait_for(lambda: not watch_threads(), what="the watches to end with the operator")


def watch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rollout-watch-")]
