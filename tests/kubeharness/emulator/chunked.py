"""Answers in pieces, as Go's HTTP server sends a long answer."""

from __future__ import annotations

import asyncio

import aiohttp
import aiohttp.web

CHUNKED_AFTER_BYTES = 2048
"""Go's HTTP server buffers this much of an answer; a longer one (a Pod with its managed fields,
any list) goes out chunked, its head and first piece before the rest."""
CHUNK_PAUSE_SEC = 0.003
"""How long the emulator waits between the first piece of a long answer and the rest: long
enough that a client which hands back a connection without reading the answer to its end
(main's `create_pod` once did) reuses it while the rest is still on its way, as it happened
against a real API server under load."""


async def send_in_pieces(
    request: aiohttp.web.BaseRequest,
    response: aiohttp.web.Response,
    body: bytes,
    pause: float,
) -> aiohttp.web.StreamResponse:
    stream = aiohttp.web.StreamResponse(status=response.status, reason=response.reason)
    for name, value in response.headers.items():
        if name.lower() not in ("content-length", "transfer-encoding"):
            stream.headers[name] = value
    stream.enable_chunked_encoding()
    try:
        await stream.prepare(request)
        await stream.write(body[:CHUNKED_AFTER_BYTES])
        await asyncio.sleep(pause)
        await stream.write(body[CHUNKED_AFTER_BYTES:])
        await stream.write_eof()
    except ConnectionError:
        pass  # the client went away
    return stream
