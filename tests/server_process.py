"""A server the tests run as a child process: started, waited for with a deadline, stopped, its
output kept in a log file whose end goes into the error when it does not come up.

Shared by the test servers that are processes (moto's S3 in tests/s3server.py, Debian's
docker-registry in tests/registry_server.py); each says how it is started and how to tell that
it is ready.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class ServerProcess:
    """One server process at a time (`start` again after `stop`, e.g. for an outage)."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        """How errors name it, e.g. "the registry on 127.0.0.1:5000"."""
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(
        self, command: Sequence[str], ready: Callable[[], bool], *, timeout: float, until: str
    ) -> None:
        """Run `command` (output to the log) and return once `ready()`; RuntimeError when it
        exits first, TimeoutError (after stopping it) when it is not ready within `timeout`
        (`until` says what readiness is: "answer", "open")."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                list(command), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._process = process
        deadline = time.monotonic() + timeout
        while not ready():
            if process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {process.returncode}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"{self.name} did not {until} within {timeout} s:\n{self.log_tail()}"
                )
            # Polling interval for the readiness check, not a synchronisation sleep.
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop it (SIGTERM, then SIGKILL after `timeout`); nothing when it is not running."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
