"""The model replica's side of gRPC inference: request bytes in, response bytes out (no Ray)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from deployments.grpc import codec
from deployments.grpc.model_infer import (
    RoutedCalls,
    infer_serialized,
    parse_infer_request,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
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


async def test_stream_reply_wraps_the_response_and_marks_it_final_when_asked():
    asked = request_bytes(empty_final=True, request_id="s1")
    reply = pb.ModelStreamInferResponse.FromString(
        await infer_serialized(doubling_model, asked, stream=True)
    )
    assert reply.error_message == "" and reply.infer_response.id == "s1"
    assert reply.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is True
    plain = pb.ModelStreamInferResponse.FromString(
        await infer_serialized(doubling_model, request_bytes(), stream=True)
    )
    assert codec.FINAL_RESPONSE not in plain.infer_response.parameters


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

    async def forward(route, message: bytes, stream: bool) -> bytes:
        forwarded.append(route.model_name)
        assert stream and parse_infer_request(message).model_name == route.model_name
        raise InferenceServerError(f"unknown model: '{route.model_name}'", StatusCode.NOT_FOUND)

    async def requests():
        for model in ("double", "other", "double"):
            yield parse_infer_request(request_bytes(model=model))

    local = {"double": doubling_model}.get
    replies = [
        pb.ModelStreamInferResponse.FromString(reply.data)
        async for reply in RoutedCalls().stream(requests(), local, lambda: forward)
    ]
    assert [r.error_message for r in replies] == ["", "unknown model: 'other'", ""]
    assert [r.infer_response.model_name for r in replies] == ["double", "", "double"]
    assert forwarded == ["other"]
