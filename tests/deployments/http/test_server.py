"""rayton's HTTP/1.1 server on a real socket: requests handed whole to the handler, answers in
order, the body limit before the body is read, Triton's errors, disconnects, the graceful
stop and idle connections."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest

from deployments.http import server as server_module
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.server import HttpServer, render_head


class Running:
    """A server on a free loopback port, and what its handler saw."""

    def __init__(self, handler=None, **options) -> None:
        self.seen: list[HttpRequest] = []
        self.handler = handler or self.echo
        self.server = HttpServer(self._handle, **options)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.task: asyncio.Task | None = None

    async def _handle(self, request: HttpRequest) -> HttpReply:
        self.seen.append(request)
        return await self.handler(request)

    @staticmethod
    async def echo(request: HttpRequest) -> HttpReply:
        document = {"method": request.method, "path": request.path, "query": request.query}
        return HttpReply(
            200, json.dumps(document).encode() + request.body, {"Content-Type": "text/plain"}
        )

    async def __aenter__(self) -> Running:
        self.task = asyncio.get_running_loop().create_task(self.server.serve(self.sock))
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 5)

    async def connect(self):
        return await asyncio.open_connection("127.0.0.1", self.port)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await reader.readline()
    assert status_line, "connection closed before a response"
    status = int(status_line.split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return status, headers, body


async def test_pipelined_requests_on_one_connection_are_answered_in_order():
    async with Running() as running:
        reader, writer = await running.connect()
        writer.write(
            b"POST /v2/models/a%20b/infer?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /second HTTP/1.1\r\nHost: h\r\nX-Twice: 1\r\nX-Twice: 2\r\n\r\n"
        )
        first = await read_response(reader)
        second = await read_response(reader)
        writer.close()
    assert first[0] == 200
    assert first[2] == b'{"method": "POST", "path": "/v2/models/a b/infer", "query": "x=1"}abc'
    assert first[1]["content-type"] == "text/plain"
    assert json.loads(second[2])["path"] == "/second"
    assert running.seen[1].headers["x-twice"] == "1, 2"
    assert running.seen[0].headers["host"] == "h"
    assert 0 < running.seen[0].received_ns <= running.seen[0].read_ns


async def test_a_chunked_body_arrives_whole():
    async with Running() as running:
        reader, writer = await running.connect()
        writer.write(
            b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        status, _, body = await read_response(reader)
        writer.close()
    assert status == 200 and body.endswith(b"abcde")


async def test_expect_100_continue_is_answered_before_the_body():
    async with Running() as running:
        reader, writer = await running.connect()
        writer.write(b"POST /e HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert await reader.readline() == b"HTTP/1.1 100 Continue\r\n"
        assert await reader.readline() == b"\r\n"
        writer.write(b"ok")
        status, _, body = await read_response(reader)
        writer.close()
    assert status == 200 and body.endswith(b"ok")


async def test_a_declared_oversized_body_is_refused_before_the_handler_and_the_connection_closed():
    async with Running(max_body_size=10) as running:
        reader, writer = await running.connect()
        writer.write(b"POST /big HTTP/1.1\r\nContent-Length: 11\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert await reader.read() == b""  # closed
        writer.close()
    assert status == 400
    assert headers["connection"] == "close"
    assert "request size 11 exceeds the maximum input size of 10" in json.loads(body)["error"]
    assert running.seen == []


async def test_a_chunked_body_is_refused_once_it_passes_the_limit():
    async with Running(max_body_size=10) as running:
        reader, writer = await running.connect()
        writer.write(b"POST /big HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n")
        writer.write(b"8\r\n12345678\r\n")
        status, _, body = await read_response(reader)
        writer.close()
    assert status == 400 and "exceeds the maximum input size of 10" in json.loads(body)["error"]
    assert running.seen == []


async def test_bytes_that_are_not_http_get_triton_s_error_and_a_close():
    async with Running() as running:
        reader, writer = await running.connect()
        writer.write(b"\x00\x01 not http\r\n\r\n")
        status, _, body = await read_response(reader)
        assert await reader.read() == b""
        writer.close()
    assert status == 400 and "malformed HTTP request" in json.loads(body)["error"]


async def test_a_handler_that_raises_answers_500_in_triton_s_format_and_keeps_serving():
    async def failing(request: HttpRequest) -> HttpReply:
        if request.path == "/bug":
            raise ValueError("boom")
        return HttpReply(204)

    async with Running(failing) as running:
        reader, writer = await running.connect()
        writer.write(b"GET /bug HTTP/1.1\r\n\r\nGET /fine HTTP/1.1\r\n\r\n")
        status, headers, body = await read_response(reader)
        after = await read_response(reader)
        writer.close()
    assert status == 500 and json.loads(body) == {"error": "ValueError: boom"}
    assert headers["content-type"] == "application/json"
    assert after[0] == 204


async def test_http_1_0_and_connection_close_end_the_connection_after_the_answer():
    async with Running() as running:
        for request in (
            b"GET /a HTTP/1.0\r\n\r\n",
            b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n",
        ):
            reader, writer = await running.connect()
            writer.write(request)
            status, headers, _ = await read_response(reader)
            assert status == 200 and headers["connection"] == "close"
            assert await reader.read() == b""
            writer.close()


async def test_a_client_that_disconnects_cancels_its_request():
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(request: HttpRequest) -> HttpReply:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return HttpReply(200)

    async with Running(slow) as running:
        _, writer = await running.connect()
        writer.write(b"GET /slow HTTP/1.1\r\n\r\n")
        await asyncio.wait_for(started.wait(), 5)
        writer.close()
        await asyncio.wait_for(cancelled.wait(), 5)
        assert not running.server.connections or all(
            c.transport is None for c in running.server.connections
        )


async def test_the_graceful_stop_answers_requests_in_flight_then_ends_and_refuses_new_ones():
    release = asyncio.Event()

    async def held(request: HttpRequest) -> HttpReply:
        await release.wait()
        return HttpReply(200, b"done")

    running = Running(held)
    await running.__aenter__()
    reader, writer = await running.connect()
    idle_reader, idle_writer = await running.connect()
    writer.write(b"GET /held HTTP/1.1\r\n\r\n")
    await asyncio.sleep(0.05)
    running.server.should_exit = True
    await asyncio.sleep(0.05)
    assert await idle_reader.read() == b""  # an idle keep-alive connection is closed at once
    with pytest.raises(OSError):
        await running.connect()
    assert not running.task.done()  # the request in flight holds the stop
    release.set()
    status, headers, body = await read_response(reader)
    assert (status, body, headers["connection"]) == (200, b"done", "close")
    await asyncio.wait_for(running.task, 5)
    writer.close()
    idle_writer.close()


async def test_idle_keep_alive_connections_are_closed_after_the_timeout(monkeypatch):
    monkeypatch.setattr(server_module, "_SWEEP_INTERVAL_S", 0.05)
    async with Running(keep_alive_timeout_s=0.1) as running:
        reader, writer = await running.connect()
        writer.write(b"GET /a HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[0] == 200
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_a_real_client_reuses_its_connections():
    async with Running() as running:
        async with aiohttp.ClientSession() as session:
            for index in range(5):
                url = f"http://127.0.0.1:{running.port}/v2/models/m/infer"
                async with session.post(url, data=b"x" * 100_000) as response:
                    assert response.status == 200
                    body = await response.read()
                    assert body.endswith(b"x" * 100_000), index
        assert len({id(request.headers) for request in running.seen}) == 5
        assert len(running.server.connections) <= 1


def test_the_head_sets_length_and_close_itself():
    head = render_head(HttpReply(404, b"", {"Content-Length": "9", "X-A": "b"}), 3, False)
    assert head == (
        b"HTTP/1.1 404 Not Found\r\nX-A: b\r\ncontent-length: 3\r\nconnection: close\r\n\r\n"
    )


async def test_a_reply_with_trailers_goes_chunked_and_exempt_paths_have_no_body_limit():
    async def grpc_like(request: HttpRequest) -> HttpReply:
        return HttpReply(
            200, request.body, {"content-type": "application/grpc"}, {"grpc-status": "0"}
        )

    async with Running(grpc_like, max_body_size=4, unlimited_paths=("/rpc",)) as running:
        reader, writer = await running.connect()
        writer.write(b"POST /rpc HTTP/1.1\r\nContent-Length: 6\r\n\r\nabcdef")
        assert await reader.readline() == b"HTTP/1.1 200 OK\r\n"
        head = []
        while (line := await reader.readline()) != b"\r\n":
            head.append(line)
        assert b"transfer-encoding: chunked\r\n" in head
        assert not any(line.startswith(b"content-length") for line in head)
        rest = await reader.readuntil(b"0\r\ngrpc-status: 0\r\n\r\n")
        assert rest == b"6\r\nabcdef\r\n0\r\ngrpc-status: 0\r\n\r\n"
        writer.write(b"POST /other HTTP/1.1\r\nContent-Length: 6\r\n\r\nabcdef")
        status, _, _ = await read_response(reader)
        writer.close()
    assert status == 400  # the limit holds elsewhere


async def test_a_streamed_reply_goes_out_chunk_by_chunk_and_the_connection_stays_usable():
    release = asyncio.Event()

    async def events():
        yield b"data: 1\n\n"
        await release.wait()  # the first chunk is out before the second exists
        yield b"data: 2\n\n"

    async def streaming(request: HttpRequest) -> HttpReply:
        if request.path == "/plain":
            return HttpReply(200, b"ok")
        return HttpReply(200, b"", {"content-type": "text/event-stream"}, stream=events())

    async with Running(streaming) as running:
        reader, writer = await running.connect()
        writer.write(b"POST /events HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        head = []
        while (line := await reader.readline()) != b"\r\n":
            head.append(line)
        assert b"transfer-encoding: chunked\r\n" in head
        first = b"9\r\ndata: 1\n\n\r\n"
        assert await asyncio.wait_for(reader.readexactly(len(first)), 5) == first
        release.set()
        assert await reader.readuntil(b"0\r\n\r\n") == b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"
        writer.write(b"GET /plain HTTP/1.1\r\n\r\n")
        assert (await read_response(reader))[2] == b"ok"
        writer.close()


async def test_a_client_gone_mid_stream_closes_the_stream():
    closed = asyncio.Event()

    async def endless():
        try:
            while True:
                yield b"data: x\n\n"
                await asyncio.sleep(0.01)
        finally:
            closed.set()

    async def streaming(request: HttpRequest) -> HttpReply:
        return HttpReply(200, b"", {}, stream=endless())

    async with Running(streaming) as running:
        reader, writer = await running.connect()
        writer.write(b"GET /events HTTP/1.1\r\n\r\n")
        await reader.readuntil(b"data: x")
        writer.close()
        await asyncio.wait_for(closed.wait(), 5)
