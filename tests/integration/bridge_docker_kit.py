"""The test engine (`engine_kit`) as the bridge's docker provider reaches an engine: over TCP.

The provider takes only remote addresses (tcp://, ssh://), and the test engine is usually
Podman's API service on a unix socket: `UnixForwarder` listens on a loopback port and relays
each connection to the socket, byte for byte (the Engine API's hijacked exec streams included).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_kit import EngineUnderTest


class UnixForwarder:
    """Relays connections to a loopback TCP port to a unix socket, until closed."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            upstream = socket.socket(socket.AF_UNIX)
            try:
                upstream.connect(str(self.socket_path))
            except OSError:
                client.close()
                upstream.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()
        with self._lock:
            for end in self._open:
                end.close()
            self._open.clear()


@contextlib.contextmanager
def tcp_address(engine: EngineUnderTest) -> Iterator[str]:
    """A tcp:// address of the test engine: its own, or a forwarder's to its unix socket."""
    host = engine.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("tcp://"):
        yield host
        return
    if not host.startswith("unix://"):
        pytest.skip(f"the test engine at {host} is reachable neither over tcp nor a unix socket")
    forwarder = UnixForwarder(Path(host.removeprefix("unix://")))
    try:
        yield forwarder.address
    finally:
        forwarder.close()
