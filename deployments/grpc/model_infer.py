"""``ModelInfer`` on a model's own replica, from request bytes to response bytes.

The gRPC frontend forwards each inference as the serialized ``ModelInferRequest`` it received
and returns the serialized response it gets back (for a stream's request, its serialized
``ModelStreamInferResponse`` messages: a decoupled model's several), so protobuf decoding,
tensor conversion and encoding run on the model's replicas (which scale with the model) and
the single frontend replica only routes. Errors are raised as :class:`InferenceServerError`;
the frontend maps them to gRPC statuses (unary) or error messages (streams).

A traced request's gRPC stamps are this replica's side of the exchange: ``GRPC_WAITREAD_*``
around decoding the message the frontend forwarded, ``GRPC_SEND_*`` around encoding the
reply (the frontend's receive and send are not in the trace).

Where HAProxy routes ``ModelInfer`` by model name (:mod:`cluster.grpc_routing`), the call
reaches the model's replica through Serve's own gRPC ingress, parsed already, with no
frontend on the way: :meth:`RoutedCalls.infer` answered by :func:`answer_grpc`. A
``ModelStreamInfer`` stream is routed by its first request; the replica answers each of its
requests the same way (:meth:`RoutedCalls.stream`, :mod:`deployments.grpc.streams`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.core.shared_memory import (
    RegionElsewhereError,
    RegionNotKnownError,
    process_regions,
    unknown_region,
)
from deployments.grpc import codec
from deployments.grpc.routing import InferRoute
from deployments.grpc.streams import SequenceTurns, replies_or_error, stream_replies
from deployments.observability.tracing import TRACER
from repo_adapter.errors import DecoupledModelError, InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, SharedMemoryTarget
from repo_adapter.response_stream import StreamedResponse

logger = logging.getLogger(__name__)

InferFn = Callable[[InferRequest], Awaitable[InferResponse]]
# (route, serialized request) -> the serialized replies from the model's deployment
ForwardFn = Callable[[InferRoute, bytes], AsyncIterator[bytes]]

_DECOUPLED_UNARY = "ModelInfer RPC doesn't support models with decoupled transaction policy"


class GrpcRegionHop(Protocol):
    """Sends a serialized ``ModelInferRequest`` to a replica of the same model on the node
    where a region it names was registered (:mod:`deployments.http.region_calls`)."""

    async def forward_grpc(
        self, elsewhere: RegionElsewhereError, model: str, message: bytes
    ) -> bytes: ...


class StreamTarget(Protocol):
    """What answers a stream's requests in a replica: a model's slot."""

    @property
    def config(self) -> mc.ModelConfig: ...

    def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamedResponse]: ...


def parse_infer_request(message: bytes) -> pb.ModelInferRequest:
    """The ``ModelInferRequest`` in ``message``; INVALID_ARG when it is not one."""
    try:
        return pb.ModelInferRequest.FromString(message)
    except DecodeError as err:
        raise InferenceServerError(
            f"failed to parse ModelInferRequest: {err}", StatusCode.INVALID_ARG
        ) from None


async def infer_serialized(infer: InferFn, message: bytes) -> bytes:
    """Run the request in ``message`` through ``infer``; a serialized ``ModelInferResponse``."""
    read_start_ns = time.monotonic_ns()
    return await infer_message(infer, parse_infer_request(message), read_start_ns)


async def infer_message(
    infer: InferFn,
    request_message: pb.ModelInferRequest,
    read_start_ns: int | None = None,
    offload_execution: bool = False,
) -> bytes:
    """:func:`infer_serialized` for a request parsed already (Serve's gRPC ingress parses it);
    ``read_start_ns``: when reading it began (None: now); ``offload_execution``: see
    :attr:`InferRequest.offload_execution`."""
    request, _ = await _received(request_message, read_start_ns, offload_execution)
    trace = request.trace
    try:
        try:
            response = await infer(request)
        except DecoupledModelError:
            raise InferenceServerError(_DECOUPLED_UNARY, StatusCode.UNSUPPORTED) from None
        if trace is not None:
            trace.stamp("GRPC_SEND_START")
        message = codec.encode_infer_response(
            response,
            request_message.id,
            targets=shared_memory_targets(request),
            regions=process_regions(),
        )
        return message.SerializeToString()
    finally:
        if trace is not None:
            trace.stamp("GRPC_SEND_END")
            TRACER.finish(trace)


def shared_memory_targets(request: InferRequest) -> dict[str, SharedMemoryTarget]:
    """The outputs ``request`` asked into shared memory, by name."""
    return {o.name: o.shared_memory for o in request.outputs if o.shared_memory is not None}


async def _decoded(request_message: pb.ModelInferRequest) -> tuple[InferRequest, bool]:
    """The request, its shared-memory inputs read; a region this process has not heard of
    yet is asked of the table's owner once."""
    regions = process_regions()
    try:
        return codec.decode_infer_request(request_message, regions)
    except RegionNotKnownError:
        await regions.refresh()
    try:
        return codec.decode_infer_request(request_message, regions)
    except RegionNotKnownError as err:
        raise unknown_region(err.name) from None


async def _received(
    request_message: pb.ModelInferRequest, read_start_ns: int | None, offload_execution: bool
) -> tuple[InferRequest, bool]:
    """The decoded request, traced from when reading began (None: now), and whether it asked
    for empty final responses."""
    read_start_ns = read_start_ns or time.monotonic_ns()
    request, empty_final = await _decoded(request_message)
    request.offload_execution = offload_execution
    trace = request.trace = TRACER.start(request.model_name, request.id)
    if trace is not None:
        trace.stamp("GRPC_WAITREAD_START", read_start_ns)
        trace.stamp("GRPC_WAITREAD_END")
    return request, empty_final


async def stream_message(
    target: StreamTarget,
    request_message: pb.ModelInferRequest,
    read_start_ns: int | None = None,
    offload_execution: bool = False,
) -> AsyncIterator[bytes]:
    """The serialized ``ModelStreamInferResponse`` messages answering one request of a
    ``ModelStreamInfer`` stream: a decoupled model's responses as it sends them, another's
    one response (see :func:`codec.streamed_response` for the final flags)."""
    decoupled = target.config.model_transaction_policy.decoupled
    request, empty_final = await _received(request_message, read_start_ns, offload_execution)
    trace = request.trace
    targets, regions = shared_memory_targets(request), process_regions()
    sending = False
    try:
        async for item in target.infer_stream(request):
            if trace is not None and not sending:
                trace.stamp("GRPC_SEND_START")
            sending = True
            reply = codec.streamed_response(
                item, request_message, empty_final, decoupled, targets=targets, regions=regions
            )
            if reply is not None:
                yield reply.SerializeToString()
    finally:
        if trace is not None:
            trace.stamp("GRPC_SEND_END")
            TRACER.finish(trace)


class SerializedMessage:
    """A reply already serialized, where Serve's gRPC ingress expects a message object (it
    calls ``SerializeToString``; grpc takes exactly ``bytes``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes = b"") -> None:
        self.data = data

    def SerializeToString(self) -> bytes:  # protobuf's name
        return self.data


async def answer_grpc(call: Awaitable[bytes], context: Any) -> SerializedMessage:
    """The reply of a call received through Serve's gRPC ingress; an error becomes the call's
    gRPC status, set on Serve's ``context``, as the frontend answers it."""
    try:
        return SerializedMessage(await call)
    except Exception as err:
        if not isinstance(err, InferenceServerError):
            logger.exception("gRPC ModelInfer failed")
        code, details = codec.grpc_status(err)
        context.set_code(code)
        context.set_details(details)
        return SerializedMessage()


class RoutedCalls:
    """The calls Serve's gRPC ingress hands this replica (``ModelInfer`` calls and stream
    requests that HAProxy routed here), counted while they run: one that arrives while others
    are in flight has its batch run off the event loop (:attr:`InferRequest.offload_execution`;
    BENCHMARKS.md, "Tuning: kept and rejected"); a lone call keeps the inline path's latency.
    One per replica.

    ``region_hop`` (None: none) carries a call that names a shared-memory region of another
    node to a replica there; without one, such a call is answered UNAVAILABLE.
    """

    def __init__(self, region_hop: GrpcRegionHop | None = None) -> None:
        self.in_flight = 0
        self._region_hop = region_hop

    async def infer(self, infer: InferFn, request: pb.ModelInferRequest) -> bytes:
        """A ``ModelInfer`` routed to this model's replica by the model it names
        (:mod:`cluster.grpc_routing`), parsed by Serve's gRPC ingress."""
        # Triton's order, as in the frontend: the version string first, then the contents.
        codec.parse_model_version(request.model_version)
        self.in_flight += 1
        try:
            return await infer_message(infer, request, offload_execution=self.in_flight > 1)
        except RegionElsewhereError as elsewhere:  # raised while decoding: nothing ran here
            message = request.SerializeToString()
            return await self._hop(elsewhere, request.model_name, message)
        finally:
            self.in_flight -= 1

    async def infer_wire(self, model: str, infer: InferFn, message: bytes) -> bytes:
        """A serialized ``ModelInfer`` for ``model`` the gRPC frontend forwarded through the
        model's deployment (not counted in flight: the frontend's calls keep the inline
        path)."""
        try:
            return await infer_serialized(infer, message)
        except RegionElsewhereError as elsewhere:  # raised while decoding: nothing ran here
            return await self._hop(elsewhere, model, message)

    async def _hop(self, elsewhere: RegionElsewhereError, model: str, message: bytes) -> bytes:
        """``message``'s answer from a replica on the region's node (UNAVAILABLE without a
        hop)."""
        if self._region_hop is None:
            raise elsewhere
        return await self._region_hop.forward_grpc(elsewhere, model, message)

    async def _stream_local(
        self, target: StreamTarget, request: pb.ModelInferRequest
    ) -> AsyncIterator[bytes]:
        codec.parse_model_version(request.model_version)
        self.in_flight += 1
        try:
            offload = self.in_flight > 1
            replies = stream_message(target, request, offload_execution=offload)
            async for reply in self._replies_or_hop(replies, target, request):
                yield reply
        finally:
            self.in_flight -= 1

    async def stream_wire(self, target: StreamTarget, message: bytes) -> AsyncIterator[bytes]:
        """The replies to a serialized stream request the gRPC frontend forwarded through
        the model's deployment (:func:`stream_message`)."""
        read_start_ns = time.monotonic_ns()
        request = parse_infer_request(message)
        replies = stream_message(target, request, read_start_ns)
        async for reply in self._replies_or_hop(replies, target, request):
            yield reply

    async def _replies_or_hop(
        self, replies: AsyncIterator[bytes], target: StreamTarget, request: pb.ModelInferRequest
    ) -> AsyncIterator[bytes]:
        """``replies``; where ``request`` names another node's region, the one reply of a
        replica there instead. Only a model's one-response requests outside a sequence hop:
        a decoupled model's responses and a sequence's state stay with the replicas the
        stream reaches (UNAVAILABLE, as without a hop)."""
        try:
            async for reply in replies:
                yield reply
        except RegionElsewhereError as elsewhere:  # raised while decoding: nothing was sent
            decoupled = target.config.model_transaction_policy.decoupled
            if decoupled or _sequence_id(request):
                raise
            answer = await self._hop(elsewhere, request.model_name, request.SerializeToString())
            response = pb.ModelInferResponse.FromString(answer)
            asked = request.parameters.get(codec.ENABLE_EMPTY_FINAL_RESPONSE)
            if asked is not None and asked.bool_param:  # what the one response carries here
                response.parameters[codec.FINAL_RESPONSE].bool_param = True
            yield pb.ModelStreamInferResponse(infer_response=response).SerializeToString()

    async def stream(
        self,
        requests: AsyncIterator[pb.ModelInferRequest],
        local: Callable[[str], StreamTarget | None],
        forward: Callable[[], ForwardFn],
    ) -> AsyncIterator[SerializedMessage]:
        """A ``ModelStreamInfer`` stream HAProxy routed to this replica by its first request:
        each request is answered by ``local(model)`` where this replica serves the model, else
        through ``forward()`` (the model's deployment, as the gRPC frontend reaches it)."""
        turns = SequenceTurns()

        def answer(request: pb.ModelInferRequest) -> AsyncIterator[bytes]:
            target = local(request.model_name)
            if target is not None:  # in order already: each starts as it arrives, here
                replies = self._stream_local(target, request)
            else:
                sequence_id = _sequence_id(request)
                route = InferRoute(request.model_name, request.model_version, request.id)
                forwarded = forward()(route, request.SerializeToString())
                replies = turns.in_turn((request.model_name, sequence_id), forwarded)
            return replies_or_error(replies, request.id)

        async for reply in stream_replies(requests, answer):
            yield SerializedMessage(reply)


def _sequence_id(request: pb.ModelInferRequest) -> int | str:
    """The request's correlation ID (0: none)."""
    if "sequence_id" not in request.parameters:
        return 0
    parameter = request.parameters["sequence_id"]
    kind = parameter.WhichOneof("parameter_choice")
    value = getattr(parameter, kind) if kind else 0
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else 0
