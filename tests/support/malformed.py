"""Malformed inference requests for both protocols, drawn from a seed (the fuzz suite and the
soak use them).

Each is a valid request for the test repository's ``batch_recorder`` (FP32 ``IN`` [2]) with one
to three mutations drawn from ``random.Random(seed)``; the mutations applied are returned with
it, so a failure names what reproduces it.
"""

from __future__ import annotations

import gzip
import http.client
import json
import random
import struct
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"

# ---------------------------------------------------------------------------------------- HTTP

_BAD_SHAPES = [[], [-1, 2], [0, 2], [1, 3], [2**40, 2], [2**62, 2**62], ["a"], [1.5, 2], None, {}]
_BAD_DATATYPES = ["FP64", "INT8", "BYTES", "XYZ", "", 5, None, "fp32"]
_BAD_DATA = [[], ["x"], [[1, 2], [3]], [1] * 1000, "abc", None, [True, False], [{"a": 1}], [1e308]]
_BAD_NAMES = ["", "OUT", "../../etc/passwd", "IN\x00", None, 5, "IN" * 5000]
_BAD_PARAMETERS = [
    {"binary_data_size": -1},
    {"binary_data_size": "x"},
    {"classification": "x"},
    {"shared_memory_region": "r"},
    "notadict",
]
_BAD_TOP = [
    {"priority": "high"},
    {"timeout": -5},
    {"sequence_id": [1]},
    {"binary_data_output": "yes"},
    [],
]
_BAD_MODELS = [
    "no_such_model",
    "..%2Fbatch_recorder",
    "batch_recorder/versions/abc",
    "batch_recorder/versions/99999999999999999999",
    "batch_recorder/versions/-1",
    "%00",
    "a" * 2000,
]


def _valid_json() -> dict[str, Any]:
    return {"inputs": [{"name": "IN", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}


def http_case(seed: int) -> tuple[str, str, dict[str, str], bytes, list[str]]:
    """``(method, path, headers, body, mutations)`` of one malformed request."""
    rng = random.Random(seed)
    document: Any = _valid_json()
    tensor = document["inputs"][0]
    path = "/v2/models/batch_recorder/infer"
    headers = {"Content-Type": "application/json"}
    method = "POST"
    applied: list[str] = []
    body: bytes | None = None
    root = ""
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(
            [
                "shape", "datatype", "data", "name", "drop", "outputs", "input parameters",
                "top parameters", "id", "model", "method", "truncate", "flip", "utf8",
                "surrogate", "nesting", "root", "empty", "binary", "gzip", "inputs",
            ]
        )  # fmt: skip
        applied.append(kind)
        if kind == "shape":
            tensor["shape"] = rng.choice(_BAD_SHAPES)
        elif kind == "datatype":
            tensor["datatype"] = rng.choice(_BAD_DATATYPES)
        elif kind == "data":
            tensor["data"] = rng.choice(_BAD_DATA)
        elif kind == "name":
            tensor["name"] = rng.choice(_BAD_NAMES)
        elif kind == "drop":
            tensor.pop(rng.choice(["name", "shape", "datatype", "data"]), None)
        elif kind == "inputs":
            document["inputs"] = rng.choice([[], [tensor, tensor], "x", None, [5], [{}]])
            if not isinstance(document["inputs"], list) or not document["inputs"]:
                tensor = {}
        elif kind == "outputs":
            document["outputs"] = rng.choice([[{"name": "nope"}], [{"name": 5}], "x", [{}], [7]])
        elif kind == "input parameters":
            tensor["parameters"] = rng.choice(_BAD_PARAMETERS)
        elif kind == "top parameters":
            document["parameters"] = rng.choice(_BAD_TOP)
        elif kind == "id":
            document["id"] = rng.choice([5, {"a": 1}, None, "x" * 100_000])
        elif kind == "model":
            path = f"/v2/models/{rng.choice(_BAD_MODELS)}/infer"
        elif kind == "method":
            method = rng.choice(["GET", "PUT", "DELETE"])
        elif kind == "root":
            root = rng.choice(["array", "text", "number", "null"])
        elif kind == "empty":
            body = b""
        elif kind == "nesting":
            body = b"[" * rng.choice([1000, 100_000]) + b"]" * 10
        if kind in ("truncate", "flip", "utf8", "surrogate", "binary", "gzip") and body is None:
            body = json.dumps(_rooted(document, root)).encode()
        if body is not None and kind == "truncate":
            body = body[: rng.randrange(max(len(body), 1))]
        elif body is not None and kind == "flip":
            data = bytearray(body)
            for _ in range(rng.randint(1, 8)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            body = bytes(data)
        elif body is not None and kind == "utf8":
            at = rng.randrange(len(body) + 1)
            body = body[:at] + rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80"]) + body[at:]
        elif body is not None and kind == "surrogate":
            body = body.replace(b'"IN"', b'"\\ud800"', 1) if b'"IN"' in body else body + b'"\\ud800'
        elif body is not None and kind == "binary":
            header_length = rng.choice([-1, 0, len(body) + 10, 2**63, "abc", len(body) // 2])
            headers["Inference-Header-Content-Length"] = str(header_length)
            body += rng.randbytes(rng.choice([0, 3, 8, 64]))
            headers["Content-Type"] = "application/octet-stream"
        elif body is not None and kind == "gzip":
            headers["Content-Encoding"] = rng.choice(["gzip", "deflate", "br", "zstd"])
            if rng.random() < 0.5:
                body = gzip.compress(body)[: rng.randrange(1, 40)]
    if body is None:
        body = json.dumps(_rooted(document, root)).encode()
    return method, path, headers, body, applied


def _rooted(document: dict[str, Any], root: str) -> Any:
    """The request document, or something else at the JSON root."""
    return {"array": [document], "text": "text", "number": 42, "null": None}.get(root, document)


def send_http(url: str, method: str, path: str, headers: dict[str, str], body: bytes):
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body if method != "GET" else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


# ---------------------------------------------------------------------------------------- gRPC


def _valid_grpc() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="batch_recorder")
    tensor = request.inputs.add(name="IN", datatype="FP32", shape=[1, 2])
    del tensor  # raw contents carry the data
    request.raw_input_contents.append(np.array([[1.0, 2.0]], np.float32).tobytes())
    return request


def grpc_case(seed: int) -> tuple[bytes, list[str]]:
    """A serialized malformed ``ModelInferRequest`` and the mutations applied."""
    rng = random.Random(seed)
    request = _valid_grpc()
    applied: list[str] = []
    corrupt = None
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(
            [
                "shape", "datatype", "raw length", "both contents", "contents type", "drop input",
                "duplicate input", "extra raw", "model", "version", "outputs", "parameters",
                "bytes prefix", "truncate", "flip", "name",
            ]
        )  # fmt: skip
        applied.append(kind)
        tensor = request.inputs[0] if request.inputs else request.inputs.add(name="IN")
        if kind == "shape":
            del tensor.shape[:]
            tensor.shape.extend(
                rng.choice([[], [-1, 2], [0, 2], [1, 3], [2**40, 2], [2**62, 2**62], [1] * 64])
            )
        elif kind == "datatype":
            tensor.datatype = rng.choice(["FP64", "INT8", "BYTES", "XYZ", "", "BF16", "fp32"])
        elif kind == "raw length" and request.raw_input_contents:
            raw = request.raw_input_contents[0]
            request.raw_input_contents[0] = rng.choice([b"", raw[:3], raw + b"\x00" * 5])
        elif kind == "both contents":
            tensor.contents.fp32_contents.extend([1.0, 2.0])
        elif kind == "contents type":
            del request.raw_input_contents[:]
            tensor.contents.int64_contents.extend([1, 2])
        elif kind == "drop input":
            del request.inputs[:]
        elif kind == "duplicate input":
            request.inputs.add().CopyFrom(tensor)
        elif kind == "extra raw":
            request.raw_input_contents.append(b"\x01\x02")
        elif kind == "model":
            request.model_name = rng.choice(["no_such", "", "../batch_recorder", "a" * 3000])
        elif kind == "version":
            request.model_version = rng.choice(["abc", "-1", "99999999999999999999", "7"])
        elif kind == "outputs":
            request.outputs.add(name=rng.choice(["nope", "", "OUT" * 1000]))
        elif kind == "parameters":
            choice = rng.choice(["priority", "timeout", "sequence_id", "binary_data_size"])
            field, value = rng.choice(
                [("string_param", "x"), ("bool_param", True), ("int64_param", -5)]
            )
            setattr(request.parameters[choice], field, value)
        elif kind == "bytes prefix":
            tensor.datatype = "BYTES"
            del tensor.shape[:]
            tensor.shape.extend([1, 1])
            if request.raw_input_contents:
                request.raw_input_contents[0] = struct.pack("<I", rng.choice([2**31, 99])) + b"ab"
        elif kind == "name":
            tensor.name = rng.choice(["", "OUT", "../../x", "IN\x00"])
        elif kind in ("truncate", "flip"):
            corrupt = kind
    message = request.SerializeToString()
    if corrupt == "truncate" and message:
        message = message[: rng.randrange(len(message))]
    elif corrupt == "flip":
        data = bytearray(message)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        message = bytes(data)
    return message, applied


# What Triton answers malformed requests with; INTERNAL / UNKNOWN would be a server fault.
CLIENT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
