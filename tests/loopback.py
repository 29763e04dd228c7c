"""Loopback networking for the tests' own servers (S3, the control plane, the operator's ports)."""

from __future__ import annotations

import asyncio
import socket

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def healthz_answers(port: int) -> bool:
    """Whether a process's /healthz on `port` answers 200 (kopf's liveness endpoint)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        writer.write(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), timeout=2)
        return b" 200 " in head
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
