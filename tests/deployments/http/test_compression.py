"""HTTP compression (``deployments/http/compression.py``): compressed request bodies,
compressed responses, and the codings of a full client loop."""

from __future__ import annotations

import gzip
import json
import pickle
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient

from deployments.http import compression, encode_error, encode_infer_response
from repo_adapter.errors import StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from tests.deployments.http.codec_helpers import (
    client_request,
    client_result,
    decode,
    encode,
    fails,
    infer_input,
)

pytestmark = pytest.mark.usefixtures("json_backend")  # every test on each JSON path (conftest)


# --------------------------------------------------------------------------------------------
# request bodies (Content-Encoding)


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
# responses (Accept-Encoding)


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


def test_compression_module_coding_parser():
    assert compression.response_coding("GZIP") == "gzip"
    assert compression.response_coding("gzip ; q = 0.7, deflate;q=0.7") == "gzip"  # first wins
    assert compression.response_coding("gzip;q=abc, deflate") == "deflate"
    assert compression.response_coding("*") == "identity"
    assert compression.request_coding(" X-GZIP ") == "gzip"
    assert compression.compress_body(b"abc", "identity") == b"abc"


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
