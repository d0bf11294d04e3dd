"""rayton's HTTP/1.1 server: asyncio and httptools' parser, each request handed whole to one
handler as an :class:`HttpRequest`, its :class:`HttpReply` written back.

No ASGI: a request costs a parse, one task and one write. Keep-alive and pipelined requests
(answered in order), ``Expect: 100-continue``, chunked request bodies, the body-size limit
checked before a body is read, idle connections closed after ``keep_alive_timeout_s``, and a
graceful stop (:attr:`HttpServer.should_exit`: stop listening, close idle connections, answer
what has arrived, then end). A client that disconnects cancels its request in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from urllib.parse import unquote

import httptools

from deployments.http.body_limit import too_large
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.responses import error_response
from repo_adapter.errors import InferenceServerError, StatusCode

logger = logging.getLogger(__name__)

Handler = Callable[[HttpRequest], Awaitable[HttpReply]]

_STATUS_LINES = {
    status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode()
    for status in http.HTTPStatus
}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# A body up to this size goes out in the same write as the head (one send); larger ones are
# not copied to be joined.
_JOIN_LIMIT = 64 * 1024
# Pipelined requests queued on one connection before it stops reading more.
_MAX_QUEUED = 16
_SWEEP_INTERVAL_S = 1.0


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} Status\r\n".encode()


_FRAMING = ("content-length", "connection", "transfer-encoding")


def render_head(reply: HttpReply, body_length: int, keep_alive: bool) -> bytes:
    """The status line and headers of ``reply``, its framing (``Content-Length``, or chunked
    where it has trailers or a stream) and ``Connection`` set here (the handler's are
    replaced)."""
    parts = [_status_line(reply.status)]
    for name, value in reply.headers.items():
        if name.lower() not in _FRAMING:
            parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    if reply.trailers is None and reply.stream is None:
        parts.append(b"content-length: %d\r\n" % body_length)
    else:
        parts.append(b"transfer-encoding: chunked\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def chunk_framing(body_length: int, trailers: Mapping[str, str]) -> tuple[bytes, bytes]:
    """What goes before and after a body sent as one chunk (none when empty): its size line,
    then the last chunk and ``trailers``."""
    before = b"%x\r\n" % body_length if body_length else b""
    after = [b"\r\n0\r\n" if body_length else b"0\r\n"]
    after.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in trailers.items())
    after.append(b"\r\n")
    return before, b"".join(after)


class HttpServer:
    """Serves one handler on a listening socket (see the module docstring)."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body_size: int | None = None,
        keep_alive_timeout_s: float = 5.0,
        unlimited_paths: Collection[str] = (),
    ) -> None:
        self.handler = handler
        self.max_body_size = max_body_size
        # Paths whose bodies have no limit (gRPC calls: Triton limits none).
        self.unlimited_urls = frozenset(path.encode() for path in unlimited_paths)
        self.keep_alive_timeout_s = keep_alive_timeout_s
        self.connections: set[_Connection] = set()
        self._exit = asyncio.Event()
        self._drained = asyncio.Event()
        self._listener: asyncio.base_events.Server | None = None

    @property
    def should_exit(self) -> bool:
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        """``True`` starts the graceful stop (uvicorn's flag, which Serve sets)."""
        if value:
            self._exit.set()

    async def serve(self, sock: socket.socket) -> None:
        """Serve on the bound socket ``sock`` until stopped and every connection is done."""
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            lambda: _Connection(self), sock=sock, backlog=2048
        )
        sweeper = loop.create_task(self._sweep_idle())
        try:
            await self._exit.wait()
            self._listener.close()
            for connection in list(self.connections):
                connection.finish()
            if self.connections:
                await self._drained.wait()
        finally:
            sweeper.cancel()
            self._listener.close()
            for connection in list(self.connections):  # cancelled: end what is left
                connection.abort()

    def forget(self, connection: _Connection) -> None:
        self.connections.discard(connection)
        if not self.connections and self._exit.is_set():
            self._drained.set()

    async def _sweep_idle(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL_S)
            cutoff = time.monotonic() - self.keep_alive_timeout_s
            for connection in list(self.connections):
                if connection.idle_since is not None and connection.idle_since < cutoff:
                    connection.abort()


class _Connection(asyncio.Protocol):
    """One client connection: parses its requests, answers them in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[tuple[HttpRequest | HttpReply, bool]] = deque()
        self.worker: asyncio.Task | None = None
        self.idle_since: float | None = time.monotonic()
        self.closing = False  # answer what has arrived, then close
        self.refused = False  # a request was refused mid-read: stop parsing
        self.paused = False
        self.can_write = asyncio.Event()
        self.can_write.set()
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._limit: int | None = None
        self._received_ns = 0

    # ------------------------------------------------------------------ transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections.add(self)
        if self.server.should_exit:
            self.finish()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.closing = True
        if self.worker is not None:
            self.worker.cancel()  # the client is gone: its request in flight is cancelled
        self.server.forget(self)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(InferenceServerError("protocol upgrades are not supported"))
        except httptools.HttpParserError as err:
            self._refuse(InferenceServerError(f"malformed HTTP request: {err}"))

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # ------------------------------------------------------------------ parser callbacks

    def on_message_begin(self) -> None:
        self.idle_since = None
        self._url = b""
        self._headers = {}
        self._body = []
        self._size = 0
        self._received_ns = time.monotonic_ns()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        earlier = self._headers.get(key)
        self._headers[key] = text if earlier is None else f"{earlier}, {text}"

    def on_headers_complete(self) -> None:
        server = self.server
        limit = self._limit = None if self._url in server.unlimited_urls else server.max_body_size
        declared = self._headers.get("content-length")
        if limit is not None and declared is not None and declared.isdigit():
            if int(declared) > limit:
                self._refuse(too_large(declared, limit))
                return
        if self._headers.get("expect", "").lower() == "100-continue" and self.transport:
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self.refused:
            return
        self._size += len(body)
        limit = self._limit
        if limit is not None and self._size > limit:
            self._refuse(too_large(f"over {limit}", limit))
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        url = self._url
        if not url.startswith(b"/"):  # absolute form (a proxy's): keep the path only
            url = httptools.parse_url(url).path or b"/"
        raw_path, _, query = url.partition(b"?")
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        request = HttpRequest(
            self.parser.get_method().decode("ascii"),
            path,
            self._headers,
            body,
            query.decode("latin-1"),
            self._received_ns,
            time.monotonic_ns(),
        )
        self._enqueue(request, self.parser.should_keep_alive())

    # ------------------------------------------------------------------ answering

    def _refuse(self, error: InferenceServerError) -> None:
        """Answer ``error`` after the requests before it, then close: the rest of the stream
        is not read (a body over the limit, or bytes that are not HTTP)."""
        self.refused = True
        if self.transport is not None:
            self.transport.pause_reading()
        self._enqueue(error_response(error), False)

    def _enqueue(self, item: HttpRequest | HttpReply, keep_alive: bool) -> None:
        self.queue.append((item, keep_alive))
        if self.worker is None:
            self.worker = asyncio.get_running_loop().create_task(self._answer_queue())
        if len(self.queue) > _MAX_QUEUED and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    async def _answer_queue(self) -> None:
        try:
            while self.queue:
                item, keep_alive = self.queue[0]
                if isinstance(item, HttpRequest):
                    reply = await self._answer(item)
                    method = item.method
                else:
                    reply, method = item, ""
                if not self.can_write.is_set():
                    await self.can_write.wait()
                self.queue.popleft()
                keep_alive = keep_alive and not (self.closing and not self.queue)
                if reply.stream is not None:
                    written = await self._write_stream(reply, keep_alive, method)
                else:
                    written = self._write(reply, keep_alive, method)
                if not written:
                    return
                if self.paused and len(self.queue) <= _MAX_QUEUED // 2 and not self.refused:
                    self.paused = False
                    if self.transport is not None:
                        self.transport.resume_reading()
        finally:
            self.worker = None
        if self.closing and self.transport is not None:
            self.transport.close()
        else:
            self.idle_since = time.monotonic()

    async def _answer(self, request: HttpRequest) -> HttpReply:
        try:
            return await self.server.handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug must still answer in Triton's error format
            logger.exception("unhandled error on %s %s", request.method, request.path)
            return error_response(
                InferenceServerError(f"{type(err).__name__}: {err}", StatusCode.INTERNAL)
            )

    def _write(self, reply: HttpReply, keep_alive: bool, method: str) -> bool:
        """Send ``reply``; False once the connection is closed (or closing after it)."""
        transport = self.transport
        if transport is None:
            return False
        body = reply.body if method != "HEAD" else b""
        head = render_head(reply, len(reply.body), keep_alive)
        tail = b""
        if reply.trailers is not None:
            size_line, tail = chunk_framing(len(body), reply.trailers)
            head += size_line
        if len(body) <= _JOIN_LIMIT:
            transport.write(b"".join((head, body, tail)))
        else:
            transport.writelines((head, body, tail))
        return self._kept_alive(transport, keep_alive)

    def _kept_alive(self, transport: asyncio.Transport, keep_alive: bool) -> bool:
        """After a reply: close the connection unless it is kept alive (False when closed)."""
        if not keep_alive:
            self.closing = True
            self.queue.clear()
            transport.close()
            return False
        return True

    async def _write_stream(self, reply: HttpReply, keep_alive: bool, method: str) -> bool:
        """Send ``reply`` chunk by chunk as its stream yields (flow-controlled by the
        transport); False once the connection is closed (or closing after it). A client
        gone mid-stream closes the stream, which cancels what produces it."""
        assert reply.stream is not None
        stream, transport = reply.stream, self.transport
        try:
            if transport is None:
                return False
            transport.write(render_head(reply, 0, keep_alive))
            body = b"" if method == "HEAD" else bytes(reply.body)
            if body:
                transport.write(b"%x\r\n%b\r\n" % (len(body), body))
            async for chunk in stream:
                if self.transport is None or transport.is_closing():
                    return False
                if chunk and method != "HEAD":
                    transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                if not self.can_write.is_set():
                    await self.can_write.wait()
            if self.transport is None:
                return False
            transport.write(b"0\r\n\r\n")
        finally:
            await stream.aclose()
        return self._kept_alive(transport, keep_alive)

    def finish(self) -> None:
        """Stop after the requests that have arrived: close now if there are none."""
        self.closing = True
        if self.worker is None and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            if self.transport is not None:
                self.transport.close()
