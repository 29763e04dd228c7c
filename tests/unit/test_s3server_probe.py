"""The S3 test server's readiness probe: a loopback connect that met itself is no server.

With nothing listening on a loopback port, a connect whose ephemeral source port happens to be
that port succeeds against itself (TCP's simultaneous open); the probe once took that for the
server and a test's first request was refused (CI, test_storage's auth_s3_server)."""

from __future__ import annotations

import socket

from s3server import is_self_connection


def test_a_socket_connected_to_itself_is_told_apart_from_a_listener() -> None:
    with socket.socket() as lonely:
        lonely.bind(("127.0.0.1", 0))
        lonely.connect(lonely.getsockname())  # nothing listens there: it meets itself
        assert is_self_connection(lonely)

    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname(), timeout=2) as client,
    ):
        assert not is_self_connection(client)
