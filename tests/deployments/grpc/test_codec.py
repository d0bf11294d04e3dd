"""gRPC codec round trips built by tritonclient.grpc and parsed by its InferResult (no Ray)."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc._utils import _get_inference_request

from deployments.grpc import codec
from deployments.observability.statistics import VersionStatistics
from repo_adapter.config import config_to_json_dict
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor, RequestedOutput
from repo_adapter.repository import scan_repository

TEST_MODELS = Path(__file__).parents[1] / "model_repository"


def client_request(
    inputs,
    outputs=None,
    model="m",
    version="",
    request_id="",
    parameters=None,
    sequence_id=0,
    priority=0,
    timeout=None,
) -> pb.ModelInferRequest:
    """The ModelInferRequest tritonclient.grpc sends for ``client.infer(...)``."""
    return _get_inference_request(
        model_name=model,
        inputs=inputs,
        model_version=version,
        request_id=request_id,
        outputs=outputs,
        sequence_id=sequence_id,
        sequence_start=False,
        sequence_end=False,
        priority=priority,
        timeout=timeout,
        parameters=parameters,
    )


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def decode(message: pb.ModelInferRequest):
    request, _ = codec.decode_infer_request(message)
    return request


def through_wire(message):
    """Serialise and parse again, as the server receives it."""
    return type(message).FromString(message.SerializeToString())


def error_of(fn) -> InferenceServerError:
    with pytest.raises(InferenceServerError) as info:
        fn()
    return info.value


# ----------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
        ("FP16", np.arange(4, dtype=np.float16)),
        ("FP64", np.array([1.5, -2.0])),
        ("INT8", np.array([-128, 127], dtype=np.int8)),
        ("INT64", np.array([[2**40, -1]], dtype=np.int64)),
        ("UINT16", np.array([0, 65535], dtype=np.uint16)),
        ("BOOL", np.array([True, False, True])),
        ("BYTES", np.array([b"a", b"", b"\xff\x00z"], dtype=np.object_)),
        ("FP32", np.zeros((0, 3), dtype=np.float32)),
    ],
)
def test_raw_inputs_decode_to_the_client_arrays(datatype, array):
    message = through_wire(client_request([infer_input("X", array, datatype)]))
    request = decode(message)
    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype, tensor.shape) == ("X", datatype, array.shape)
    if datatype == "BYTES":
        assert tensor.data.tolist() == array.tolist()
    else:
        assert tensor.data.dtype == array.dtype
        np.testing.assert_array_equal(tensor.data, array)


def test_raw_fixed_size_input_is_a_view_over_the_message_bytes():
    message = client_request([infer_input("X", np.arange(1024, dtype=np.float32), "FP32")])
    (tensor,) = decode(message).inputs
    assert not tensor.data.flags.owndata and not tensor.data.flags.writeable


def test_request_fields_parameters_and_outputs():
    a = np.ones(4, np.float32)
    outputs = [
        grpcclient.InferRequestedOutput("OUT0"),
        grpcclient.InferRequestedOutput("OUT1", class_count=3),
    ]
    message = client_request(
        [infer_input("A", a, "FP32"), infer_input("B", a, "FP32")],
        outputs,
        model="add_sub",
        version="2",
        request_id="req-7",
        parameters={"s": "x", "i": 5, "b": True, "f": 0.5},
        sequence_id=42,
        priority=3,
        timeout=1000,
    )
    request = decode(through_wire(message))
    assert (request.model_name, request.model_version, request.id) == ("add_sub", "2", "req-7")
    assert [t.name for t in request.inputs] == ["A", "B"]
    assert request.parameters == {
        "s": "x",
        "i": 5,
        "b": True,
        "f": 0.5,
        "sequence_id": 42,
        "sequence_start": False,
        "sequence_end": False,
        "priority": 3,
        "timeout": 1000,
    }
    assert request.priority == 3 and request.timeout_us == 1000
    assert [(o.name, o.class_count) for o in request.outputs] == [("OUT0", 0), ("OUT1", 3)]
    assert request.outputs[1].parameters == {}


def test_typed_contents_are_accepted():
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="F", datatype="FP32", shape=[2]).contents.fp32_contents.extend([1, 2])
    message.inputs.add(name="I8", datatype="INT8", shape=[2]).contents.int_contents.extend(
        [-1, 300]
    )
    message.inputs.add(name="U", datatype="UINT32", shape=[1]).contents.uint_contents.append(7)
    message.inputs.add(name="S", datatype="BYTES", shape=[1, 2]).contents.bytes_contents.extend(
        [b"ab", b"c"]
    )
    message.inputs.add(name="B", datatype="BOOL", shape=[1]).contents.bool_contents.append(True)
    inputs = {t.name: t.data for t in decode(through_wire(message)).inputs}
    np.testing.assert_array_equal(inputs["F"], np.array([1, 2], np.float32))
    assert inputs["I8"].dtype == np.int8 and inputs["I8"].tolist() == [-1, 44]  # low byte kept
    assert inputs["U"].dtype == np.uint32 and inputs["U"].tolist() == [7]
    assert inputs["S"].shape == (1, 2) and inputs["S"].tolist() == [[b"ab", b"c"]]
    assert inputs["B"].tolist() == [True]


def test_raw_and_contents_cannot_be_mixed():
    message = client_request([infer_input("A", np.ones(2, np.float32), "FP32")])
    message.inputs.add(name="B", datatype="FP32", shape=[2]).contents.fp32_contents.extend([1, 2])
    err = error_of(lambda: decode(message))
    assert err.code is StatusCode.INVALID_ARG
    assert "contents field must not be specified when using raw_input_contents for 'B'" in str(err)


def test_raw_contents_must_match_the_inputs_one_to_one():
    message = client_request([infer_input("A", np.ones(2, np.float32), "FP32")])
    message.inputs.add(name="B", datatype="FP32", shape=[2])
    err = error_of(lambda: decode(message))
    assert err.code is StatusCode.INVALID_ARG
    assert str(err) == "unable to find data for input tensor 'B' for model 'm' in request."
    extra = client_request([infer_input("A", np.ones(2, np.float32), "FP32")])
    extra.raw_input_contents.append(b"\0" * 8)
    err = error_of(lambda: decode(extra))
    assert err.code is StatusCode.INVALID_ARG and "one entry per input" in str(err)


def test_a_shape_whose_element_count_overflows_int64_is_a_size_mismatch():
    for datatype in ("FP32", "BYTES"):
        message = pb.ModelInferRequest(model_name="m")
        message.inputs.add(name="A", datatype=datatype, shape=[2**32, 2**32])
        message.raw_input_contents.append(b"")
        err = error_of(lambda message=message: decode(message))
        assert err.code is StatusCode.INVALID_ARG, err


def test_input_errors_use_tritons_wording():
    wrong_size = client_request([infer_input("A", np.ones(2, np.float32), "FP32")])
    wrong_size.inputs[0].shape[:] = [3]
    assert str(error_of(lambda: decode(wrong_size))) == (
        "input byte size mismatch for input 'A' for model 'm'. Expected 12, got 8"
    )
    wrong_type = pb.ModelInferRequest(model_name="m")
    wrong_type.inputs.add(name="A", datatype="FP32", shape=[1]).contents.int64_contents.append(1)
    assert str(error_of(lambda: decode(wrong_type))) == (
        "unexpected explicit tensor data for input tensor 'A' for model 'm' of type 'INT64', "
        "expected datatype 'FP32'"
    )
    duplicate = client_request(
        [infer_input("A", np.ones(1, np.float32), "FP32")] * 2, request_id="r1"
    )
    assert str(error_of(lambda: decode(duplicate))) == (
        "[request id: r1] input 'A' already exists in request"
    )
    bad_type = client_request([infer_input("A", np.ones(1, np.float32), "FP32")])
    bad_type.inputs[0].datatype = "FLOAT"
    assert "invalid datatype 'FLOAT'" in str(error_of(lambda: decode(bad_type)))


def test_parameter_checks():
    message = client_request([infer_input("A", np.ones(1, np.float32), "FP32")])
    message.parameters["priority"].string_param = "high"
    assert str(error_of(lambda: decode(message))) == (
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param."
    )
    message = client_request([infer_input("A", np.ones(1, np.float32), "FP32")])
    message.parameters["triton_secret"].bool_param = True
    assert "reserved for Triton usage" in str(error_of(lambda: decode(message)))
    message = client_request([infer_input("A", np.ones(1, np.float32), "FP32")])
    message.parameters[codec.ENABLE_EMPTY_FINAL_RESPONSE].bool_param = True
    request, empty_final = codec.decode_infer_request(message)
    assert empty_final and codec.ENABLE_EMPTY_FINAL_RESPONSE not in request.parameters
    message = client_request([infer_input("A", np.ones(1, np.float32), "FP32")])
    message.outputs.add(name="O").parameters["classification"].string_param = "3"
    assert "expected int64_param" in str(error_of(lambda: decode(message)))


def test_shared_memory_regions_are_unknown():
    tensor = grpcclient.InferInput("A", [1], "FP32")
    tensor.set_shared_memory("region0", 4)
    message = client_request([tensor])
    err = error_of(lambda: decode(message))
    assert err.code is StatusCode.NOT_FOUND and "region0" in str(err)
    output = grpcclient.InferRequestedOutput("O")
    output.set_shared_memory("region1", 4)
    message = client_request([infer_input("A", np.ones(1, np.float32), "FP32")], [output])
    err = error_of(lambda: decode(message))
    assert err.code is StatusCode.NOT_FOUND and "region1" in str(err)


@pytest.mark.parametrize(
    ("version", "expected"), [("", ""), ("3", "3"), ("007", "7"), (" 2", "2"), ("1abc", "1")]
)
def test_model_versions_parse_like_stol(version, expected):
    assert codec.parse_model_version(version) == expected


def test_invalid_model_versions():
    assert str(error_of(lambda: codec.parse_model_version("abc"))) == (
        "failed to get model version from specified version string 'abc' (details: stol), "
        "version should be an integral value > 0"
    )
    err = error_of(lambda: codec.parse_model_version("-1"))
    assert err.code is StatusCode.INVALID_ARG and "invalid model version specified '-1'" in str(err)


# ----------------------------------------------------------------------------- responses


def sample_response() -> InferResponse:
    return InferResponse(
        model_name="m",
        model_version="1",
        outputs=[
            InferTensor("OUT", "FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
            InferTensor("TEXT", "BYTES", np.array([[b"x", b"yz"]], dtype=np.object_)),
            InferTensor("HALF", "FP16", np.array([0.5], np.float16)),
            InferTensor("EMPTY", "INT32", np.zeros((0,), np.int32)),
        ],
        id="r9",
        parameters={"sequence_id": 0, "sequence_start": False, "note": "hi", "ratio": 0.25},
    )


def test_response_decodes_with_tritonclient():
    message = through_wire(codec.encode_infer_response(sample_response()))
    result = grpcclient.InferResult(message)
    np.testing.assert_array_equal(
        result.as_numpy("OUT"), np.arange(6, dtype=np.float32).reshape(2, 3)
    )
    assert result.as_numpy("TEXT").tolist() == [[b"x", b"yz"]]
    assert result.as_numpy("HALF").dtype == np.float16
    assert result.as_numpy("EMPTY").shape == (0,)
    response = result.get_response(as_json=True)
    assert response["model_name"] == "m" and response["model_version"] == "1"
    assert response["id"] == "r9"
    assert response["outputs"][0] == {"name": "OUT", "datatype": "FP32", "shape": ["2", "3"]}
    assert response["parameters"] == {
        "sequence_id": {"int64_param": "0"},
        "sequence_start": {"bool_param": False},
        "note": {"string_param": "hi"},
        "ratio": {"double_param": 0.25},
    }
    assert len(message.raw_output_contents) == 4


def test_response_round_trip_and_request_id_fallback():
    response = sample_response()
    response.id = ""
    message = codec.encode_infer_response(response, request_id="from-request")
    decoded = codec.decode_infer_response(through_wire(message))
    assert decoded.id == "from-request"
    assert [t.name for t in decoded.outputs] == ["OUT", "TEXT", "HALF", "EMPTY"]
    assert decoded.output("TEXT").data.tolist() == [[b"x", b"yz"]]


def test_stream_messages():
    ok = codec.stream_response(sample_response(), request_id="r9", final_flag=True)
    assert ok.error_message == ""
    assert ok.infer_response.parameters[codec.FINAL_RESPONSE].bool_param is True
    failed = codec.stream_response(error=InferenceServerError("bad shape"), request_id="r10")
    assert failed.error_message == "bad shape" and failed.infer_response.id == "r10"


def test_status_mapping():
    assert codec.grpc_status(InferenceServerError("x", StatusCode.NOT_FOUND)) == (
        grpc.StatusCode.NOT_FOUND,
        "x",
    )
    assert codec.grpc_status(InferenceServerError("x"))[0] is grpc.StatusCode.INVALID_ARGUMENT
    assert codec.grpc_status(InferenceServerError("x", StatusCode.UNSUPPORTED))[0] is (
        grpc.StatusCode.UNIMPLEMENTED
    )
    assert codec.grpc_status(ValueError("boom")) == (grpc.StatusCode.INTERNAL, "ValueError: boom")


# ----------------------------------------------------------------------------- JSON documents


def test_every_test_model_config_converts():
    for name, model in scan_repository(TEST_MODELS, []).items():
        if not model.available:
            continue
        document = config_to_json_dict(model.config)
        message = codec.model_config_response(document).config
        assert message == model.config, name


def test_metadata_statistics_and_index_convert():
    metadata = {
        "name": "m",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 3]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [-1, 10]}],
    }
    parsed = codec.model_metadata_response(metadata)
    assert list(parsed.inputs[0].shape) == [-1, 3] and parsed.platform == "onnxruntime_onnx"
    stats = codec.statistics_response([VersionStatistics("m", "1").to_json()])
    assert stats.model_stats[0].name == "m" and stats.model_stats[0].inference_stats.success.ns == 0
    index = codec.repository_index_response(
        [{"name": "a", "version": "1", "state": "READY"}, {"name": "b", "state": "UNAVAILABLE"}]
    )
    assert [(m.name, m.state) for m in index.models] == [("a", "READY"), ("b", "UNAVAILABLE")]
    server = codec.server_metadata_response(
        {"name": "rayton", "version": "0.1.0", "extensions": ["statistics"]}
    )
    assert json_format.MessageToDict(server)["extensions"] == ["statistics"]


def test_an_encoded_request_decodes_to_the_same_request():
    request = InferRequest(
        model_name="m",
        model_version="2",
        id="r1",
        parameters={"sequence_id": "s-1", "sequence_start": True, "priority": 3, "x": 1.5},
        inputs=[
            InferTensor("A", "FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
            InferTensor("B", "BYTES", np.array([b"ab", b""], dtype=object), {"p": "q"}),
        ],
        outputs=[RequestedOutput("OUT", class_count=2), RequestedOutput("OTHER")],
    )
    decoded, _ = codec.decode_infer_request(codec.encode_infer_request(request))
    assert (decoded.model_name, decoded.model_version, decoded.id) == ("m", "2", "r1")
    assert decoded.parameters == request.parameters
    assert [(t.name, t.datatype, t.parameters) for t in decoded.inputs] == [
        ("A", "FP32", {}),
        ("B", "BYTES", {"p": "q"}),
    ]
    np.testing.assert_array_equal(decoded.inputs[0].data, request.inputs[0].data)
    assert decoded.inputs[1].data.tolist() == [b"ab", b""]
    assert [(o.name, o.class_count) for o in decoded.outputs] == [("OUT", 2), ("OTHER", 0)]
