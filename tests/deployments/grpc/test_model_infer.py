"""The model replica's side of gRPC inference: request bytes in, response bytes out (no Ray)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.grpc import codec
from deployments.grpc.model_infer import (
    RoutedCalls,
    infer_serialized,
    parse_infer_request,
)
from repo_adapter.errors import DecoupledModelError, InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.response_stream import StreamedResponse
from tests.deployments.grpc.test_codec import client_request, infer_input


async def doubling_model(request: InferRequest) -> InferResponse:
    data = request.input("IN").data
    return InferResponse(
        model_name=request.model_name,
        model_version="3",
        outputs=[InferTensor("OUT", "FP32", data * 2)],
    )


def request_bytes(empty_final: bool = False, model: str = "double", **kwargs) -> bytes:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    message = client_request([infer_input("IN", array, "FP32")], model=model, **kwargs)
    if empty_final:  # what async_stream_infer(enable_empty_final_response=True) adds
        message.parameters["triton_enable_empty_final_response"].bool_param = True
    return message.SerializeToString()


async def test_unary_reply_is_the_encoded_response():
    reply = await infer_serialized(doubling_model, request_bytes(request_id="r1"))
    response = codec.decode_infer_response(pb.ModelInferResponse.FromString(reply))
    assert (response.model_name, response.model_version, response.id) == ("double", "3", "r1")
    np.testing.assert_array_equal(
        response.output("OUT").data, np.arange(6, dtype=np.float32).reshape(2, 3) * 2
    )


class StreamingDouble:
    """A stream target: the doubling model, or (decoupled) one response per row of IN,
    the final flag sent alone."""

    def __init__(self, decoupled: bool = False) -> None:
        self.config = mc.ModelConfig(name="double")
        self.config.model_transaction_policy.decoupled = decoupled

    async def infer_stream(self, request: InferRequest):
        if not self.config.model_transaction_policy.decoupled:
            yield StreamedResponse(await doubling_model(request), True)
            return
        for row in request.input("IN").data:
            response = InferResponse("double", "3", [InferTensor("OUT", "FP32", row * 2)])
            yield StreamedResponse(response, False)
        yield StreamedResponse(None, True)


async def stream_of(target: StreamingDouble, message: bytes) -> list[pb.ModelStreamInferResponse]:
    return [
        pb.ModelStreamInferResponse.FromString(reply)
        async for reply in RoutedCalls().stream_wire(target, message)
    ]


async def test_stream_reply_wraps_the_response_and_marks_it_final_when_asked():
    asked = request_bytes(empty_final=True, request_id="s1")
    [reply] = await stream_of(StreamingDouble(), asked)
    assert reply.error_message == "" and reply.infer_response.id == "s1"
    assert reply.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is True
    [plain] = await stream_of(StreamingDouble(), request_bytes())
    assert codec.FINAL_RESPONSE not in plain.infer_response.parameters


async def test_a_decoupled_models_responses_each_carry_the_final_flag_as_triton_sets_it():
    replies = await stream_of(StreamingDouble(decoupled=True), request_bytes(request_id="d"))
    assert len(replies) == 2  # the final flag alone is not sent unless asked
    flags = [r.infer_response.parameters[codec.FINAL_RESPONSE].bool_param for r in replies]
    assert flags == [False, False]
    assert [r.infer_response.id for r in replies] == ["d", "d"]
    asked = await stream_of(StreamingDouble(decoupled=True), request_bytes(True, request_id="d"))
    assert len(asked) == 3
    last = asked[-1].infer_response
    assert (last.id, last.model_name, last.model_version, list(last.outputs)) == (
        "d",
        "double",
        "",
        [],
    )
    assert last.parameters[codec.FINAL_RESPONSE].bool_param is True


async def test_a_unary_call_to_a_decoupled_model_is_tritons_unimplemented_error():
    async def decoupled(request: InferRequest) -> InferResponse:
        raise DecoupledModelError("double")

    with pytest.raises(InferenceServerError) as info:
        await infer_serialized(decoupled, request_bytes())
    assert info.value.code is StatusCode.UNSUPPORTED
    assert info.value.message == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


async def test_model_errors_propagate_with_their_code():
    async def failing(request: InferRequest) -> InferResponse:
        raise InferenceServerError("no capacity", StatusCode.UNAVAILABLE)

    with pytest.raises(InferenceServerError) as info:
        await infer_serialized(failing, request_bytes())
    assert info.value.code is StatusCode.UNAVAILABLE


def test_bytes_that_are_not_a_request_are_invalid_argument():
    with pytest.raises(InferenceServerError) as info:
        parse_infer_request(b"\xff\xff\xff")
    assert info.value.code is StatusCode.INVALID_ARG
    assert "ModelInferRequest" in info.value.message


async def test_a_routed_call_arriving_while_others_are_in_flight_is_offloaded():
    seen: dict[str, bool] = {}
    release = asyncio.Event()

    async def holding(request: InferRequest) -> InferResponse:
        seen[request.id] = request.offload_execution
        if request.id == "first":
            await release.wait()
        return await doubling_model(request)

    calls = RoutedCalls()  # the replica's

    def routed(request_id: str):
        return calls.infer(holding, parse_infer_request(request_bytes(request_id=request_id)))

    await routed("alone")
    first = asyncio.create_task(routed("first"))
    await asyncio.sleep(0)
    await routed("second")  # "first" is still in flight
    release.set()
    await first
    await routed("after")
    assert seen == {"alone": False, "first": False, "second": True, "after": False}


async def test_a_routed_stream_answers_its_model_here_and_forwards_the_others():
    forwarded: list[str] = []

    async def forward(route, message: bytes):
        forwarded.append(route.model_name)
        assert parse_infer_request(message).model_name == route.model_name
        raise InferenceServerError(f"unknown model: '{route.model_name}'", StatusCode.NOT_FOUND)
        yield b""  # an async generator, as the frontend's forward_stream

    async def requests():
        for model in ("double", "other", "double"):
            yield parse_infer_request(request_bytes(model=model))

    local = {"double": StreamingDouble()}.get
    replies = [
        pb.ModelStreamInferResponse.FromString(reply.data)
        async for reply in RoutedCalls().stream(requests(), local, lambda: forward)
    ]
    assert [r.error_message for r in replies] == ["", "unknown model: 'other'", ""]
    assert [r.infer_response.model_name for r in replies] == ["double", "", "double"]
    assert forwarded == ["other"]


# ----------------------------------------------------------------------------- region hops


class _RecordedGrpcHop:
    """A replica on the region's node, answering what it is sent with one response."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def forward_grpc(self, elsewhere, model: str, message: bytes) -> bytes:
        request = pb.ModelInferRequest.FromString(message)
        self.sent.append((elsewhere.node_id, request.id))
        return pb.ModelInferResponse(model_name=model, id=request.id).SerializeToString()


@pytest.fixture
def region_elsewhere():
    """This process's regions know 'r', registered on another node than this one's."""
    from deployments.core.shared_memory import SystemRegion, process_regions

    regions = process_regions()
    node, fetch = regions.node_id, regions.fetch
    regions.node_id, regions.fetch = "node-b", None
    regions.adopt([SystemRegion("r", "/never_opened", 0, 64, "node-a")])
    yield
    regions.adopt([])
    regions.node_id, regions.fetch = node, fetch


def _in_region(request_id: str, sequence_id: int = 0, empty_final: bool = False) -> bytes:
    message = pb.ModelInferRequest.FromString(request_bytes(empty_final, request_id=request_id))
    message.inputs[0].parameters["shared_memory_region"].string_param = "r"
    message.inputs[0].parameters["shared_memory_byte_size"].int64_param = 24
    del message.raw_input_contents[:]
    if sequence_id:
        message.parameters["sequence_id"].int64_param = sequence_id
    return message.SerializeToString()


async def test_a_stream_request_naming_another_nodes_region_is_answered_from_there(
    region_elsewhere,
):
    hop = _RecordedGrpcHop()
    calls = RoutedCalls(hop)
    replies = [
        pb.ModelStreamInferResponse.FromString(reply)
        async for reply in calls.stream_wire(StreamingDouble(), _in_region("s1", empty_final=True))
    ]
    assert hop.sent == [("node-a", "s1")]
    [reply] = replies
    assert reply.error_message == "" and reply.infer_response.id == "s1"
    assert reply.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is True


@pytest.mark.parametrize(
    ("target", "sequence_id"), [(StreamingDouble(decoupled=True), 0), (StreamingDouble(), 7)]
)
async def test_decoupled_and_sequence_stream_requests_do_not_hop(
    region_elsewhere, target, sequence_id
):
    hop = _RecordedGrpcHop()
    with pytest.raises(InferenceServerError) as refused:
        async for _ in RoutedCalls(hop).stream_wire(target, _in_region("s2", sequence_id)):
            pass
    assert refused.value.code == StatusCode.UNAVAILABLE and hop.sent == []
