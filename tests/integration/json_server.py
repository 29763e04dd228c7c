"""An HTTP server on loopback that answers JSON POSTs, for the tests that stand in for a user's
service: an agent endpoint (seed 003), an OpenAI-compatible model or judge.

Each request is recorded (`Request`: its path, headers, parsed body) and answered by the test's
function of it (`Reply`). A reply may hold back its answer (`delay_sec`) to play a slow server;
`JsonServer.close()` releases every held-back reply at once, so a test never waits for one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loopback import HOST


@dataclass(frozen=True)
class Request:
    path: str
    headers: Message
    """As received; looked up without regard to case (`headers["authorization"]`)."""
    body: Any


@dataclass
class Reply:
    status: int = 200
    body: Any = b""
    """Bytes are sent as they are; anything else as its JSON."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_sec: float = 0.0


class JsonServer:
    """Records every request in `seen` and answers it with `respond(request)`."""

    def __init__(self, respond: Callable[[Request], Reply]) -> None:
        self.seen: list[Request] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = Request(self.path, self.headers, json.loads(raw) if raw else None)
                with server._lock:
                    server.seen.append(request)
                reply = respond(request)
                if reply.delay_sec and server._closing.wait(reply.delay_sec):
                    return
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body)
                data = data if isinstance(data, bytes) else data.encode()
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.httpd = ThreadingHTTPServer((HOST, 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{HOST}:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def requests_to(self, path: str) -> list[Request]:
        return [request for request in self.seen if request.path == path]

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)


@contextmanager
def json_server(respond: Callable[[Request], Reply]) -> Iterator[JsonServer]:
    server = JsonServer(respond)
    server.start()
    try:
        yield server
    finally:
        server.close()
