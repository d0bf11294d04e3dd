"""``ModelInfer`` on a model's own replica, from request bytes to response bytes.

The gRPC frontend forwards each inference as the serialized ``ModelInferRequest`` it received
and returns the serialized response it gets back, so protobuf decoding, tensor conversion and
encoding run on the model's replicas (which scale with the model) and the single frontend
replica only routes. Errors are raised as :class:`InferenceServerError`; the frontend maps them
to gRPC statuses (unary) or error messages (streams).

A traced request's gRPC stamps are this replica's side of the exchange: ``GRPC_WAITREAD_*``
around decoding the message the frontend forwarded, ``GRPC_SEND_*`` around encoding the
reply (the frontend's receive and send are not in the trace).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb

from deployments.core.tracing import TRACER
from deployments.grpc import codec
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse

InferFn = Callable[[InferRequest], Awaitable[InferResponse]]


def parse_infer_request(message: bytes) -> pb.ModelInferRequest:
    """The ``ModelInferRequest`` in ``message``; INVALID_ARG when it is not one."""
    try:
        return pb.ModelInferRequest.FromString(message)
    except DecodeError as err:
        raise InferenceServerError(
            f"failed to parse ModelInferRequest: {err}", StatusCode.INVALID_ARG
        ) from None


async def infer_serialized(infer: InferFn, message: bytes, stream: bool = False) -> bytes:
    """Run the request in ``message`` through ``infer``.

    Returns a serialized ``ModelInferResponse``, or with ``stream`` a serialized
    ``ModelStreamInferResponse`` (with ``triton_final_response`` when the request asked for
    empty final responses).
    """
    read_start_ns = time.monotonic_ns()
    request_message = parse_infer_request(message)
    request, empty_final = codec.decode_infer_request(request_message)
    trace = request.trace = TRACER.start(request.model_name, request.id)
    if trace is not None:
        trace.stamp("GRPC_WAITREAD_START", read_start_ns)
        trace.stamp("GRPC_WAITREAD_END")
    try:
        response = await infer(request)
        if trace is not None:
            trace.stamp("GRPC_SEND_START")
        if stream:
            reply = codec.stream_response(
                response, request_id=request_message.id, final_flag=empty_final
            )
        else:
            reply = codec.encode_infer_response(response, request_message.id)
        return reply.SerializeToString()
    finally:
        if trace is not None:
            trace.stamp("GRPC_SEND_END")
            TRACER.finish(trace)
