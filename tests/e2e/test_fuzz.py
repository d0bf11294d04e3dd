"""A seeded fuzz of both protocols against a live server: malformed requests get Triton's
client errors, never a 5xx, a reset connection or a crash, and the server answers valid
requests correctly afterwards.

Each request is a valid one for a real model with one to three mutations drawn from a
``random.Random`` seeded per case (``FUZZ_SEED`` overrides the base seed), so a failure names
the seed and the mutations that reproduce it.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import struct
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.malformed import CLIENT_CODES, MODEL_INFER, grpc_case, http_case, send_http
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

TEST_MODELS = Path(__file__).parents[1] / "deployments" / "model_repository"
BASE_SEED = int(os.environ.get("FUZZ_SEED", "20261201"))
HTTP_CASES = 600
# Triton's answer for a feature it does not implement (a Content-Encoding other than gzip or
# deflate): a refusal of the request, with Triton's error body, not a server fault.
UNSUPPORTED = 501
GRPC_CASES = 250
MAX_INPUT_SIZE = 1024 * 1024  # --http-max-input-size, small enough to test both sides of


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    repository = tmp_path_factory.mktemp("fuzz") / "repository"
    for name in ("batch_recorder", "bytes_identity"):
        shutil.copytree(TEST_MODELS / name, repository / name)
    grpc_port = free_port()
    serve_cluster.deploy_live(
        repository, "none", grpc_port=grpc_port, http_max_input_size=MAX_INPUT_SIZE
    )
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def test_malformed_http_requests_get_client_errors(server):
    http_url, _ = server
    problems = []
    statuses: dict[int, int] = {}
    for case in range(HTTP_CASES):
        seed = BASE_SEED + case
        method, path, headers, body, applied = http_case(seed)
        try:
            status, reply = send_http(http_url, method, path, headers, body)
        except (OSError, http.client.HTTPException) as err:  # a reset or closed connection
            problems.append(f"seed {seed} {applied}: {type(err).__name__}: {err}")
            continue
        statuses[status] = statuses.get(status, 0) + 1
        if status >= 500 and status != UNSUPPORTED:
            problems.append(f"seed {seed} {applied}: {status} {reply[:200]!r}")
        if status >= 400:
            try:
                error = json.loads(reply)["error"]
                assert isinstance(error, str) and error
            except Exception:
                problems.append(f"seed {seed} {applied}: {status} without Triton's error body")
    assert not problems, f"{len(problems)} of {HTTP_CASES}:\n" + "\n".join(problems[:20])
    refused = sum(n for s, n in statuses.items() if 400 <= s < 500 or s == UNSUPPORTED)
    assert refused >= HTTP_CASES * 0.9, statuses
    assert_still_serving(server)


def test_malformed_grpc_requests_get_client_errors(server):
    _, grpc_url = server
    problems = []
    with grpc.insecure_channel(grpc_url) as channel:
        infer = channel.unary_unary(MODEL_INFER)
        for case in range(GRPC_CASES):
            seed = BASE_SEED + 10_000 + case
            message, applied = grpc_case(seed)
            try:
                infer(message, timeout=30)
            except grpc.RpcError as err:
                if err.code() not in CLIENT_CODES or not err.details():
                    problems.append(f"seed {seed} {applied}: {err.code()} {err.details()}")
    assert not problems, f"{len(problems)} of {GRPC_CASES}:\n" + "\n".join(problems[:20])
    assert_still_serving(server)


def test_the_http_input_size_limit_holds_on_both_sides(server):
    http_url, _ = server
    header = json.dumps(
        {"inputs": [{"name": "IN", "shape": [4, 2], "datatype": "FP32",
                     "parameters": {"binary_data_size": 32}}]}
    ).encode()  # fmt: skip
    headers = {"Inference-Header-Content-Length": str(len(header))}
    # Just under the limit: served.
    payload = b"x" * (MAX_INPUT_SIZE - 1024)
    words = json.dumps(
        {"inputs": [{"name": "IN", "shape": [1, 1], "datatype": "BYTES",
                     "parameters": {"binary_data_size": 4 + len(payload)}}]}
    ).encode()  # fmt: skip
    under = words + struct.pack("<I", len(payload)) + payload
    assert len(under) < MAX_INPUT_SIZE
    status, reply = send_http(
        http_url,
        "POST",
        "/v2/models/bytes_identity/infer",
        {"Inference-Header-Content-Length": str(len(words))},
        under,
    )
    assert status == 200, reply[:200]
    over = header + b"\0" * (MAX_INPUT_SIZE + 1)
    status, reply = send_http(http_url, "POST", "/v2/models/batch_recorder/infer", headers, over)
    assert status == 400
    assert "exceeds the maximum input size of 1048576 bytes" in json.loads(reply)["error"]
    # A chunked body (no Content-Length) is cut off once it passes the limit.
    connection = http.client.HTTPConnection(*http_url.split(":"), timeout=30)
    try:
        connection.putrequest("POST", "/v2/models/batch_recorder/infer")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        chunk = b"\0" * 65536
        for _ in range(MAX_INPUT_SIZE // len(chunk) + 2):
            connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        connection.send(b"0\r\n\r\n")
        response = connection.getresponse()
        assert response.status == 400
        assert "exceeds the maximum input size" in json.loads(response.read())["error"]
    finally:
        connection.close()
    assert_still_serving(server)


def assert_still_serving(server) -> None:
    """Live, and a valid request on each protocol gets the right answer."""
    http_url, grpc_url = server
    data = np.array([[3.0, 4.0]], np.float32)
    with httpclient.InferenceServerClient(http_url) as client:
        assert client.is_server_live()
        tensor = httpclient.InferInput("IN", [1, 2], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(
            client.infer("batch_recorder", [tensor]).as_numpy("OUT"), data
        )
        text = np.array([[base64.b64encode(b"still here")]], dtype=np.object_)
        words = httpclient.InferInput("IN", [1, 1], "BYTES")
        words.set_data_from_numpy(text)
        assert client.infer("bytes_identity", [words]).as_numpy("OUT").tolist() == text.tolist()
    with grpcclient.InferenceServerClient(grpc_url) as client:
        tensor = grpcclient.InferInput("IN", [1, 2], "FP32")
        tensor.set_data_from_numpy(data)
        np.testing.assert_array_equal(
            client.infer("batch_recorder", [tensor]).as_numpy("OUT"), data
        )
