"""Serve's Starlette request as rayton's HttpRequest: a body within --http-max-input-size is
read whole; an oversized one is refused by its Content-Length before any of it is read, or,
chunked, as soon as it passes the limit. A reply goes back as a Starlette response."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from deployments.http.messages import HttpReply
from deployments.http.starlette_bridge import read_request, starlette_response
from repo_adapter.errors import InferenceServerError


def request(chunks: list[bytes], content_length: int | None) -> tuple[Request, list[int]]:
    """A Starlette request over ``chunks``; the list counts the chunks read so far."""
    read = [0]
    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]

    async def receive():
        index = read[0]
        read[0] += 1
        return {
            "type": "http.request",
            "body": chunks[index] if index < len(chunks) else b"",
            "more_body": index < len(chunks) - 1,
        }

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v2/models/m/infer",
        "query_string": b"a=1",
        "headers": headers,
    }
    return Request(scope, receive), read


async def test_a_body_within_the_limit_is_read_whole():
    chunks = [b"a" * 10, b"b" * 10]
    http_request, _ = request(chunks, 20)
    read = await read_request(http_request, max_body_size=20)
    assert read.body == b"a" * 10 + b"b" * 10
    assert (read.method, read.path, read.query) == ("POST", "/v2/models/m/infer", "a=1")
    assert read.headers["Content-Length"] == "20"  # looked up in any case
    assert 0 < read.received_ns <= read.read_ns


async def test_without_a_limit_any_body_is_read():
    http_request, _ = request([b"x" * 1000] * 3, None)
    assert len((await read_request(http_request, max_body_size=None)).body) == 3000


async def test_a_declared_oversized_body_is_refused_before_it_is_read():
    http_request, read = request([b"x" * 100], 100)
    with pytest.raises(InferenceServerError, match="request size 100 exceeds the maximum input"):
        await read_request(http_request, max_body_size=99)
    assert read == [0]


async def test_a_chunked_body_is_cut_off_once_it_passes_the_limit():
    http_request, read = request([b"x" * 40] * 10, None)
    with pytest.raises(InferenceServerError, match="exceeds the maximum input size of 100"):
        await read_request(http_request, max_body_size=100)
    assert read[0] == 3  # 120 bytes: no further chunk was read


def test_a_reply_becomes_a_starlette_response_with_its_status_headers_and_body():
    response = starlette_response(
        HttpReply(400, b'{"error":"x"}', {"content-type": "application/json"})
    )
    assert response.status_code == 400
    assert response.body == b'{"error":"x"}'
    assert response.headers["content-type"] == "application/json"
    assert response.headers["content-length"] == "13"
