"""A sequence's request forwarded from one replica to the replica holding the sequence, over
that replica's own HTTP port (behind HAProxy, where Serve's request routers cannot name a
replica: see :mod:`deployments.apps.sequence_ports`).

The request travels as a serialized ``ModelInferRequest`` (protobuf, never pickle: the port is
a public one), POSTed to :data:`INFER_PATH` or :data:`STREAM_PATH` with the replica it is
meant for in :data:`TARGET_HEADER`. The answer is a series of frames, one per response: a
6-byte head (kind, final flag, payload length) and the payload, a serialized
``ModelInferResponse`` or the error's code and message. An answer without
:data:`FRAMES_HEADER` did not come from a replica of the sequence's model: the holder's port
now belongs to another process, and the sequence is lost.
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from typing import Protocol

from tritonclient.grpc import service_pb2 as pb

from deployments.grpc.codec import (
    decode_infer_request,
    decode_infer_response,
    encode_infer_request,
    encode_infer_response,
)
from deployments.http.messages import HttpReply, HttpRequest
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse

PATHS = "/rayton/sequences/"
INFER_PATH = PATHS + "infer"
STREAM_PATH = PATHS + "stream"
DROP_PATH = PATHS + "drop"
TARGET_HEADER = "rayton-sequence-replica"
FRAMES_HEADER = "rayton-sequence-frames"
CONTENT_TYPE = "application/octet-stream"

_HEAD = struct.Struct("<BBI")  # kind, final, payload length
HEAD_SIZE = _HEAD.size
_RESPONSE, _ERROR, _FLAG_ONLY = 0, 1, 2


class SequenceHolder(Protocol):
    """What the holder's side answers with: its model slot's forwarded-request entries
    (:class:`~deployments.core.model_slot.ModelSlot`)."""

    async def infer_forwarded(self, request: InferRequest, sent_to: str) -> InferResponse: ...

    def stream_forwarded(
        self, request: InferRequest, sent_to: str
    ) -> AsyncIterator[StreamedResponse]: ...

    def drop_sequence(self, sequence: str, sent_to: str) -> None: ...


def request_body(request: InferRequest) -> bytes:
    """The body that forwards ``request``."""
    return encode_infer_request(request).SerializeToString()


def frame(item: StreamedResponse) -> bytes:
    """One response as a frame."""
    result = item.result
    if result is None:
        kind, payload = _FLAG_ONLY, b""
    elif isinstance(result, BaseException):
        kind, payload = _ERROR, _error_payload(result)
    else:
        kind, payload = _RESPONSE, encode_infer_response(result).SerializeToString()
    return _HEAD.pack(kind, item.final, len(payload)) + payload


def read_head(head: bytes) -> tuple[int, bool, int]:
    """A frame's kind, final flag and payload length."""
    kind, final, length = _HEAD.unpack(head)
    return kind, bool(final), length


def read_frame(kind: int, final: bool, payload: bytes) -> StreamedResponse:
    """The response a frame carries."""
    if kind == _FLAG_ONLY:
        return StreamedResponse(None, final)
    if kind == _ERROR:
        document = json.loads(payload)
        code = StatusCode.__members__.get(document.get("code"), StatusCode.INTERNAL)
        return StreamedResponse(InferenceServerError(document.get("message", ""), code), final)
    message = pb.ModelInferResponse()
    message.ParseFromString(payload)
    return StreamedResponse(decode_infer_response(message), final)


def split_frames(body: bytes) -> list[StreamedResponse]:
    """Every frame of a whole body."""
    items, offset = [], 0
    while offset + HEAD_SIZE <= len(body):
        kind, final, length = read_head(body[offset : offset + HEAD_SIZE])
        start = offset + HEAD_SIZE
        items.append(read_frame(kind, final, body[start : start + length]))
        offset = start + length
    return items


def _error_payload(error: BaseException) -> bytes:
    if isinstance(error, InferenceServerError):
        code, message = error.code.name, error.message
    else:
        code, message = StatusCode.INTERNAL.name, f"{type(error).__name__}: {error}"
    return json.dumps({"code": code, "message": message}).encode()


async def answer(request: HttpRequest, holder: SequenceHolder) -> HttpReply:
    """The holder's answer to a forwarded call (``request.path`` under :data:`PATHS`)."""
    target = request.headers.get(TARGET_HEADER, "")
    if request.method != "POST" or not target:
        return _reply(frame(StreamedResponse(_bad_call(request), True)))
    if request.path == DROP_PATH:
        holder.drop_sequence(request.body.decode(), target)
        return _reply(b"")
    try:
        message = pb.ModelInferRequest()
        message.ParseFromString(request.body)
        forwarded, _ = decode_infer_request(message)
        if request.path == INFER_PATH:
            response = await holder.infer_forwarded(forwarded, target)
            return _reply(frame(StreamedResponse(response, True)))
        if request.path == STREAM_PATH:
            return _reply(b"", _frames(holder.stream_forwarded(forwarded, target)))
        raise _bad_call(request)
    except InferenceServerError as err:
        return _reply(frame(StreamedResponse(err, True)))
    except Exception as err:  # a model's own failure, answered as Triton's INTERNAL
        return _reply(frame(StreamedResponse(_internal(err), True)))


async def _frames(items: AsyncIterator[StreamedResponse]) -> AsyncIterator[bytes]:
    try:
        async for item in items:
            yield frame(item)
    except InferenceServerError as err:
        yield frame(StreamedResponse(err, True))
    except Exception as err:
        yield frame(StreamedResponse(_internal(err), True))


def _internal(error: BaseException) -> InferenceServerError:
    return InferenceServerError(str(error), StatusCode.INTERNAL)


def _bad_call(request: HttpRequest) -> InferenceServerError:
    return InferenceServerError(
        f"{request.method} {request.path}: not a forwarded sequence call", StatusCode.INVALID_ARG
    )


def _reply(body: bytes, stream: AsyncIterator[bytes] | None = None) -> HttpReply:
    headers = {"content-type": CONTENT_TYPE, FRAMES_HEADER: "1"}
    return HttpReply(200, body, headers, stream=stream)
