"""Faults on demand for the fault tests: an object store that becomes unreachable.

`Outage` is a TCP proxy on loopback in front of the session's S3 server (moto). Clients are
given the proxy's address as the storage endpoint. `down()` makes the endpoint unreachable as an
object store's Pod that is gone makes it: the proxy stops listening, so new connections are
refused at once (ECONNREFUSED), and the connections it carried are reset, so requests in flight
fail. `up()` listens again on the same port. moto keeps running behind it, so every object is
still there afterwards, which a restarted moto (in-memory state) could not promise.

Why not SIGSTOP the server: its port would keep accepting connections into the kernel's
backlog, and each request would wait for its answer until the server came back (botocore's read
timeout is 60 s): an endpoint that hangs, not one that is unreachable, and no retry would run.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from types import TracebackType

from loopback import HOST, free_port


class Outage:
    """A TCP proxy to `HOST:target_port` on a port of its own, which can go down and come back."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.connections = 0
        """Connections it accepted (and forwarded) while up."""
        self.reset = 0
        """Connections it cut when it went down."""
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def is_down(self) -> bool:
        return self._server is None

    async def up(self) -> None:
        """Listen (again) on the proxy's port."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._forward, HOST, self.port, reuse_address=True
            )

    async def down(self) -> None:
        """Refuse new connections and reset the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        for writer in list(self._open):
            _reset(writer)
            self.reset += 1
        self._open.clear()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            _reset(writer)
            return
        pair = {writer, upstream_writer}
        self._open |= pair
        try:
            await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))
        finally:
            self._open -= pair
            for end in pair:
                end.close()

    async def __aenter__(self) -> Outage:
        await self.up()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.down()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a peer that vanished does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
