"""An OpenAI-compatible chat-completions server on loopback for the model agent's tests: it
records every request and plays the replies queued, in order, then the last one again.

A reply may hold back its answer (`delay_sec`) to play a slow server; `ChatServer.close()`
releases every held-back reply at once, so a test never waits for it."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from loopback import HOST

API_KEY = "sk-model-test-key-8d2e41a7-never-print-me"


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_sec: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ChatServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    server.seen.append(Seen(self.path, dict(self.headers), body))
                    reply = server.replies.pop(0) if len(server.replies) > 1 else server.replies[0]
                if reply.delay_sec and server._closing.wait(reply.delay_sec):
                    return
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.httpd = ThreadingHTTPServer((HOST, 0), Handler)
        self.base_url = f"http://{HOST}:{self.httpd.server_address[1]}/v1"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def close(self) -> None:
        self._closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    thread = threading.Thread(
        target=server.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.close()
        thread.join(timeout=10)


def completion(
    content: str | None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
) -> Reply:
    """A chat completion with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return Reply(body=json.dumps(body).encode())


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def usage(prompt: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }
