"""A unary ModelInfer as HTTP/1.1 (HAProxy ends HTTP/2): the body's one gRPC message in, the
response framed back with grpc-status as a trailer, an error as a trailers-only answer."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from deployments.grpc.over_http import (
    answer_unary,
    frame,
    is_grpc_call,
    percent_encoded,
    unframe,
)
from deployments.http.messages import HttpRequest
from repo_adapter.errors import InferenceServerError, StatusCode


def call(body: bytes, **headers: str) -> HttpRequest:
    headers = {"content-type": "application/grpc", **headers}
    return HttpRequest("POST", "/inference.GRPCInferenceService/ModelInfer", headers, body)


async def reverse(message: bytes) -> bytes:
    return message[::-1]


async def test_the_message_is_answered_framed_with_grpc_status_as_a_trailer():
    reply = await answer_unary(call(frame(b"abc")), reverse)
    assert (reply.status, reply.body) == (200, b"\x00\x00\x00\x00\x03cba")
    assert reply.headers["content-type"] == "application/grpc"
    assert reply.trailers == {"grpc-status": "0"}


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
async def test_a_compressed_message_is_decompressed(encoding, compress):
    packed = compress(b"hello")
    body = struct.pack(">BI", 1, len(packed)) + packed
    assert unframe(body, encoding) == b"hello"
    reply = await answer_unary(call(body, **{"grpc-encoding": encoding}), reverse)
    assert reply.body == frame(b"olleh")


async def test_errors_answer_trailers_only_with_the_grpc_code_and_an_escaped_message():
    async def refuse(message: bytes) -> bytes:
        raise InferenceServerError("unknown model 'ü%'", StatusCode.NOT_FOUND)

    reply = await answer_unary(call(frame(b"x")), refuse)
    assert (reply.status, reply.body, reply.trailers) == (200, b"", None)
    assert reply.headers["grpc-status"] == "5"  # NOT_FOUND
    assert reply.headers["grpc-message"] == "unknown model '%C3%BC%25'"


async def test_a_bug_is_internal_and_malformed_framing_is_refused():
    async def bug(message: bytes) -> bytes:
        raise KeyError("k")

    assert (await answer_unary(call(frame(b"x")), bug)).headers["grpc-status"] == "13"
    for body in (b"\x00\x00", frame(b"ab") + b"extra"):
        reply = await answer_unary(call(body), reverse)
        assert reply.headers["grpc-status"] == "13", body
    unsupported = struct.pack(">BI", 1, 1) + b"x"
    reply = await answer_unary(call(unsupported, **{"grpc-encoding": "snappy"}), reverse)
    assert reply.headers["grpc-status"] == "12"  # UNIMPLEMENTED
    assert "snappy" in reply.headers["grpc-message"]


def test_only_grpc_content_is_a_grpc_call():
    assert is_grpc_call(call(b""))
    assert is_grpc_call(call(b"", **{"content-type": "application/grpc+proto"}))
    assert not is_grpc_call(HttpRequest("POST", "/x", {"content-type": "application/json"}))
    assert percent_encoded("plain text") == "plain text"
