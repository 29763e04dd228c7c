"""A trial's container is started again when the engine fails at it for a reason of its own
(`rollout.local.engine.create_and_start`, used by local mode and the bridge's Docker provider).

Podman, the engine of the suite's engine tests, does now and then under load: a start answered
with a 500 (its OCI runtime's `write |1: broken pipe`) that the next start does not meet. It
cannot be made to on demand, so the engine here is a server written in the test that answers
the Docker Engine API's create, inspect, start and delete as Docker and Podman do (201 with the
new Id, 204 for a start and a delete, errors as `{"message": ...}`), and fails the starts the
test says."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
import pytest
from tenacity import wait_none

from rollout.local.engine import START_TRIES, create_and_start

pytestmark = pytest.mark.integration

API = "1.41"


class Engine:
    """What the stand-in engine was asked, and how it answers starts: `start_answers`, one per
    start in order (status, message), then 204."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.start_answers: list[tuple[int, str]] = []
        self.create_answer: tuple[int, str] | None = None
        self.containers: dict[str, str] = {}  # id -> name
        self.lock = threading.Lock()


def handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self, status: int, body: Any = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            if data:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def route(self, method: str) -> None:
            url = urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            with engine.lock:
                engine.calls.append((method, "/".join(parts[1:])))
                if parts[0] != f"v{API}":
                    return self.answer(404, {"message": "page not found"})
                if method == "POST" and parts[1:] == ["containers", "create"]:
                    if engine.create_answer is not None:
                        status, message = engine.create_answer
                        return self.answer(status, {"message": message})
                    name = dict(q.split("=", 1) for q in url.query.split("&") if q).get("name")
                    new = f"{len(engine.containers) + 1:064x}"
                    engine.containers[new] = name or new
                    return self.answer(201, {"Id": new, "Warnings": []})
                if len(parts) < 3 or parts[2] not in engine.containers:
                    return self.answer(404, {"message": "no such container"})
                container = parts[2]
                if method == "GET" and parts[3:] == ["json"]:
                    name = engine.containers[container]
                    return self.answer(200, {"Id": container, "Name": f"/{name}"})
                if method == "POST" and parts[3:] == ["start"]:
                    if engine.start_answers:
                        status, message = engine.start_answers.pop(0)
                        return self.answer(status, {"message": message})
                    return self.answer(204)
                if method == "DELETE" and parts[3:] == []:
                    del engine.containers[container]
                    return self.answer(204)
                return self.answer(404, {"message": "page not found"})

        def do_GET(self) -> None:
            self.route("GET")

        def do_POST(self) -> None:
            self.route("POST")

        def do_DELETE(self) -> None:
            self.route("DELETE")

    return Handler


@pytest.fixture
def engine() -> Iterator[tuple[Engine, docker.DockerClient]]:
    state = Engine()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = docker.DockerClient(base_url=f"tcp://127.0.0.1:{server.server_port}", version=API)
    try:
        yield state, client
    finally:
        client.close()
        server.shutdown()
        server.server_close()


REQUEST = {"image": "task:1", "name": "trial-abc123"}
BROKEN_PIPE = "OCI runtime error: passing bulk input to subprocess: write |1: broken pipe"


def test_a_start_the_engine_failed_at_is_tried_again_in_a_new_container(
    engine: tuple[Engine, docker.DockerClient],
) -> None:
    state, client = engine
    state.start_answers = [(500, BROKEN_PIPE)]
    prepared: list[str] = []

    started = create_and_start(client, REQUEST, prepared.append, wait=wait_none())

    assert state.containers == {started: "trial-abc123"}  # the failed one removed
    assert prepared == [f"{1:064x}", started]  # each new container prepared before its start
    assert [method for method, _ in state.calls] == [
        *("POST", "GET", "POST", "DELETE"),  # made, failed, removed
        *("POST", "GET", "POST"),  # made again, started
    ]


def test_the_engines_last_fault_is_raised_after_every_try_and_nothing_is_left(
    engine: tuple[Engine, docker.DockerClient],
) -> None:
    state, client = engine
    state.start_answers = [(500, BROKEN_PIPE)] * START_TRIES

    with pytest.raises(docker.errors.APIError, match="broken pipe"):
        create_and_start(client, REQUEST, wait=wait_none())

    assert state.containers == {}
    assert sum(1 for call in state.calls if call == ("POST", "containers/create")) == START_TRIES


@pytest.mark.parametrize(
    ("status", "message"),
    [(404, "No such image: task:1"), (409, 'the container name "trial-abc123" is in use')],
)
def test_a_refusal_is_not_tried_again(
    engine: tuple[Engine, docker.DockerClient], status: int, message: str
) -> None:
    state, client = engine
    state.create_answer = (status, message)

    with pytest.raises(docker.errors.APIError, match=message.split(":")[0]):
        create_and_start(client, REQUEST, wait=wait_none())

    assert state.calls == [("POST", "containers/create")]
