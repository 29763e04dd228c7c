"""Loopback networking for the tests' own servers (S3, the control plane, the operator's ports)."""

from __future__ import annotations

import asyncio
import random
import socket
from pathlib import Path

HOST = "127.0.0.1"
LOWEST_PORT = 15000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now, below the kernel's ephemeral
    range where there is room: a port from that range may become some client's own before the
    test's server binds it (the server then fails to start), or a readiness probe's source port
    (a connect that meets itself)."""
    below = _ephemeral_start()
    if below - LOWEST_PORT >= 1000:
        for _ in range(50):
            port = random.randrange(LOWEST_PORT, below)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # unknown: let the kernel choose


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


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
