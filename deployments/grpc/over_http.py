"""Triton's unary ``ModelInfer`` arriving as HTTP/1.1 on the replica's HTTP server.

HAProxy ends the client's HTTP/2 connection and sends each unary ``ModelInfer`` to the model's
replica over HTTP/1.1 (:mod:`cluster.grpc_routing`): the request's body is the gRPC message
with its 5-byte prefix, and the answer is that framing back with ``grpc-status`` as a trailer
(HAProxy turns HTTP/1.1 trailers into HTTP/2 ones), or, for an error, a trailers-only answer
(the status in the headers, no body). The call then costs what an HTTP inference costs
instead of a pass through the replica's ``grpc.aio`` server. Streams stay on Serve's gRPC
ingress: HTTP/1.1 cannot carry both directions at once.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Awaitable, Callable

from deployments.grpc import codec
from deployments.http.messages import HttpReply, HttpRequest
from repo_adapter.errors import InferenceServerError, StatusCode

logger = logging.getLogger(__name__)

GRPC_INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
GRPC_CONTENT_TYPE = "application/grpc"
_PREFIX = struct.Struct(">BI")  # compressed flag, message length
_OK_TRAILERS = {"grpc-status": "0"}
_HEADERS = {"content-type": GRPC_CONTENT_TYPE}
# Bytes of a grpc-message left as they are (RFC 3986 unreserved and printable ASCII but '%').
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%")}


def is_grpc_call(request: HttpRequest) -> bool:
    """Whether ``request`` is a gRPC call (HAProxy keeps gRPC's content type)."""
    return request.headers.get("content-type", "").startswith(GRPC_CONTENT_TYPE)


def is_grpc_infer(request: HttpRequest) -> bool:
    """Whether ``request`` is a unary ``ModelInfer`` call."""
    return request.path == GRPC_INFER_PATH and is_grpc_call(request)


def unframe(body: bytes, encoding: str | None) -> bytes:
    """The one message of a unary call's body (decompressed per ``grpc-encoding``)."""
    if len(body) < _PREFIX.size:
        raise InferenceServerError("gRPC message missing or truncated", StatusCode.INTERNAL)
    compressed, length = _PREFIX.unpack_from(body)
    if len(body) != _PREFIX.size + length:
        raise InferenceServerError(
            "a unary call carries exactly one gRPC message", StatusCode.INTERNAL
        )
    message = body[_PREFIX.size :]
    if not compressed:
        return message
    encoding = (encoding or "identity").lower()
    try:
        if encoding == "gzip":
            return zlib.decompress(message, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            return zlib.decompress(message)
    except zlib.error as err:
        raise InferenceServerError(f"failed to decompress the message: {err}") from None
    raise InferenceServerError(f"unsupported grpc-encoding '{encoding}'", StatusCode.UNSUPPORTED)


def frame(message: bytes) -> bytes:
    return _PREFIX.pack(0, len(message)) + message


def percent_encoded(text: str) -> str:
    """gRPC's ``grpc-message`` form: UTF-8, bytes outside printable ASCII (and '%') escaped."""
    return "".join(chr(b) if b in _PLAIN else f"%{b:02X}" for b in text.encode("utf-8"))


def error_reply(error: BaseException) -> HttpReply:
    """A trailers-only answer: the call's status in the headers, no message."""
    code, details = codec.grpc_status(error)
    headers = {
        "content-type": GRPC_CONTENT_TYPE,
        "grpc-status": str(code.value[0]),
        "grpc-message": percent_encoded(details),
    }
    return HttpReply(200, b"", headers)


async def answer_unary(
    request: HttpRequest, answer: Callable[[bytes], Awaitable[bytes]]
) -> HttpReply:
    """The reply to a unary call: ``answer`` maps its message to the response message."""
    try:
        message = unframe(request.body, request.headers.get("grpc-encoding"))
        reply = await answer(message)
    except Exception as err:
        if not isinstance(err, InferenceServerError):
            logger.exception("gRPC ModelInfer over HTTP/1.1 failed")
        return error_reply(err)
    return HttpReply(200, frame(reply), _HEADERS, _OK_TRAILERS)
