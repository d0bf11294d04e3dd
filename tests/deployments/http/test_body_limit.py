"""An inference body within --http-max-input-size is read whole; an oversized one is refused
by its Content-Length before any of it is read, or, chunked, as soon as it passes the limit."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from deployments.http.body_limit import read_body
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

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    return Request(scope, receive), read


async def test_a_body_within_the_limit_is_read_whole():
    chunks = [b"a" * 10, b"b" * 10]
    http_request, _ = request(chunks, 20)
    assert await read_body(http_request, limit=20) == b"a" * 10 + b"b" * 10


async def test_a_declared_oversized_body_is_refused_before_it_is_read():
    http_request, read = request([b"x" * 100], 100)
    with pytest.raises(InferenceServerError, match="request size 100 exceeds the maximum input"):
        await read_body(http_request, limit=99)
    assert read == [0]


async def test_a_chunked_body_is_cut_off_once_it_passes_the_limit():
    http_request, read = request([b"x" * 40] * 10, None)
    with pytest.raises(InferenceServerError, match="exceeds the maximum input size of 100"):
        await read_body(http_request, limit=100)
    assert read[0] == 3  # 120 bytes: no further chunk was read
