"""HTTP request decoding (``deployments/http/request_decoding.py``): bodies built by
tritonclient's own request builder, raw binary requests, and Triton's errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient

from deployments.http import RawInputSpec
from repo_adapter.errors import StatusCode
from repo_adapter.inference_types import RequestedOutput
from tests.deployments.http.codec_helpers import (
    HEADER_LENGTH,
    client_request,
    decode,
    fails,
    infer_input,
    json_request,
)

pytestmark = pytest.mark.usefixtures("json_backend")  # every test on each JSON path (conftest)


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
