"""The operator's own watches of RolloutTrials and trial Pods, and the indexes they keep.

kopf watches RolloutJobs and RolloutImages (their daemons are kopf's); trials and their Pods,
a hundred thousand of them in a big job, are watched here instead. kopf keeps a memory of its own
for every object it watches (about 2.7 KB each: a copy of the memo, a throttler, daemon and index
state), more than the index's own entries; these watches keep only the entries
(`index.trial_entry`, `index.index_pod`), so that 100,000 live trials fit in a few hundred MiB.

Each `Watch` is client-go's reflector, for one resource in one namespace (or the whole cluster):

- it lists the objects in pages (`limit`, `continue`) and keeps them, then watches from the
  list's resourceVersion with bookmarks, picking up where it left off when the server ends the
  watch (`timeoutSeconds`) or the connection breaks (after a pause that grows while failures
  repeat, up to `MAX_BACKOFF_SEC`);
- when the server no longer has that resourceVersion (410 Gone: etcd compacted it) it lists
  again: the listing replaces the index, and `on_relist` has every job's reconciler look at all
  its trials (events were missed; the index has what they changed).

The first listing happens at the operator's start, before kopf starts any job's reconciler
(`start`, awaited by kopf's startup handler): a restarted operator sees every trial and Pod that
exists before it decides what to create, as it did with kopf's indexes. The HTTP stream is read
in a thread of its own (the `kubernetes` client is synchronous) and each event is handed to the
event loop, where the index changes and the handler runs: the reconcilers read the index on the
loop only, so they never see it half-changed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from kubernetes.client.exceptions import ApiException
from tenacity import RetryCallState, Retrying, wait_random_exponential

from rollout.api.resources import LABEL_TRIAL
from rollout.controller.index import PodEntry, TrialEntry, index_pod, index_trial
from rollout.controller.kubeapi import CORE, JSON, OURS, TRIALS, KubeApi, namespaced_path
from rollout.controller.settings import (
    WATCH_CLIENT_TIMEOUT_SEC,
    WATCH_CONNECT_TIMEOUT_SEC,
    WATCH_SERVER_TIMEOUT_SEC,
)

log = logging.getLogger(__name__)

PAGE_SIZE = 500
"""Objects per page of a listing: the API server's memory per request stays small."""
MAX_BACKOFF_SEC = 30.0
RESUME_PAUSE_SEC = 0.1
"""Between a watch the server ended and the next (kopf's `reconnect_backoff` too)."""

K = TypeVar("K")
V = TypeVar("V")

Handler = Callable[[str, Mapping[str, Any]], None]
"""Called on the event loop for every change: the event type (ADDED, MODIFIED, DELETED) and the
object (for DELETED: its last state)."""


class Index(Generic[K, V]):
    """Values of the watched objects under their keys: `get(key, ())` gives a key's values, as
    kopf's indexes do. An object's value and key come from its body (`value_of`: None for an
    object that is not indexed).

    A key with one value keeps it alone, as `(uid, value)`, and a dict by uid only from two on:
    most keys have one (a trial's Pods: its first try's), and 100,000 one-item dicts would cost
    more than the values in them."""

    def __init__(self, value_of: Callable[[Mapping[str, Any]], dict[K, V] | None]) -> None:
        self._value_of = value_of
        self._by_key: dict[K, tuple[str, V] | dict[str, V]] = {}
        self._key_of: dict[str, K] = {}

    def get(self, key: K, default: Iterable[V] = ()) -> Iterable[V]:
        bucket = self._by_key.get(key)
        if bucket is None:
            return default
        return (bucket[1],) if isinstance(bucket, tuple) else bucket.values()

    def __len__(self) -> int:
        return len(self._key_of)

    def put(self, body: Mapping[str, Any]) -> None:
        uid = _uid(body)
        indexed = self._value_of(body)
        self.remove(uid)
        if indexed:
            ((key, value),) = indexed.items()
            self._add(key, uid, value)

    def _add(self, key: K, uid: str, value: V) -> None:
        bucket = self._by_key.get(key)
        if bucket is None:
            self._by_key[key] = (uid, value)
        elif isinstance(bucket, tuple):
            self._by_key[key] = {bucket[0]: bucket[1], uid: value}
        else:
            bucket[uid] = value
        self._key_of[uid] = key

    def fresh(self) -> Index[K, V]:
        """An empty index that computes its values as this one does."""
        return Index(self._value_of)

    def adopt(self, other: Index[K, V], namespace: str | None) -> None:
        """Take `other`'s content, a new listing of `namespace` (None: of the whole cluster),
        in place of what this one has there (one index serves the watches of every watched
        namespace; a value says its namespace)."""
        if namespace is None:
            self._by_key, self._key_of = other._by_key, other._key_of
            return
        for uid, value in list(self._items()):
            if getattr(value, "namespace", None) == namespace:
                self.remove(uid)
        for uid, value in other._items():
            self._add(other._key_of[uid], uid, value)

    def _items(self) -> Iterator[tuple[str, V]]:
        for bucket in self._by_key.values():
            yield from (bucket,) if isinstance(bucket, tuple) else bucket.items()

    def values(self) -> list[V]:
        """Every value, under every key (a list: the index may change while it is used)."""
        return [value for _, value in self._items()]

    def remove(self, uid: str) -> None:
        key = self._key_of.pop(uid, None)
        if key is None:
            return
        bucket = self._by_key[key]
        if isinstance(bucket, tuple):
            del self._by_key[key]
            return
        bucket.pop(uid, None)
        if len(bucket) == 1:
            self._by_key[key] = next(iter(bucket.items()))


TrialsIndex = Index[str, TrialEntry]
"""Trials by the uid of their RolloutJob."""
PodsIndex = Index[tuple[str, str], PodEntry]
"""Trial Pods by (namespace, trial name)."""


def trials_index() -> TrialsIndex:
    return Index(index_trial)


def pods_index() -> PodsIndex:
    return Index(index_pod)


def _uid(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


class Gone(Exception):
    """The server no longer has the resourceVersion the watch asked for (410): list again."""


class Watch:
    """One resource in one namespace (None: the whole cluster), listed, then watched; every
    change goes into `index` and to `handler`, on `loop` (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        api_path: str,
        plural: str,
        namespace: str | None,
        index: Index[Any, Any],
        handler: Handler,
        on_relist: Callable[[], None],
        label_selector: str | None = None,
        server_timeout: int = WATCH_SERVER_TIMEOUT_SEC,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.server_timeout = server_timeout
        """Seconds the server keeps one watch open (`timeoutSeconds`: an integer, "270.0" is a
        400); the client gives up on a silent stream `WATCH_CLIENT_TIMEOUT_SEC` after that."""
        self.collection = (
            namespaced_path(api_path, namespace, plural) if namespace else f"{api_path}/{plural}"
        )
        self.index = index
        self.handler = handler
        self.on_relist = on_relist
        self.label_selector = label_selector
        self.where = f"{plural} in {namespace}" if namespace else f"{plural} cluster-wide"
        self._stopped = threading.Event()
        self._stream: Any = None  # the open watch's HTTP response
        self._version = ""
        self._relist = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- on the event loop

    async def start(self) -> None:
        """List (the first time, before anything reads the index), then watch in a thread."""
        self._loop = asyncio.get_running_loop()
        listed, version = await self._loop.run_in_executor(None, self._list)
        self.index.adopt(listed, self.namespace)
        threading.Thread(
            target=self._run, args=(version,), name=f"rollout-watch-{self.where}", daemon=True
        ).start()
        log.debug("%s: %d listed, watching", self.where, len(listed))

    def stop(self) -> None:
        """Stop watching: the open watch's connection is shut (where urllib3 can, 2.3 and
        newer), else the thread ends with the next event, bookmark or the watch's end."""
        self._stopped.set()
        stream = self._stream
        shutdown = getattr(stream, "shutdown", None)
        if callable(shutdown):
            try:
                shutdown()
            except Exception as err:  # it is going anyway
                log.debug("%s: shutting the watch's connection: %r", self.where, err)

    def _ended(self) -> bool:
        """Stopped, or the event loop is gone (the operator ended without stopping it)."""
        loop = self._loop
        return self._stopped.is_set() or loop is None or loop.is_closed()

    def _apply(self, kind: str, body: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self.index.remove(_uid(body))
        else:
            self.index.put(body)
        try:
            self.handler(kind, body)
        except Exception:  # a handler's bug must not stop the watch
            log.exception("%s: handling a %s event failed", self.where, kind)

    def _replace(self, listed: Index[Any, Any]) -> None:
        """A new listing replaces what the index had: events were missed (`on_relist`); what
        they changed is in the index now."""
        self.index.adopt(listed, self.namespace)
        self.on_relist()

    def _hand_over(self, action: Callable[..., None], *args: Any) -> bool:
        """Run `action` on the event loop; False once the loop is gone (the operator ended)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        try:
            loop.call_soon_threadsafe(action, *args)
        except RuntimeError:  # closed in between
            return False
        return True

    # --- in the watch's thread

    def _run(self, version: str) -> None:
        self._version = version
        while not self._ended():
            # Failures are retried with a pause that grows while they repeat; a session that
            # went through starts the count again.
            retrying = Retrying(
                wait=wait_random_exponential(multiplier=0.5, max=MAX_BACKOFF_SEC),
                stop=lambda _: self._ended(),
                sleep=self._pause,
                before_sleep=self._log_failure,
                reraise=True,
            )
            try:
                if not retrying(self._session):
                    return  # the event loop is gone: the operator ended
            except Exception:  # stopped while failing
                return
            self._pause(RESUME_PAUSE_SEC)  # a server that ends every watch at once: no spin

    def _session(self) -> bool:
        """Watch until the server ends the watch, or list again after a 410; False once the
        event loop is gone."""
        if self._relist:
            listed, self._version = self._list()
            self._relist = False
            return self._hand_over(self._replace, listed)
        try:
            for kind, body in self._events(self._version):
                self._version = _version(body) or self._version
                if kind != "BOOKMARK" and not self._hand_over(self._apply, kind, body):
                    return False
        except Gone:
            log.info("%s: resourceVersion %s is gone; listing again", self.where, self._version)
            self._relist = True
        return True

    def _pause(self, seconds: float) -> None:
        self._stopped.wait(seconds)  # a stop ends the pause

    def _log_failure(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s: watch failed (%r); again in %.1f s", self.where, error, state.upcoming_sleep
        )

    def _list(self) -> tuple[Index[Any, Any], str]:
        """The objects, listed page by page into a new index (a page's bodies are dropped once
        indexed: 100,000 Pods are never in memory at once), and the listing's
        resourceVersion."""
        into = self.index.fresh()
        token = ""
        while True:
            params: list[tuple[str, Any]] = [("limit", PAGE_SIZE)]
            if self.label_selector:
                params.append(("labelSelector", self.label_selector))
            if token:
                params.append(("continue", token))
            try:
                page = self.api.read(self.collection, params)
            except ApiException as err:
                if err.status == 410 and token:  # the listing's snapshot expired: start over
                    into, token = self.index.fresh(), ""
                    continue
                raise
            for body in page.get("items") or []:
                into.put(body)
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                return into, str(metadata.get("resourceVersion") or "")

    def _events(self, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """The watch's events from `version` until the server ends it."""
        params: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", self.server_timeout),
        ]
        if version:
            params.append(("resourceVersion", version))
        if self.label_selector:
            params.append(("labelSelector", self.label_selector))
        read_timeout = self.server_timeout + WATCH_CLIENT_TIMEOUT_SEC - WATCH_SERVER_TIMEOUT_SEC
        response = self.api.open(
            "GET", self.collection, None, JSON, params, (WATCH_CONNECT_TIMEOUT_SEC, read_timeout)
        )
        stream = self._stream = response.response
        try:
            if self._ended():  # stopped before `stop` could see this stream to shut it
                return
            if response.status == 410:
                raise Gone()
            if not 200 <= response.status <= 299:
                text = stream.read()[:500].decode("utf-8", "replace")
                raise ApiException(status=response.status, reason=text)
            for line in _lines(_chunks(stream)):
                if self._ended():
                    return
                event = json.loads(line)
                kind = str(event.get("type") or "")
                body = event.get("object") or {}
                if kind == "ERROR":
                    if body.get("code") == 410:
                        raise Gone()
                    raise ApiException(status=body.get("code"), reason=body.get("message"))
                yield kind, body
        finally:
            self._stream = None
            # Closed, not reused: a connection `stop` shut, or one a watch ended in the middle
            # of an event, would hand the next request of the pool a dead or garbled stream.
            stream.close()
            stream.release_conn()


def _chunks(stream: Any) -> Iterator[bytes]:
    """The bytes of a response as they arrive: chunk by chunk (the API server's watches are
    chunked), else whatever a read finds (`read1`, urllib3 2)."""
    read1 = getattr(stream, "read1", None)
    if getattr(stream, "chunked", False) or read1 is None:
        yield from stream.stream(64 * 1024)
        return
    while data := read1(64 * 1024):
        yield data


def _lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Newline-delimited JSON from a stream of chunks that split lines anywhere."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *whole, rest = rest.split(b"\n")
        for line in whole:
            if line.strip():
                yield line
    if rest.strip():
        yield rest


def trial_watches(
    api: KubeApi,
    namespaces: Sequence[str],
    *,
    trials: TrialsIndex,
    pods: PodsIndex,
    on_trial: Handler,
    on_pod: Handler,
    on_relist: Callable[[], None],
) -> list[Watch]:
    """The watches of RolloutTrials and trial Pods (those labelled `rollout.dev/trial`), in each
    namespace (none: the whole cluster)."""
    watches: list[Watch] = []
    every: Sequence[str | None] = list(namespaces) or [None]
    for namespace in every:
        watches.append(
            Watch(
                api,
                api_path=OURS,
                plural=TRIALS,
                namespace=namespace,
                index=trials,
                handler=on_trial,
                on_relist=on_relist,
            )
        )
        watches.append(
            Watch(
                api,
                api_path=CORE,
                plural="pods",
                namespace=namespace,
                index=pods,
                handler=on_pod,
                on_relist=on_relist,
                label_selector=LABEL_TRIAL,
            )
        )
    return watches


async def start_watches(watches: Sequence[Watch]) -> None:
    """List every watched resource (all at once), then watch them; if one cannot be listed,
    none goes on (kopf retries the startup handler, which makes them anew)."""
    try:
        await asyncio.gather(*(watch.start() for watch in watches))
    except BaseException:
        stop_watches(watches)  # a watch whose listing ends later finds itself stopped
        raise


def stop_watches(watches: Sequence[Watch]) -> None:
    for watch in watches:
        watch.stop()
