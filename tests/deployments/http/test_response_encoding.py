"""HTTP response encoding (``deployments/http/response_encoding.py``): responses parsed
by tritonclient's own response parser, and Triton's error bodies."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from deployments.core.classification import apply_classification
from deployments.http import encode_error, encode_infer_response
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor, RequestedOutput
from tests.deployments.http.codec_helpers import (
    HEADER_LENGTH,
    client_result,
    encode,
    fails,
    response_json,
)

pytestmark = pytest.mark.usefixtures("json_backend")  # every test on each JSON path (conftest)


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
# errors


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
