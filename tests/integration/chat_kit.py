"""An OpenAI-compatible chat-completions server on loopback for the model agent's and the judge's
tests: it records every request and plays the replies queued, in order, then the last one again.

A reply may hold back its answer (`delay_sec`) to play a slow server (`json_server`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from json_server import JsonServer, Reply, Request

__all__ = ["API_KEY", "ChatServer", "Reply", "chat_server", "completion", "tool_call", "usage"]

API_KEY = "sk-model-test-key-8d2e41a7-never-print-me"


class ChatServer:
    """Plays the replies queued (`queue`), in order, then the last one again."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self._lock = threading.Lock()
        self.server = JsonServer(self._respond)
        self.base_url = f"{self.server.url}/v1"

    @property
    def seen(self) -> list[Request]:
        return self.server.seen

    def _respond(self, request: Request) -> Reply:
        with self._lock:
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)


@contextmanager
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    server.server.start()
    try:
        yield server
    finally:
        server.server.close()


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
