"""HTTP codec: round trips through tritonclient's own request builder and response parser."""

from __future__ import annotations

import gzip
import json
import pickle
import re
import zlib
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.http import InferenceServerClient

from deployments.core.classification import apply_classification
from deployments.http import (
    RawInputSpec,
    compression,
    decode_infer_request,
    encode_error,
    encode_infer_response,
    json_dumps,
    wire,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor, RequestedOutput

HEADER_LENGTH = "Inference-Header-Content-Length"

try:
    import orjson
except ImportError:  # the stdlib path is always tested; orjson only where installed
    orjson = None


@pytest.fixture(autouse=True, params=["stdlib"] + (["orjson"] if orjson else []))
def json_backend(request, monkeypatch):
    """Run every test with the stdlib JSON path and, where installed, the orjson one."""
    monkeypatch.setattr(wire, "_orjson", orjson if request.param == "orjson" else None)
    return request.param


# --------------------------------------------------------------------------------------------
# helpers


def infer_input(name, array, datatype, binary=True):
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def client_request(inputs, outputs=None, **kwargs):
    """(body, headers) exactly as tritonclient's HTTP client sends them."""
    body, header_length = InferenceServerClient.generate_request_body(inputs, outputs, **kwargs)
    headers = {} if header_length is None else {HEADER_LENGTH: str(header_length)}
    return body, headers


def json_request(header, binary=b"", header_length=True):
    """(body, headers) for a hand-written JSON header plus optional binary data."""
    text = json.dumps(header).encode()
    headers = {HEADER_LENGTH: str(len(text))} if header_length else {}
    return text + binary, headers


def decode(body, headers, **kwargs):
    return decode_infer_request(body, headers, "model", "1", **kwargs)


def client_result(body, headers):
    """Parse an encoded response with tritonclient."""
    length = headers.get(HEADER_LENGTH)
    return InferenceServerClient.parse_response_body(
        body,
        header_length=int(length) if length is not None else None,
        content_encoding=headers.get("Content-Encoding"),
    )


def encode(outputs, request=None, accept_encoding=None, **kwargs):
    request = request or InferRequest("model", [], "1")
    response = InferResponse("model", "1", outputs, id=request.id)
    return encode_infer_response(response, request, accept_encoding, **kwargs)


def response_json(body, headers):
    length = headers.get(HEADER_LENGTH)
    return json.loads(body[: int(length)] if length is not None else body)


@contextmanager
def fails(code, pattern):
    with pytest.raises(InferenceServerError) as info:
        yield info
    assert info.value.code == code, info.value
    assert re.search(pattern, info.value.message), info.value.message


# --------------------------------------------------------------------------------------------
# request decoding: tritonclient bodies


def test_binary_input_is_a_zero_copy_view_of_the_body():
    array = np.random.default_rng(0).random((64, 1024), dtype=np.float32)  # 256 KiB
    body, headers = client_request([infer_input("IN", array, "FP32")])
    request = decode(body, headers)
    tensor = request.input("IN")
    assert tensor.datatype == "FP32" and tensor.shape == (64, 1024)
    np.testing.assert_array_equal(tensor.data, array)
    assert np.shares_memory(tensor.data, np.frombuffer(body, dtype=np.uint8))
    assert not tensor.data.flags.writeable  # bytes bodies are immutable


def test_bytearray_body_gives_writable_views():
    array = np.arange(8, dtype=np.int32)
    body, headers = client_request([infer_input("IN", array, "INT32")])
    tensor = decode(bytearray(body), headers).input("IN")
    assert tensor.data.flags.writeable
    np.testing.assert_array_equal(tensor.data, array)


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP32", np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)),
        ("FP64", np.array([[1.5, -2.25]], dtype=np.float64)),
        ("INT64", np.array([[-(2**62), 0, 2**62]], dtype=np.int64)),
        ("INT8", np.array([-128, 127], dtype=np.int8)),
        ("UINT8", np.arange(6, dtype=np.uint8).reshape(1, 2, 3)),
        ("UINT64", np.array([2**64 - 1, 0], dtype=np.uint64)),
        ("BOOL", np.array([[True, False, True]])),
        ("BYTES", np.array([[b"abc", b""], ["é".encode(), b"z"]], dtype=np.object_)),
    ],
)
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_inputs_round_trip(datatype, array, binary):
    body, headers = client_request([infer_input("IN", array, datatype, binary)])
    tensor = decode(body, headers).input("IN")
    assert tensor.datatype == datatype
    assert tensor.shape == array.shape
    assert tensor.data.dtype == array.dtype
    np.testing.assert_array_equal(tensor.data, array)
    assert tensor.parameters == {}  # transport parameters are not the model's business


def test_json_only_request_has_no_header_length():
    body, headers = client_request([infer_input("IN", np.ones(3, np.float32), "FP32", False)])
    assert headers == {}
    np.testing.assert_array_equal(decode(body, headers).input("IN").data, np.ones(3))


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP16", np.array([[0.5, -1.0, 65504.0]], dtype=np.float16)),
        ("BF16", np.array([1.0, -2.5, 3.0], dtype=ml_dtypes.bfloat16)),
    ],
)
def test_half_precision_binary_inputs(datatype, array):
    body, headers = client_request([infer_input("IN", array, datatype)])
    tensor = decode(body, headers).input("IN")
    assert tensor.data.dtype == array.dtype
    np.testing.assert_array_equal(tensor.data, array)


def test_several_inputs_take_binary_data_in_order():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([b"one", b"two"], dtype=np.object_)
    c = np.array([7, 8, 9], dtype=np.int64)
    d = np.array([True, False])
    inputs = [
        infer_input("A", a, "FP32"),
        infer_input("B", b, "BYTES"),
        infer_input("C", c, "INT64", binary=False),
        infer_input("D", d, "BOOL"),
    ]
    request = decode(*client_request(inputs))
    assert [t.name for t in request.inputs] == ["A", "B", "C", "D"]
    for name, expected in zip("ABCD", (a, b, c, d), strict=True):
        np.testing.assert_array_equal(request.input(name).data, expected)


def test_requested_outputs_and_parameters():
    outputs = [
        httpclient.InferRequestedOutput("BIN", binary_data=True),
        httpclient.InferRequestedOutput("JSON", binary_data=False),
        httpclient.InferRequestedOutput("CLS", class_count=3),
    ]
    body, headers = client_request(
        [infer_input("IN", np.zeros(1, np.float32), "FP32")],
        outputs,
        request_id="req-1",
        sequence_id=42,
        sequence_start=True,
        priority=2,
        timeout=5000,
        parameters={"custom": "x", "count": 3, "flag": False, "ratio": 0.5},
    )
    request = decode(body, headers)
    assert request.id == "req-1"
    assert request.model_name == "model" and request.model_version == "1"
    assert request.outputs == [
        RequestedOutput("BIN", binary_data=True),
        RequestedOutput("JSON", binary_data=False),
        RequestedOutput("CLS", binary_data=True, class_count=3),
    ]
    assert request.parameters == {
        "sequence_id": 42,
        "sequence_start": True,
        "sequence_end": False,
        "priority": 2,
        "timeout": 5000,
        "custom": "x",
        "count": 3,
        "flag": False,
        "ratio": 0.5,
    }
    assert request.priority == 2 and request.timeout_us == 5000


def test_no_requested_outputs_asks_for_binary_outputs():
    request = decode(*client_request([infer_input("IN", np.zeros(1, np.float32), "FP32")]))
    assert request.outputs == []
    assert request.parameters == {"binary_data_output": True}
    assert request.id == ""


def test_string_sequence_id_is_accepted():
    body, headers = client_request(
        [infer_input("IN", np.zeros(1, np.float32), "FP32")], sequence_id="abc"
    )
    assert decode(body, headers).parameters["sequence_id"] == "abc"


def test_headers_are_case_insensitive():
    body, headers = client_request([infer_input("IN", np.arange(4, dtype=np.int32), "INT32")])
    lowered = {key.lower(): value for key, value in headers.items()}
    np.testing.assert_array_equal(decode(body, lowered).input("IN").data, np.arange(4))


@pytest.mark.parametrize(
    "compress",
    [gzip.compress, zlib.compress, lambda data: zlib.compress(data)[2:-4]],
    ids=["gzip", "deflate", "raw-deflate"],
)
def test_compressed_request_bodies(compress):
    array = np.arange(100, dtype=np.float32)
    body, headers = client_request([infer_input("IN", array, "FP32")])
    coding = "gzip" if compress is gzip.compress else "deflate"
    headers = {**headers, "Content-Encoding": coding}
    tensor = decode(compress(body), headers).input("IN")
    np.testing.assert_array_equal(tensor.data, array)


def test_identity_content_encoding():
    body, headers = client_request([infer_input("IN", np.ones(2, np.float32), "FP32")])
    decode(body, {**headers, "Content-Encoding": "identity"})


def test_nested_and_ragged_json_data_count_leaves():
    request = decode(
        *json_request(
            {
                "inputs": [
                    {"name": "N", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
                    {"name": "F", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]},
                    {"name": "R", "datatype": "INT32", "shape": [4], "data": [[1], [2, 3], 4]},
                    {"name": "S", "datatype": "BYTES", "shape": [1, 2], "data": [["a"], ["b"]]},
                ]
            }
        )
    )
    np.testing.assert_array_equal(request.input("N").data, [[1, 2], [3, 4]])
    assert request.input("N").data.dtype == np.float32
    np.testing.assert_array_equal(request.input("F").data, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(request.input("R").data, [1, 2, 3, 4])
    assert request.input("S").data.tolist() == [[b"a", b"b"]]


def test_json_nan_and_infinity_are_accepted():
    body = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[3],"data":[NaN,Infinity,-1]}]}'
    data = decode(body, {}).input("X").data
    assert np.isnan(data[0]) and data[1] == np.inf and data[2] == -1


def test_out_of_range_json_integers_wrap_like_c_casts():
    request = decode(
        *json_request({"inputs": [{"name": "X", "datatype": "INT8", "shape": [1], "data": [300]}]})
    )
    assert request.input("X").data.tolist() == [44]


def test_empty_tensors():
    empty = {"binary_data_size": 0}
    header = {
        "inputs": [
            {"name": "J", "datatype": "FP16", "shape": [0, 3], "data": []},
            {"name": "B", "datatype": "FP32", "shape": [2, 0], "parameters": empty},
            {"name": "S", "datatype": "BYTES", "shape": [0], "parameters": empty},
        ]
    }
    request = decode(*json_request(header))
    assert request.input("J").shape == (0, 3) and request.input("J").data.dtype == np.float16
    assert request.input("B").shape == (2, 0)
    assert request.input("S").shape == (0,)


def test_custom_input_parameters_reach_the_model():
    header = {
        "inputs": [
            {
                "name": "X",
                "datatype": "INT32",
                "shape": [1],
                "parameters": {"binary_data_size": 4, "note": "kept"},
            }
        ]
    }
    tensor = decode(*json_request(header, np.int32(5).tobytes())).input("X")
    assert tensor.parameters == {"note": "kept"}


# --------------------------------------------------------------------------------------------
# raw binary requests (Inference-Header-Content-Length: 0)


def test_raw_request_with_batching_and_variable_dim():
    array = np.arange(10, dtype=np.float32)
    spec = RawInputSpec("IN", "FP32", (-1,), max_batch_size=8)
    request = decode(array.tobytes(), {HEADER_LENGTH: "0"}, raw_input=spec)
    tensor = request.input("IN")
    assert tensor.shape == (1, 10)
    np.testing.assert_array_equal(tensor.data[0], array)
    assert request.parameters == {"binary_data_output": True}
    assert request.outputs == []


def test_raw_request_fixed_shape_without_batching():
    array = np.arange(6, dtype=np.int16).reshape(2, 3)
    spec = RawInputSpec("IN", "INT16", (2, 3))
    tensor = decode(array.tobytes(), {HEADER_LENGTH: "0"}, raw_input=spec).input("IN")
    np.testing.assert_array_equal(tensor.data, array)


def test_raw_bytes_request_is_one_element():
    spec = RawInputSpec("TEXT", "BYTES", (1,), max_batch_size=4)
    tensor = decode(b"\x00raw \xff text", {HEADER_LENGTH: "0"}, raw_input=spec).input("TEXT")
    assert tensor.shape == (1, 1)
    assert tensor.data[0, 0] == b"\x00raw \xff text"


def test_raw_input_spec_from_model_config():
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name="m", max_batch_size=4)
    config.input.add(name="IN", data_type=mc.TYPE_FP32, dims=[-1])
    assert RawInputSpec.from_model_config(config) == RawInputSpec("IN", "FP32", (-1,), 4)
    array = np.arange(3, dtype=np.float32)
    tensor = decode(array.tobytes(), {HEADER_LENGTH: "0"}, raw_input=config).input("IN")
    assert tensor.shape == (1, 3)
    config.input.add(name="IN2", data_type=mc.TYPE_FP32, dims=[1])
    assert RawInputSpec.from_model_config(config) is None


@pytest.mark.parametrize(
    ("spec", "body", "pattern"),
    [
        (None, b"abcd", r"Raw request must only have 1 input"),
        (RawInputSpec("T", "BYTES", (2,)), b"ab", r"For BYTE datatype raw input 'T'.*shape \[1\]"),
        (RawInputSpec("T", "BYTES", (-1,)), b"ab", r"must have input shape \[1\]"),
        (RawInputSpec("X", "FP32", (-1, -1)), b"abcd", r"more than one variable-sized"),
        (RawInputSpec("X", "FP32", (4,)), b"abcd", r"byte size mismatch for input 'X'.*16, got 4"),
        (RawInputSpec("X", "FP32", (-1,)), b"abcde", r"Expected 4, got 5"),
    ],
)
def test_raw_request_errors(spec, body, pattern):
    with fails(StatusCode.INVALID_ARG, pattern):
        decode(body, {HEADER_LENGTH: "0"}, raw_input=spec)


def test_raw_request_rejects_a_bare_model_input():
    from tritonclient.grpc import model_config_pb2 as mc

    with pytest.raises(TypeError):
        decode(b"abcd", {HEADER_LENGTH: "0"}, raw_input=mc.ModelInput(name="X", dims=[1]))


# --------------------------------------------------------------------------------------------
# request decoding errors

_FP32_1 = {"name": "X", "datatype": "FP32", "shape": [1]}
_BIN4 = {**_FP32_1, "parameters": {"binary_data_size": 4}}
_CONTENT_FIELDS = r"^Input must set only one of the following fields: 'data', 'binary_data_size'"


def _inputs(*entries):
    return {"inputs": list(entries)}


@pytest.mark.parametrize(
    ("header", "binary", "code", "pattern"),
    [
        pytest.param({}, b"", StatusCode.INVALID_ARG,
                     r"^Unable to parse 'inputs': attempt to access non-existing object member",
                     id="no-inputs"),
        pytest.param({"inputs": {}}, b"", StatusCode.INVALID_ARG,
                     r"Unable to parse 'inputs': attempt to access JSON non-array as array",
                     id="inputs-not-list"),
        pytest.param(_inputs(3), b"", StatusCode.INVALID_ARG, r"non-object as object",
                     id="input-not-object"),
        pytest.param(_inputs({"datatype": "FP32", "shape": [1], "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'name'", id="no-name"),
        pytest.param(_inputs({"name": 1, "datatype": "FP32", "shape": [1], "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'name': .*non-string",
                     id="name-not-string"),
        pytest.param(_inputs({"name": "X", "shape": [1], "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'datatype'", id="no-datatype"),
        pytest.param(_inputs({"name": "X", "datatype": "FP32", "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'shape'", id="no-shape"),
        pytest.param(_inputs({**_FP32_1, "shape": [-1], "data": [1]}), b"",
                     StatusCode.INVALID_ARG,
                     r"^Unable to parse 'shape': .*non-unsigned-integer", id="negative-dim"),
        pytest.param(_inputs({**_FP32_1, "shape": [1.5], "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'shape'", id="float-dim"),
        pytest.param(_inputs({**_FP32_1, "shape": [True], "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'shape'", id="bool-dim"),
        pytest.param(_inputs({**_FP32_1, "shape": "1", "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'shape'", id="shape-not-list"),
        pytest.param(_inputs({**_FP32_1, "shape": [2**40, 2**40], "data": [1]}), b"",
                     StatusCode.INVALID_ARG,
                     r"^invalid shape for input 'X': shape \[1099511627776,1099511627776\] "
                     r"causes total element count to exceed", id="shape-overflow"),
        pytest.param(_inputs({**_FP32_1, "datatype": "FP8", "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^invalid datatype 'FP8' for input 'X'",
                     id="unknown-datatype"),
        pytest.param(_inputs(_FP32_1), b"", StatusCode.INVALID_ARG,
                     _CONTENT_FIELDS + r".*But no field is set$", id="no-content"),
        pytest.param(_inputs({**_BIN4, "data": [1]}), b"1234", StatusCode.INVALID_ARG,
                     _CONTENT_FIELDS + r".*But set 'data' 'binary_data_size'$",
                     id="data-and-binary"),
        pytest.param(_inputs({**_FP32_1, "data": [1],
                              "parameters": {"shared_memory_region": "r"}}), b"",
                     StatusCode.INVALID_ARG, r"But set 'data' 'shared_memory_region'$",
                     id="data-and-shm"),
        pytest.param(_inputs({**_FP32_1, "parameters": {"binary_data_size": -4}}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'binary_data_size'",
                     id="negative-binary-size"),
        pytest.param(_inputs({**_FP32_1, "parameters": []}), b"", StatusCode.INVALID_ARG,
                     r"^Unable to parse 'parameters'", id="input-parameters-not-object"),
        pytest.param(_inputs(_BIN4), b"12", StatusCode.INVALID_ARG,
                     r"^unexpected size for input 'X', expecting 2 additional bytes for model "
                     r"'model'$", id="binary-too-short"),
        pytest.param(_inputs(_BIN4), b"123456", StatusCode.INVALID_ARG,
                     r"^unexpected additional input data for model 'model'$",
                     id="binary-too-long"),
        pytest.param(_inputs({**_BIN4, "shape": [2]}), b"1234", StatusCode.INVALID_ARG,
                     r"^input byte size mismatch for input 'X' for model 'model'. "
                     r"Expected 8, got 4$", id="binary-size-vs-shape"),
        pytest.param(_inputs({"name": "S", "datatype": "BYTES", "shape": [1],
                              "parameters": {"binary_data_size": 6}}), b"\x05\x00\x00\x00ab",
                     StatusCode.INVALID_ARG,
                     r"unexpected end of BYTES tensor data for input 'S'", id="bytes-truncated"),
        pytest.param(_inputs({"name": "S", "datatype": "BYTES", "shape": [2],
                              "parameters": {"binary_data_size": 5}}), b"\x01\x00\x00\x00a",
                     StatusCode.INVALID_ARG, r"expected 2 string elements, got 1",
                     id="bytes-count"),
        pytest.param(_inputs({**_FP32_1, "shape": [3], "data": [1, 2]}), b"",
                     StatusCode.INVALID_ARG,
                     r"^Unable to parse 'data' for input 'X': shape \[3\] has 3 elements but "
                     r"'data' has 2$", id="json-count"),
        pytest.param(_inputs({**_FP32_1, "data": 1.0}), b"", StatusCode.INVALID_ARG,
                     r"^Unable to parse 'data': attempt to access JSON non-array as array$",
                     id="json-data-not-list"),
        pytest.param(_inputs({**_FP32_1, "data": [True]}), b"", StatusCode.INVALID_ARG,
                     r"non-number as double", id="json-bool-as-float"),
        pytest.param(_inputs({**_FP32_1, "data": ["1"]}), b"", StatusCode.INVALID_ARG,
                     r"non-number as double", id="json-string-as-float"),
        pytest.param(_inputs({**_FP32_1, "data": [None]}), b"", StatusCode.INVALID_ARG,
                     r"non-number as double", id="json-null"),
        pytest.param(_inputs({**_FP32_1, "datatype": "INT32", "data": [1.5]}), b"",
                     StatusCode.INVALID_ARG, r"non-signed-integer as signed-integer",
                     id="json-float-as-int"),
        pytest.param(_inputs({**_FP32_1, "datatype": "INT64", "data": [2**63]}), b"",
                     StatusCode.INVALID_ARG, r"non-signed-integer", id="json-int64-overflow"),
        pytest.param(_inputs({**_FP32_1, "datatype": "UINT8", "data": [-1]}), b"",
                     StatusCode.INVALID_ARG, r"non-unsigned-integer as unsigned-integer",
                     id="json-negative-unsigned"),
        pytest.param(_inputs({**_FP32_1, "datatype": "BOOL", "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"non-boolean as boolean", id="json-int-as-bool"),
        pytest.param(_inputs({**_FP32_1, "datatype": "BYTES", "data": [1]}), b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'data' for input 'X': .*"
                     r"non-string as string$", id="json-number-as-bytes"),
        pytest.param(_inputs({**_FP32_1, "datatype": "FP16", "data": [1.0]}), b"",
                     StatusCode.INVALID_ARG,
                     r"^receiving FP16 data via JSON is not supported. Please use the binary "
                     r"data format for input X$", id="json-fp16"),
        pytest.param(_inputs({**_FP32_1, "datatype": "BF16", "data": [1.0]}), b"",
                     StatusCode.INVALID_ARG, r"^receiving BF16 data via JSON is not supported",
                     id="json-bf16"),
        pytest.param(_inputs({**_FP32_1, "data": [1]}, {**_FP32_1, "data": [2]}), b"",
                     StatusCode.INVALID_ARG,
                     r"^\[request id: <id_unknown>\] input 'X' already exists in request$",
                     id="duplicate-input"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "id": 7}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'id': .*non-string",
                     id="id-not-string"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "parameters": [1]}, b"",
                     StatusCode.INVALID_ARG, r"^failed to get request params", id="params-list"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "parameters": {"triton_x": 1}}, b"",
                     StatusCode.INVALID_ARG,
                     r"^parameter keys starting with 'triton_' are reserved for Triton usage",
                     id="triton-prefix"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "parameters": {"priority": -1}}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'priority': .*unsigned",
                     id="priority-negative"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "parameters": {"timeout": 1.5}}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'timeout'", id="timeout-float"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "parameters": {"sequence_start": 1}}, b"", StatusCode.INVALID_ARG,
                     r"^Unable to parse 'sequence_start': .*boolean", id="sequence-start-int"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "parameters": {"sequence_id": -3}}, b"", StatusCode.INVALID_ARG,
                     r"^Unable to parse 'sequence_id'", id="sequence-id-negative"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "parameters": {"binary_data_output": "yes"}}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'binary_data_output'",
                     id="binary-data-output-string"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "parameters": {"p": [1]}}, b"",
                     StatusCode.INVALID_ARG,
                     r"^parameter 'p' has invalid type. It should be either 'int', 'bool', or "
                     r"'string'.$", id="custom-param-list"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "parameters": {"p": None}}, b"",
                     StatusCode.INVALID_ARG, r"^parameter 'p' has invalid type",
                     id="custom-param-null"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "outputs": {}}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'outputs': .*non-array",
                     id="outputs-not-list"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "outputs": ["Y"]}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'outputs': .*non-object",
                     id="output-not-object"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}), "outputs": [{}]}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'name'", id="output-no-name"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "outputs": [{"name": "Y", "parameters": {"binary_data": 1}}]}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to parse 'binary_data': .*boolean",
                     id="output-binary-data-int"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "outputs": [{"name": "Y", "parameters": {"classification": -2}}]}, b"",
                     StatusCode.INVALID_ARG, r"^Unable to set 'classification': .*unsigned",
                     id="output-classification-negative"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "outputs": [{"name": "Y", "parameters": {"classification": 2,
                                                               "shared_memory_region": "r"}}]},
                     b"", StatusCode.INVALID_ARG,
                     r"^Output can't set both 'shared_memory_region' and 'classification'$",
                     id="output-shm-and-classification"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "outputs": [{"name": "Y", "parameters": {"binary_data": True,
                                                               "shared_memory_region": "r"}}]},
                     b"", StatusCode.INVALID_ARG,
                     r"^Output can't set both 'shared_memory_region' and 'binary_data'$",
                     id="output-shm-and-binary"),
        pytest.param({**_inputs({**_FP32_1, "data": [1]}),
                      "outputs": [{"name": "Y", "parameters": {"shared_memory_region": "r"}}]},
                     b"", StatusCode.NOT_FOUND,
                     r"^Unable to find shared memory region: 'r'$", id="output-shm-unknown"),
        pytest.param(_inputs({**_FP32_1, "parameters": {"shared_memory_region": "r",
                                                         "shared_memory_byte_size": 4}}),
                     b"", StatusCode.NOT_FOUND, r"^Unable to find shared memory region: 'r'$",
                     id="input-shm-unknown"),
    ],
)  # fmt: skip
def test_decode_errors(header, binary, code, pattern):
    with fails(code, pattern):
        decode(*json_request(header, binary))


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (b'{"inputs": [', r"^failed to parse the request JSON buffer: .* at \d+$"),
        (b"", r"^failed to parse the request JSON buffer: "),
        (b"[1, 2]", r"^failed to parse the request JSON buffer: the document root must be"),
        (b'{"id": "\xff\xfe"}', r"^failed to parse the request JSON buffer: "),
        (b"[" * 100_000 + b"]" * 100_000, r"^failed to parse the request JSON buffer: "),
    ],
    ids=["truncated", "empty", "array-root", "invalid-utf8", "deep-nesting"],
)
def test_unparsable_json_header(body, pattern):
    with fails(StatusCode.INVALID_ARG, pattern):
        decode(body, {})


def test_binary_data_without_header_length_is_a_json_error():
    body, _ = client_request([infer_input("IN", np.ones(4, np.float32), "FP32")])
    with fails(StatusCode.INVALID_ARG, r"^failed to parse the request JSON buffer"):
        decode(body, {})


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ("abc", r"^Unable to parse Inference-Header-Content-Length, got: abc$"),
        ("", r"^Unable to parse Inference-Header-Content-Length"),
        ("1.5", r"^Unable to parse Inference-Header-Content-Length"),
        ("-1", r"^inference header size should be in range \(0, 10\), got: -1$"),
        ("11", r"^inference header size should be in range \(0, 10\), got: 11$"),
    ],
)
def test_bad_inference_header_length(value, pattern):
    with fails(StatusCode.INVALID_ARG, pattern):
        decode(b"0123456789", {HEADER_LENGTH: value})


def test_unsupported_content_encoding():
    with fails(StatusCode.UNSUPPORTED, r"^Unsupported compression type$") as info:
        decode(b"{}", {"Content-Encoding": "br"})
    status, body, headers = encode_error(pickle.loads(pickle.dumps(info.value)))  # Ray-safe
    assert status == 501
    assert json.loads(body) == {"error": "Unsupported compression type"}
    assert headers == {"Content-Type": "application/json", "Accept-Encoding": "gzip, deflate"}


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (b"", r"^nothing to be decompressed$"),
        (b"definitely not gzip", r"^failed to decompress the request body"),
        (gzip.compress(b'{"inputs": []}')[:-12], r"^failed to decompress the request body"),
    ],
    ids=["empty", "garbage", "truncated"],
)
def test_corrupt_compressed_body(body, pattern):
    with fails(StatusCode.INVALID_ARG, pattern):
        decode(body, {"Content-Encoding": "gzip"})


def test_decompression_is_capped():
    bomb = gzip.compress(b"{" + b" " * 10_000 + b"}")
    with fails(StatusCode.INVALID_ARG, r"^Decompressed data size exceeds the maximum allowed "):
        decode(bomb, {"Content-Encoding": "gzip"}, max_decompressed_size=1000)


# --------------------------------------------------------------------------------------------
# response encoding


OUTPUT_CASES = [
    ("FP32", np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)),
    ("FP64", np.array([1e300, -0.1], dtype=np.float64)),
    ("INT64", np.array([[-(2**63), 2**63 - 1]], dtype=np.int64)),
    ("UINT64", np.array([2**64 - 1], dtype=np.uint64)),
    ("INT8", np.array([-5, 5], dtype=np.int8)),
    ("UINT16", np.array([[1], [65535]], dtype=np.uint16)),
    ("BOOL", np.array([[True, False], [False, True]])),
    ("BYTES", np.array([b"alpha", b"", "ü".encode()], dtype=np.object_)),
]


@pytest.mark.parametrize(("datatype", "array"), OUTPUT_CASES)
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_outputs_round_trip_through_tritonclient(datatype, array, binary):
    request = InferRequest("model", [], "1", outputs=[RequestedOutput("OUT", binary_data=binary)])
    body, headers = encode([InferTensor("OUT", datatype, array)], request)
    if binary:
        assert headers["Content-Type"] == "application/octet-stream"
        assert int(headers[HEADER_LENGTH]) < len(body)
    else:
        assert headers == {"Content-Type": "application/json"}
    result = client_result(body, headers)
    output = result.as_numpy("OUT")
    assert output.shape == array.shape
    if datatype == "BYTES":
        expected = [item.decode() for item in array.reshape(-1)]
        assert [item.decode() if isinstance(item, bytes) else item
                for item in output.reshape(-1)] == expected  # fmt: skip
    else:
        assert output.dtype == array.dtype
        np.testing.assert_array_equal(output, array)
    entry = result.get_output("OUT")
    assert entry["datatype"] == datatype and entry["shape"] == list(array.shape)


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP16", np.array([[0.5, -1.0]], dtype=np.float16)),
        ("BF16", np.array([1.0, -2.5], dtype=ml_dtypes.bfloat16)),
    ],
)
def test_half_precision_outputs_binary_only(datatype, array):
    binary = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    body, headers = encode([InferTensor("OUT", datatype, array)], binary)
    output = client_result(body, headers).as_numpy("OUT")
    np.testing.assert_array_equal(output.astype(np.float32), array.astype(np.float32))
    with fails(
        StatusCode.INVALID_ARG,
        rf"^sending {datatype} data via JSON is not supported. Please use the binary data "
        "format for output$",
    ):
        encode([InferTensor("OUT", datatype, array)])


def test_binary_selection_rules():
    """Listed outputs follow their own binary_data (default JSON); unlisted ones the request's."""
    tensors = [InferTensor(name, "INT32", np.array([1], np.int32)) for name in "ABCD"]
    request = InferRequest(
        "model",
        [],
        "1",
        parameters={"binary_data_output": True},
        outputs=[
            RequestedOutput("A", binary_data=True),
            RequestedOutput("B", binary_data=False),
            RequestedOutput("C"),  # binary_data not given: JSON, as in Triton
        ],
    )
    body, headers = encode(tensors, request)
    outputs = {o["name"]: o for o in response_json(body, headers)["outputs"]}
    assert outputs["A"]["parameters"] == {"binary_data_size": 4} and "data" not in outputs["A"]
    assert outputs["B"]["data"] == [1] and "parameters" not in outputs["B"]
    assert outputs["C"]["data"] == [1]
    assert outputs["D"]["parameters"] == {"binary_data_size": 4}  # unlisted: binary_data_output

    body, headers = encode(tensors[:1], InferRequest("model", [], "1"))
    assert response_json(body, headers)["outputs"][0]["data"] == [1]  # default is JSON


def test_response_header_layout():
    request = InferRequest("model", [], "3", id="abc")
    response = InferResponse(
        "model", "3", [InferTensor("OUT", "FP32", np.ones((2, 2), np.float32))],
        id="abc", parameters={"sequence_end": True, "n": 2},
    )  # fmt: skip
    body, _ = encode_infer_response(response, request)
    document = json.loads(body)
    assert list(document) == ["id", "model_name", "model_version", "parameters", "outputs"]
    assert document["id"] == "abc" and document["model_version"] == "3"
    assert document["parameters"] == {"sequence_end": True, "n": 2}
    assert document["outputs"] == [
        {"name": "OUT", "datatype": "FP32", "shape": [2, 2], "data": [1.0, 1.0, 1.0, 1.0]}
    ]
    assert b" " not in body  # compact, like Triton's writer

    body, _ = encode([InferTensor("OUT", "FP32", np.ones(1, np.float32))])
    assert list(json.loads(body)) == ["model_name", "model_version", "outputs"]


def test_output_tensor_parameters_are_kept():
    tensor = InferTensor("OUT", "INT32", np.array([1], np.int32), parameters={"note": "x"})
    binary = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    body, headers = encode([tensor], binary)
    entry = response_json(body, headers)["outputs"][0]
    assert entry["parameters"] == {"note": "x", "binary_data_size": 4}
    assert tensor.parameters == {"note": "x"}  # the tensor itself is not modified


def test_binary_data_follows_in_output_order():
    a = np.arange(5, dtype=np.int16)
    b = np.array([b"xy", b"z"], dtype=np.object_)
    c = np.arange(3, dtype=np.float64)
    request = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    tensors = [InferTensor("A", "INT16", a), InferTensor("B", "BYTES", b),
               InferTensor("C", "FP64", c)]  # fmt: skip
    body, headers = encode(tensors, request)
    length = int(headers[HEADER_LENGTH])
    assert body[length:] == a.tobytes() + b"\x02\x00\x00\x00xy\x01\x00\x00\x00z" + c.tobytes()
    result = client_result(body, headers)
    np.testing.assert_array_equal(result.as_numpy("A"), a)
    assert result.as_numpy("B").tolist() == [b"xy", b"z"]
    np.testing.assert_array_equal(result.as_numpy("C"), c)


def test_empty_binary_output_sends_plain_json():
    request = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    body, headers = encode([InferTensor("E", "FP32", np.zeros((0, 4), np.float32))], request)
    assert headers == {"Content-Type": "application/json"}  # no binary bytes follow, as Triton
    entry = json.loads(body)["outputs"][0]
    assert entry["parameters"] == {"binary_data_size": 0}
    assert client_result(body, headers).as_numpy("E").shape == (0, 4)


def test_non_contiguous_and_mistyped_output_arrays():
    data = np.arange(12, dtype=np.float64).reshape(3, 4).T  # Fortran order, float64 for FP32
    request = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    body, headers = encode([InferTensor("OUT", "FP32", data)], request)
    np.testing.assert_array_equal(client_result(body, headers).as_numpy("OUT"), data)


def test_json_non_finite_floats_round_trip():
    array = np.array([np.nan, np.inf, -np.inf, 1.5], dtype=np.float32)
    body, headers = encode([InferTensor("OUT", "FP32", array)])
    assert b"NaN" in body and b"Infinity" in body  # Triton's writer uses these literals
    np.testing.assert_array_equal(client_result(body, headers).as_numpy("OUT"), array)


def test_json_bytes_that_are_not_utf8_are_written_verbatim():
    array = np.array([b"ok", b"\xff\xfe"], dtype=np.object_)
    body, _ = encode([InferTensor("OUT", "BYTES", array)])
    assert b'"data":["ok","\xff\xfe"]' in body  # raw bytes, as Triton writes them


def test_json_bytes_output_accepts_str_elements():
    array = np.array(["a", "ß"], dtype=np.object_)
    body, _ = encode([InferTensor("OUT", "BYTES", array)])
    assert json.loads(body)["outputs"][0]["data"] == ["a", "ß"]


def test_large_binary_response():
    array = np.random.default_rng(1).random((256, 1024), dtype=np.float32)  # 1 MiB
    request = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    body, headers = encode([InferTensor("OUT", "FP32", array)], request)
    assert len(body) == int(headers[HEADER_LENGTH]) + array.nbytes
    np.testing.assert_array_equal(client_result(body, headers).as_numpy("OUT"), array)


@pytest.mark.parametrize(
    ("accept", "coding"),
    [
        (None, None),
        ("", None),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("br", None),
        ("gzip;q=0.5, deflate;q=0.8", "deflate"),
        ("deflate;q=0.1, identity;q=0.9, gzip;q=0.5", None),
        ("gzip;q=0", None),
        ("gzip, deflate", "gzip"),
    ],
)
def test_response_compression(accept, coding):
    request = InferRequest("model", [], "1", parameters={"binary_data_output": True})
    array = np.arange(1000, dtype=np.int32)
    body, headers = encode([InferTensor("OUT", "INT32", array)], request, accept)
    assert headers.get("Content-Encoding") == coding
    if coding == "gzip":
        assert body[:2] == b"\x1f\x8b"
    np.testing.assert_array_equal(client_result(body, headers).as_numpy("OUT"), array)


def test_classification_outputs_encode_as_bytes():
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]], dtype=np.float32)
    request = InferRequest(
        "model", [], "1", outputs=[RequestedOutput("PROB", binary_data=True, class_count=2)]
    )
    response = InferResponse("model", "1", [InferTensor("PROB", "FP32", scores)])
    apply_classification(response, request.outputs, {"PROB": ["a", "b", "c"]}, batched=True)
    body, headers = encode_infer_response(response, request)
    result = client_result(body, headers)
    assert result.get_output("PROB")["datatype"] == "BYTES"
    assert result.as_numpy("PROB").tolist() == [
        [b"0.700000:1:b", b"0.200000:2:c"],
        [b"0.500000:0:a", b"0.300000:1:b"],
    ]


# --------------------------------------------------------------------------------------------
# full loop: client request -> decode -> echo model -> encode -> client result


@pytest.mark.parametrize("accept", [None, "gzip", "deflate"])
@pytest.mark.parametrize("request_coding", [None, "gzip", "deflate"])
def test_client_loop(accept, request_coding):
    a = np.random.default_rng(2).random((4, 8), dtype=np.float32)
    s = np.array([b"x", b"yy"], dtype=np.object_)
    inputs = [infer_input("A", a, "FP32"), infer_input("S", s, "BYTES", binary=False)]
    outputs = [httpclient.InferRequestedOutput("A"),
               httpclient.InferRequestedOutput("S", binary_data=False)]  # fmt: skip
    body, headers = client_request(inputs, outputs, request_id="loop")
    if request_coding == "gzip":
        body = gzip.compress(body)
    elif request_coding == "deflate":
        body = zlib.compress(body)
    if request_coding:
        headers["Content-Encoding"] = request_coding

    request = decode(body, headers)
    response = InferResponse("model", "1", list(request.inputs), id=request.id)
    out_body, out_headers = encode_infer_response(response, request, accept)
    result = client_result(out_body, out_headers)
    assert result.get_response()["id"] == "loop"
    np.testing.assert_array_equal(result.as_numpy("A"), a)
    assert result.as_numpy("S").tolist() == ["x", "yy"]


# --------------------------------------------------------------------------------------------
# errors and plain JSON bodies


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (StatusCode.INVALID_ARG, 400),
        (StatusCode.NOT_FOUND, 404),
        (StatusCode.INTERNAL, 500),
        (StatusCode.UNAVAILABLE, 503),
        (StatusCode.UNSUPPORTED, 501),
        (StatusCode.ALREADY_EXISTS, 400),
        (StatusCode.CANCELLED, 400),
        (StatusCode.UNKNOWN, 400),
    ],
)
def test_encode_error_status(code, status):
    result = encode_error(InferenceServerError('boom "quoted" é', code))
    assert result[0] == status
    assert json.loads(result[1]) == {"error": 'boom "quoted" é'}
    assert result[2] == {"Content-Type": "application/json"}


def test_encode_error_from_message_and_exception():
    assert encode_error("bad")[0] == 400
    assert encode_error("gone", StatusCode.NOT_FOUND)[0] == 404
    status, body, _ = encode_error(RuntimeError("kaput"))
    assert status == 500 and json.loads(body) == {"error": "kaput"}


def test_json_documents_are_compact():
    body = json_dumps({"name": "triton", "v": [1, 2], "n": np.int64(3)})
    assert body == b'{"name":"triton","v":[1,2],"n":3}'


def test_compression_module_coding_parser():
    assert compression.response_coding("GZIP") == "gzip"
    assert compression.response_coding("gzip ; q = 0.7, deflate;q=0.7") == "gzip"  # first wins
    assert compression.response_coding("gzip;q=abc, deflate") == "deflate"
    assert compression.response_coding("*") == "identity"
    assert compression.request_coding(" X-GZIP ") == "gzip"
    assert compression.compress_body(b"abc", "identity") == b"abc"


@pytest.mark.parametrize(
    "body",
    [
        b'{"id":"\\ud800","inputs":[]}',
        b'{"inputs":[{"name":"X","datatype":"\\udfff","shape":[1],"data":[NaN]}]}',
        b'{"parameters":{"\\udc00":1},"inputs":[]}',
    ],
    ids=["id", "datatype-with-nan", "parameter-key"],
)
def test_lone_surrogate_escapes_are_refused_as_rapidjson_does(body):
    with fails(StatusCode.INVALID_ARG, r"^failed to parse the request JSON buffer: The surrogate"):
        decode(body, {})


def test_paired_surrogate_escapes_are_one_character():
    body = b'{"id":"\\ud83d\\ude00","inputs":[]}'
    assert decode(body, {}).id == "\U0001f600"


def test_json_documents_with_a_lone_surrogate_are_still_valid_json():
    assert json.loads(json_dumps({"error": "bad \ud800"})) == {"error": "bad \ud800"}
