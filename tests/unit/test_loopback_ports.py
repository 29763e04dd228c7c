"""The tests' free ports (`loopback.free_port`): outside the kernel's ephemeral range, where a
client's own port or a probe's source port could take them before the server binds."""

from __future__ import annotations

import socket

import pytest

from loopback import EPHEMERAL_RANGE, HOST, LOWEST_PORT, free_port


@pytest.mark.skipif(not EPHEMERAL_RANGE.exists(), reason="no /proc ephemeral range here")
def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    start = int(EPHEMERAL_RANGE.read_text().split()[0])
    if start - LOWEST_PORT < 1000:
        pytest.skip(f"the ephemeral range starts at {start}: no room below it")
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST_PORT <= port < start for port in ports)
    assert len(ports) > 1  # not one port handed out again and again
    for port in ports:
        with socket.create_server((HOST, port)):
            pass
