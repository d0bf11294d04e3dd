"""An HTTP request and its reply as rayton's routes see them: plain data, no ASGI.

rayton's own server (:mod:`deployments.http.server`) builds these straight from the parser;
Serve's proxy path reaches the same routes through :mod:`deployments.http.starlette_bridge`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class HttpRequest:
    """One request, its body read whole (within the server's size limit).

    Attributes:
        method: ``GET``, ``POST``, ...
        path: the URL's path, percent-decoded.
        headers: header names in lower case; a repeated header's values joined by ``", "``.
        body: the body as received (``b""`` for none).
        query: the URL's query string, without ``?``.
        received_ns: ``time.monotonic_ns()`` when its first bytes arrived (trace stamps).
        read_ns: ``time.monotonic_ns()`` when its body was read whole.
    """

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    query: str = ""
    received_ns: int = 0
    read_ns: int = 0


@dataclass(slots=True)
class HttpReply:
    """A response: status, headers (any case), body, and trailers.

    ``trailers`` (None: none) go after a chunked body, as gRPC's status does when a call
    travels as HTTP/1.1 (:mod:`deployments.grpc.over_http`). ``stream`` (None: none) is a
    body sent as it comes, chunk by chunk after ``body`` (server-sent events); the server
    closes it when the client goes away.
    """

    status: int
    body: bytes | bytearray | memoryview = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    trailers: Mapping[str, str] | None = None
    stream: AsyncIterator[bytes] | None = None
