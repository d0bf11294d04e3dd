"""The gRPC frontend's route reader agrees with protobuf's parser without parsing tensors."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc._utils import _get_inference_request

from deployments.grpc.routing import InferRoute, read_infer_route
from repo_adapter.errors import InferenceServerError, StatusCode


def client_message(model: str, version: str = "", request_id: str = "") -> bytes:
    """The bytes tritonclient sends for a request with a 1 MB tensor and parameters."""
    tensor = grpcclient.InferInput("X", [1, 262144], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 262144), np.float32))
    request = _get_inference_request(
        model_name=model,
        inputs=[tensor],
        model_version=version,
        request_id=request_id,
        outputs=[grpcclient.InferRequestedOutput("Y")],
        sequence_id=7,
        sequence_start=True,
        sequence_end=False,
        priority=1,
        timeout=1000,
        parameters={"custom": 3},
    )
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("model", "version", "request_id"),
    [("add_sub", "", ""), ("m", "2", "req-1"), ("модель", "-1", "ïd"), ("", "", "")],
)
def test_route_matches_the_parsed_message(model, version, request_id):
    message = client_message(model, version, request_id)
    parsed = pb.ModelInferRequest.FromString(message)
    assert read_infer_route(message) == InferRoute(
        parsed.model_name,
        parsed.model_version,
        parsed.id,
        parsed.parameters["sequence_id"].int64_param,
        parsed.parameters["sequence_start"].bool_param,
        parsed.parameters["sequence_end"].bool_param,
    )


def test_fields_in_any_order_and_repeated_last_wins():
    tail = pb.ModelInferRequest(model_name="first", id="x").SerializeToString()
    message = (
        pb.ModelInferRequest(raw_input_contents=[b"\0" * 100]).SerializeToString()
        + tail
        + pb.ModelInferRequest(model_name="last").SerializeToString()
    )
    assert read_infer_route(message) == pb_route(message) == InferRoute("last", "", "x")


def pb_route(message: bytes) -> InferRoute:
    parsed = pb.ModelInferRequest.FromString(message)
    return InferRoute(parsed.model_name, parsed.model_version, parsed.id)


@pytest.mark.parametrize("sequence_id", [5, "clip-9", -3, (1 << 64) - 1])
def test_the_sequence_id_is_read_as_sent(sequence_id):
    request = pb.ModelInferRequest(model_name="m")
    if isinstance(sequence_id, str):
        request.parameters["sequence_id"].string_param = sequence_id
    elif sequence_id < 0:
        request.parameters["sequence_id"].int64_param = sequence_id
    else:
        request.parameters["sequence_id"].uint64_param = sequence_id
    request.parameters["priority"].uint64_param = 2
    assert read_infer_route(request.SerializeToString()).sequence_id == sequence_id


def test_the_start_and_end_flags_are_read_and_a_boolean_id_is_no_id():
    request = pb.ModelInferRequest(model_name="m")
    request.parameters["sequence_id"].int64_param = 7
    request.parameters["sequence_start"].bool_param = True
    request.parameters["sequence_end"].bool_param = False
    route = read_infer_route(request.SerializeToString())
    assert (route.sequence_id, route.sequence_start, route.sequence_end) == (7, True, False)
    request.parameters["sequence_id"].bool_param = True
    request.parameters["sequence_end"].bool_param = True
    route = read_infer_route(request.SerializeToString())
    assert (route.sequence_id, route.sequence_start, route.sequence_end) == (0, True, True)


@pytest.mark.parametrize(
    "message",
    [
        b"\x0a\x05ab",  # model_name claims 5 bytes, has 2
        b"\x0a",  # length missing
        b"\x3a\xff\xff\xff\xff\x0f",  # raw contents length beyond the message
        b"\x0b",  # wire type 3 (group start)
        b"\x00\x01",  # field number 0
        b"\x0a\x02\xff\xfe",  # model_name not UTF-8
    ],
)
def test_malformed_messages_are_invalid_argument(message):
    with pytest.raises(InferenceServerError, match="failed to parse ModelInferRequest") as err:
        read_infer_route(message)
    assert err.value.code == StatusCode.INVALID_ARG
