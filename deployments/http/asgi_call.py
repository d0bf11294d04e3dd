"""Answering an :class:`HttpRequest` with an ASGI application: how rayton's server hands
Serve the paths Serve answers itself in a replica (its health check and routes)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from deployments.http.messages import HttpReply, HttpRequest

AsgiMessage = MutableMapping[str, Any]
AsgiApp = Callable[
    [AsgiMessage, Callable[[], Awaitable[AsgiMessage]], Callable[[AsgiMessage], Awaitable[None]]],
    Awaitable[None],
]


async def asgi_call(app: AsgiApp, request: HttpRequest) -> HttpReply:
    """``request`` through ``app``; its response collected whole."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": request.path,
        "raw_path": request.path.encode("latin-1", "replace"),
        "root_path": "",
        "query_string": request.query.encode("latin-1", "replace"),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in request.headers.items()
        ],
        "client": None,
        "server": None,
    }
    delivered = False

    async def receive() -> AsgiMessage:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect to report: wait until cancelled
        return {"type": "http.disconnect"}

    status = 500
    headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def send(message: AsgiMessage) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", ()):
                headers[name.decode("latin-1")] = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return HttpReply(status, b"".join(chunks), headers)
