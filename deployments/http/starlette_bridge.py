"""Serve's own HTTP path (its proxy, or its direct ingress where rayton's server is not in
place) into rayton's routes: a Starlette request becomes an :class:`HttpRequest`, an
:class:`HttpReply` a Starlette response."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from deployments.http.body_limit import too_large
from deployments.http.messages import HttpReply, HttpRequest


async def read_request(request: Request, max_body_size: int | None) -> HttpRequest:
    """The request with its whole body, or INVALID_ARG once the body is known to be over
    ``max_body_size`` bytes (by its ``Content-Length``, or while reading a chunked one; None:
    no limit)."""
    received_ns = time.monotonic_ns()
    limit = max_body_size if max_body_size is not None else float("inf")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(declared, max_body_size or 0)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"over {max_body_size}", max_body_size or 0)
        chunks.append(chunk)
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return HttpRequest(
        request.method,
        request.url.path,
        request.headers,
        body,
        request.url.query,
        received_ns,
        time.monotonic_ns(),
    )


def starlette_response(reply: HttpReply) -> Response:
    if reply.stream is not None:
        return StreamingResponse(_chunks(reply), reply.status, headers=dict(reply.headers))
    return Response(reply.body, reply.status, headers=dict(reply.headers))


async def _chunks(reply: HttpReply) -> AsyncIterator[bytes]:
    assert reply.stream is not None
    try:
        if reply.body:
            yield bytes(reply.body)
        async for chunk in reply.stream:
            yield chunk
    finally:
        await reply.stream.aclose()
