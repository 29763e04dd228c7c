"""The kopf operator under test, in a thread and an event loop of its own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import kopf
from kopf._cogs.structs.credentials import Vault

from kubeharness.polling import wait_for


class OperatorCrashed(RuntimeError):
    """The operator under test stopped by itself while the test expected it to run."""


def fast_settings(settings: kopf.OperatorSettings | None = None) -> kopf.OperatorSettings:
    """Settings that make kopf quick in tests, laid over `settings` (or kopf's defaults).

    Only timing changes: watches end after a few seconds (the emulator honours
    `timeoutSeconds`), API errors are retried after short pauses, and the operator runs
    standalone (no peering) unless the caller asks for peering when starting it.
    """
    settings = settings if settings is not None else kopf.OperatorSettings()
    settings.watching.server_timeout = 5
    settings.watching.client_timeout = 10
    settings.watching.connect_timeout = 2
    settings.watching.reconnect_backoff = 0.05
    settings.networking.request_timeout = 10
    settings.networking.connect_timeout = 2
    settings.networking.error_backoffs = [0.05, 0.1, 0.2, 0.5]
    settings.queueing.idle_timeout = 1.0
    settings.queueing.exit_timeout = 1.0
    settings.peering.standalone = True
    settings.process.ultimate_exiting_timeout = None
    return settings


class RunningOperator:
    """A kopf operator running in its own thread and event loop against the loopback API.

    The thread keeps the operator's asyncio tasks apart from the test's loop, which serves the
    API: kopf cancels every task it did not start when it stops, and would otherwise cancel the
    server's connection handlers too. Credentials go straight into kopf's vault, so no login
    handler runs (the operator's own registry is not touched).
    """

    def __init__(
        self,
        connection: kopf.ConnectionInfo,
        *,
        registry: kopf.OperatorRegistry | None,
        settings: kopf.OperatorSettings,
        namespaces: Sequence[str],
        clusterwide: bool,
        standalone: bool | None,
        peering_name: str | None,
        memo: object | None,
    ) -> None:
        self.connection = connection
        self._kwargs: dict[str, Any] = dict(
            registry=registry,
            settings=settings,
            namespaces=() if clusterwide else list(namespaces),
            clusterwide=clusterwide,
            standalone=standalone,
            peering_name=peering_name,
            memo=memo,
        )
        self._ready = threading.Event()
        self._stopping = False  # asked to stop or killed: a dead thread is then no crash
        self._killed = False
        # Made in the operator's loop (see _operate).
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kopf-operator", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._operate())
        except asyncio.CancelledError:
            if not self._killed:
                self.error = OperatorCrashed("the operator was cancelled")
        except BaseException as exc:  # re-raised in the test's thread by check()/stop()
            self.error = exc

    async def _operate(self) -> None:
        # An asyncio.Event, not a threading.Event: kopf would wait for that in an executor
        # thread, and asyncio.run() waits for that thread before it returns.
        stop = self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        vault = Vault({"kube-harness": self.connection})
        existing = asyncio.all_tasks()
        tasks = await kopf.spawn_tasks(
            stop_flag=stop, ready_flag=self._ready, vault=vault, **self._kwargs
        )
        for task in tasks:
            # When the operator ends by itself (a failed startup handler, a crashed watcher),
            # kopf leaves its stop-flag waiter running and then waits 5 s for it: raise the
            # flag as soon as any root task ends, so that it ends at once.
            task.add_done_callback(lambda _: stop.set())
        await kopf.run_tasks(tasks, ignored=existing)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def check(self) -> None:
        """Raise if the operator has stopped without being asked to."""
        if not self._thread.is_alive() and not self._stopping:
            raise OperatorCrashed(f"the operator stopped by itself: {_describe(self.error)}") from (
                self.error
            )

    async def start(self, within: float = 10.0) -> None:
        """Start the thread and wait until kopf says it is ready (startup handlers done)."""
        self._thread.start()
        await wait_for(
            self._ready.is_set, timeout=within, what="operator ready", checks=[self.check]
        )

    async def stop(self, within: float = 10.0) -> None:
        """Stop gracefully, as on SIGTERM: in-flight handlers finish or are cancelled by kopf."""
        self._stopping = True
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        await self._join(within)

    async def kill(self, within: float = 10.0) -> None:
        """Cancel the operator at once: the closest thing to SIGKILL inside one process.

        Handlers are interrupted wherever they are; nothing kopf keeps in memory survives.
        For a real SIGKILL, run the operator as a subprocess with `Kube.write_kubeconfig()`.
        """
        self._stopping = self._killed = True
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        await self._join(within)

    async def _join(self, within: float) -> None:
        await wait_for(lambda: not self._thread.is_alive(), timeout=within, what="operator stop")
        if self.error is not None:
            raise OperatorCrashed(f"the operator failed: {_describe(self.error)}") from self.error


def _describe(error: BaseException | None) -> str:
    """An operator's error, with the handlers' own errors when kopf only says "handlers failed"."""
    if error is None:
        return "no error"
    outcomes = getattr(error, "outcomes", None)  # kopf's ActivityError, e.g. startup handlers
    if isinstance(outcomes, Mapping):
        causes = [f"{handler}: {outcome.exception!r}" for handler, outcome in outcomes.items()
                  if getattr(outcome, "exception", None) is not None]  # fmt: skip
        return f"{error!r} ({'; '.join(causes)})"
    return repr(error)
