"""The KServe v2 / Triton HTTP protocol against a live Ray Serve, with the real tritonclient."""

from __future__ import annotations

import gzip
import json
import shutil
import urllib.error
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.cluster

TEST_MODELS = Path(__file__).parents[1] / "model_repository"


@pytest.fixture(scope="module")
def server(serve_cluster, example_repository, tmp_path_factory):
    repository = tmp_path_factory.mktemp("http") / "repository"
    shutil.copytree(example_repository, repository)
    for model in TEST_MODELS.iterdir():
        shutil.copytree(model, repository / model.name)
    # A model that fails to load must not stop the others.
    (repository / "broken").mkdir()
    (repository / "broken" / "config.pbtxt").write_text('backend: "python" max_batch_size: x')
    serve_cluster.deploy_live(repository, "none")  # as rayton serve (gRPC tests: a Serve config)
    yield serve_cluster
    serve_cluster.delete_all()


@pytest.fixture
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


def raw(server, method: str, path: str, body: bytes | None = None, headers=None):
    """(status, headers, body) of a raw HTTP request."""
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=body, method=method, headers=headers or {}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, _lower(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, _lower(err.headers), err.read()


def _lower(headers) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


def image_bytes(example_repository: Path) -> bytes:
    return (example_repository.parent / "images" / "mug.png").read_bytes()


# ----------------------------------------------------------------------------- health, metadata


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    metadata = client.get_server_metadata()
    assert {"binary_tensor_data", "classification", "statistics"} <= set(metadata["extensions"])


def test_server_not_ready_while_a_model_is_unavailable(server):
    status, headers, body = raw(server, "GET", "/v2/health/ready")
    assert status == 400  # strict readiness: 'broken' failed to load
    assert json.loads(body) == {"ready": False}  # the Open Inference Protocol's body
    assert headers["content-type"] == "application/json"
    status, _, body = raw(server, "GET", "/v2/health/live")
    assert (status, json.loads(body)) == (200, {"live": True})


def test_model_metadata_config_and_ready(client):
    metadata = client.get_model_metadata("image_classifier_onnx")
    assert metadata["platform"] == "onnxruntime_onnx"
    assert metadata["versions"] == ["1"]
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 3, 64, 64]}]
    assert client.is_model_ready("image_classifier_onnx")
    assert client.is_model_ready("add_sub", "1")
    config = client.get_model_config("add_sub")
    assert config["max_batch_size"] == 0 and config["backend"] == "python"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    auto = client.get_model_config("mlp_autocomplete")
    assert auto["max_batch_size"] == 4 and "dynamic_batching" in auto


def test_unknown_model_and_version(client, server):
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("no_such_model")
    with pytest.raises(InferenceServerException, match="version 7"):
        client.get_model_metadata("add_sub", "7")
    status, _, body = raw(server, "GET", "/v2/models/no_such_model/versions/1/config")
    assert status == 404 and "error" in json.loads(body)
    assert not client.is_model_ready("no_such_model")


def test_broken_model_is_reported_with_its_reason(client, server):
    status, _, body = raw(server, "POST", "/v2/repository/index", b"{}")
    assert status == 200
    index = {entry["name"]: entry for entry in json.loads(body)}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "failed to parse" in index["broken"]["reason"]
    assert index["add_sub"]["state"] == "READY"
    with pytest.raises(InferenceServerException, match="broken"):
        client.get_model_metadata("broken")


# ----------------------------------------------------------------------------- inference


def add_sub_inputs(binary: bool = True):
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [4], "FP32"),
        httpclient.InferInput("INPUT1", [4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return a, b, inputs


@pytest.mark.parametrize("binary", [True, False])
def test_python_model_infer_binary_and_json(client, binary):
    a, b, inputs = add_sub_inputs(binary)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary),
    ]
    result = client.infer("add_sub", inputs, outputs=outputs, request_id="42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["model_name"] == "add_sub" and response["model_version"] == "1"
    assert response["id"] == "42"


@pytest.mark.parametrize(
    "model,input_name,output_name",
    [
        ("image_classifier_onnx", "INPUT0", "OUTPUT0"),
        ("image_classifier_torch", "INPUT__0", "OUTPUT__0"),
        ("image_classifier_openvino", "INPUT0", "OUTPUT0"),
    ],
)
def test_framework_models_infer_batch(client, model, input_name, output_name):
    images = np.random.default_rng(0).random((3, 3, 64, 64), dtype=np.float32)
    inputs = [httpclient.InferInput(input_name, list(images.shape), "FP32")]
    inputs[0].set_data_from_numpy(images)
    result = client.infer(model, inputs)
    probabilities = result.as_numpy(output_name)
    assert probabilities.shape == (3, 16)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_onnx_and_torch_classifiers_agree(client):
    # Both are generated from the same seeded architecture: equal weights are not guaranteed,
    # but each must be deterministic for the same input.
    images = np.ones((1, 3, 64, 64), np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 3, 64, 64], "FP32")]
    inputs[0].set_data_from_numpy(images)
    first = client.infer("image_classifier_onnx", inputs).as_numpy("OUTPUT0")
    second = client.infer("image_classifier_onnx", inputs).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(first, second)


def test_openvino_classifier_scores_as_the_onnx_one(client):
    """The example's IR is the ONNX classifier converted with FP32 weights: another runtime,
    the same scores."""
    images = np.random.default_rng(7).random((2, 3, 64, 64), dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [2, 3, 64, 64], "FP32")]
    inputs[0].set_data_from_numpy(images)
    onnx = client.infer("image_classifier_onnx", inputs).as_numpy("OUTPUT0")
    openvino = client.infer("image_classifier_openvino", inputs).as_numpy("OUTPUT0")
    np.testing.assert_allclose(openvino, onnx, rtol=1e-4, atol=1e-6)


def test_the_example_savedmodel_is_completed_and_served(client):
    config = client.get_model_config("mlp_tensorflow")
    assert (config["backend"], config["platform"]) == ("tensorflow", "tensorflow_savedmodel")
    features = np.random.default_rng(8).random((3, 16), dtype=np.float32)
    inputs = [httpclient.InferInput("features", [3, 16], "FP32")]
    inputs[0].set_data_from_numpy(features)
    probabilities = client.infer("mlp_tensorflow", inputs).as_numpy("probabilities")
    assert probabilities.shape == (3, 4)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
]


@pytest.mark.parametrize("model", ["text_embedding", "text_embedding_openvino"])
def test_real_text_embeddings_equal_the_weights_run_in_process(server, model):
    """all-MiniLM-L6-v2's real weights: the ensemble's vectors, one request of three sentences
    and three requests at once (batched across requests), against torch in-process."""
    from concurrent.futures import ThreadPoolExecutor

    from examples.embed_client import embed
    from examples.minilm import embed as reference

    expected = reference(SENTENCES)
    served = embed(SENTENCES, model, server.http_url, "http")
    with ThreadPoolExecutor(3) as pool:
        one_each = list(pool.map(lambda s: embed([s], model, server.http_url, "http"), SENTENCES))
    for vectors in (served, np.vstack(one_each)):
        assert vectors.shape == (3, 384)
        cosines = (vectors * expected).sum(axis=1)
        assert cosines.min() >= 0.9999, cosines
    assert served[0] @ served[1] > 0.7 > served[0] @ served[2]  # the model means something


def test_bytes_round_trip(client):
    binary_data = np.array([[b"hello", b"\x00\xffbinary", "üñí".encode()]], dtype=np.object_)
    text_data = np.array([["hello", "üñí"]], dtype=np.object_)  # JSON carries UTF-8 only
    for binary, data in ((True, binary_data), (False, text_data)):
        inputs = [httpclient.InferInput("IN", list(data.shape), "BYTES")]
        inputs[0].set_data_from_numpy(data, binary_data=binary)
        out = [httpclient.InferRequestedOutput("OUT", binary_data=True)]
        result = client.infer("bytes_identity", inputs, outputs=out)
        expected = [[v.encode() if isinstance(v, str) else v for v in row] for row in data]
        assert result.as_numpy("OUT").tolist() == expected


def test_classification_with_labels(client, example_repository):
    images = np.random.default_rng(1).random((2, 3, 64, 64), dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", list(images.shape), "FP32")]
    inputs[0].set_data_from_numpy(images)
    plain = client.infer("image_classifier_onnx", inputs).as_numpy("OUTPUT0")
    result = client.infer(
        "image_classifier_onnx",
        inputs,
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=3)],
    )
    classes = result.as_numpy("OUTPUT0")
    assert classes.shape == (2, 3)
    labels = (example_repository / "image_classifier_onnx" / "labels.txt").read_text().split("\n")
    for row, expected in zip(classes, plain, strict=True):
        value, index, label = row[0].decode().split(":")
        assert int(index) == int(np.argmax(expected))
        assert float(value) == pytest.approx(expected.max(), abs=1e-6)
        assert label == labels[int(index)]


def test_the_example_client_runs_the_articles_command(server, example_repository, capsys):
    """``image_client -m densenet_onnx -c 3 -s INCEPTION mug.jpg``, typed against
    ``examples/client.py`` and the example classifier: the top classes of the INCEPTION-scaled
    tensor."""
    from examples.client import main as client_main
    from examples.client import preprocess

    mug = example_repository.parent / "images" / "mug.png"
    command = ["-u", server.http_url, "-m", "image_classifier_onnx", "-c", "3", "-s", "INCEPTION"]
    assert client_main([*command, str(mug)]) == 0
    printed = capsys.readouterr().out.splitlines()
    tensor = preprocess(mug.read_bytes(), 64, 64, "INCEPTION")[None]
    inputs = [httpclient.InferInput("INPUT0", list(tensor.shape), "FP32")]
    inputs[0].set_data_from_numpy(tensor)
    with httpclient.InferenceServerClient(server.http_url) as client:
        scores = client.infer("image_classifier_onnx", inputs).as_numpy("OUTPUT0")[0]
    top = [int(line.split("(")[1].split(")")[0]) for line in printed if line.startswith("    ")]
    assert top == list(np.argsort(-scores)[:3]), printed
    assert printed[0] == "Request 0, batch size 1" and printed[-1] == "PASS"
    # The ensemble preprocesses on the server: a scaling asked of it is refused, not ignored.
    assert client_main(["-u", server.http_url, "-s", "VGG", str(mug)]) == 1
    assert "takes encoded images and scales them on the server" in capsys.readouterr().err


def test_ensemble_image_pipeline(client, example_repository):
    encoded = np.frombuffer(image_bytes(example_repository), dtype=np.uint8)[None, :]
    inputs = [httpclient.InferInput("IMAGE", list(encoded.shape), "UINT8")]
    inputs[0].set_data_from_numpy(encoded)
    result = client.infer(
        "image_pipeline",
        inputs,
        outputs=[httpclient.InferRequestedOutput("CLASSIFICATION", class_count=3)],
    )
    top3 = result.as_numpy("CLASSIFICATION")
    assert top3.shape == (1, 3)
    scores = [float(entry.decode().split(":")[0]) for entry in top3[0]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_request_and_response_compression(client, algorithm):
    a, b, inputs = add_sub_inputs()
    result = client.infer(
        "add_sub",
        inputs,
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


async def test_aio_client(server):
    async with aiohttpclient.InferenceServerClient(server.http_url) as client:
        assert await client.is_server_live()
        a, b, _ = add_sub_inputs()
        inputs = [
            aiohttpclient.InferInput("INPUT0", [4], "FP32"),
            aiohttpclient.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = await client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


# ----------------------------------------------------------------------------- errors


def expect_error(server, path: str, body: bytes, status: int, fragment: str, headers=None):
    code, response_headers, response = raw(server, "POST", path, body, headers)
    assert code == status, (path, response)
    assert response_headers.get("content-type", "").startswith("application/json"), response
    assert fragment in json.loads(response)["error"]


def json_body(inputs, outputs=None) -> bytes:
    body = {"inputs": inputs}
    if outputs:
        body["outputs"] = outputs
    return json.dumps(body).encode()


GOOD_ADD_SUB = [
    {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
    {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4]},
]


def test_error_statuses(server):
    path = "/v2/models/add_sub/infer"
    expect_error(server, "/v2/models/nope/infer", json_body(GOOD_ADD_SUB), 404, "unknown model")
    expect_error(
        server, "/v2/models/add_sub/versions/9/infer", json_body(GOOD_ADD_SUB), 404, "version 9"
    )
    wrong_name = [dict(GOOD_ADD_SUB[0], name="WRONG"), GOOD_ADD_SUB[1]]
    expect_error(server, path, json_body(wrong_name), 400, "unexpected inference input 'WRONG'")
    wrong_shape = [dict(GOOD_ADD_SUB[0], shape=[2], data=[1, 2]), GOOD_ADD_SUB[1]]
    expect_error(server, path, json_body(wrong_shape), 400, "unexpected shape for input 'INPUT0'")
    wrong_type = [dict(GOOD_ADD_SUB[0], datatype="INT32"), GOOD_ADD_SUB[1]]
    expect_error(server, path, json_body(wrong_type), 400, "data-type is 'INT32'")
    expect_error(server, path, json_body(GOOD_ADD_SUB[:1]), 400, "missing required input")
    expect_error(server, path, b"{not json", 400, "")
    bad_header = {"Inference-Header-Content-Length": "99999"}
    expect_error(server, path, json_body(GOOD_ADD_SUB), 400, "", bad_header)
    too_big = [{"name": "IN", "shape": [9, 2], "datatype": "FP32", "data": [0.0] * 18}]
    expect_error(
        server,
        "/v2/models/batch_recorder/infer",
        json_body(too_big),
        400,
        "batch-size must be <= 8",
    )
    expect_error(server, path, json_body(GOOD_ADD_SUB, [{"name": "NOPE"}]), 400, "NOPE")
    # ... and the server is still healthy afterwards.
    status, _, _ = raw(server, "GET", "/v2/health/live")
    assert status == 200
    status, _, body = raw(server, "POST", path, json_body(GOOD_ADD_SUB))
    assert status == 200 and json.loads(body)["outputs"][0]["data"] == [2, 4, 6, 8]


def test_raw_binary_body_without_json_header(server):
    data = np.arange(2, dtype=np.float32)  # a raw body is one batch-1 request
    status, headers, body = raw(
        server,
        "POST",
        "/v2/models/batch_recorder/infer",
        data.tobytes(),
        {"Inference-Header-Content-Length": "0"},
    )
    assert status == 200, body
    header_length = int(headers["inference-header-content-length"])
    header = json.loads(body[:header_length])
    assert [o["name"] for o in header["outputs"]] == ["OUT", "BATCH_ROWS", "BATCH_REQUESTS"]
    assert header["outputs"][0]["shape"] == [1, 2]
    out_size = header["outputs"][0]["parameters"]["binary_data_size"]
    np.testing.assert_array_equal(
        np.frombuffer(body[header_length : header_length + out_size], np.float32), data
    )


# ----------------------------------------------------------------------------- batching


def test_dynamic_batching_counts_rows_and_forms_batches(server):
    """Concurrent requests of 1, 3 and 8 rows: batches form, never exceed 8 rows."""
    sizes = [1, 3, 8, 1, 3, 1, 1, 3, 8, 1] * 3

    def send(rows: int):
        with httpclient.InferenceServerClient(server.http_url) as client:
            data = np.full((rows, 2), rows, np.float32)
            inputs = [httpclient.InferInput("IN", [rows, 2], "FP32")]
            inputs[0].set_data_from_numpy(data)
            result = client.infer("batch_recorder", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUT"), data)
            return int(result.as_numpy("BATCH_ROWS")[0, 0]), int(
                result.as_numpy("BATCH_REQUESTS")[0, 0]
            )

    with ThreadPoolExecutor(max_workers=12) as pool:
        observed = list(pool.map(send, sizes))
    batch_rows = [rows for rows, _ in observed]
    assert max(batch_rows) <= 8
    assert all(rows >= size for rows, size in zip(batch_rows, sizes, strict=True))
    assert max(requests for _, requests in observed) > 1  # requests shared executions

    with httpclient.InferenceServerClient(server.http_url) as client:
        stats = client.get_inference_statistics("batch_recorder")["model_stats"][0]
    executions = stats["execution_count"]
    assert stats["inference_count"] >= sum(sizes)
    assert stats["inference_stats"]["success"]["count"] >= len(sizes)
    assert (
        stats["inference_stats"]["queue"]["count"] == stats["inference_stats"]["success"]["count"]
    )
    assert all(entry["batch_size"] <= 8 for entry in stats["batch_stats"])
    assert stats["inference_count"] / executions > 1.0  # mean rows per execution


def test_statistics_json_shape(client):
    client.infer("add_sub", add_sub_inputs()[2])
    stats = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert set(stats["inference_stats"]) == {
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    }
    assert stats["version"] == "1" and stats["execution_count"] >= 1
    everything = client.get_inference_statistics()
    assert "add_sub" in {entry["name"] for entry in everything["model_stats"]}


def test_binary_request_body_layout_is_what_tritonclient_sends(server):
    # Hand-built binary body: JSON header + raw bytes, like the C++ client.
    a = np.arange(4, dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 16},
                },
                {
                    "name": "INPUT1",
                    "shape": [4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 16},
                },
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + a.tobytes() + a.tobytes()
    for encoding, payload in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        status, headers, response = raw(
            server,
            "POST",
            "/v2/models/add_sub/infer",
            payload,
            {"Inference-Header-Content-Length": str(len(header)), "Content-Encoding": encoding},
        )
        assert status == 200, response
        length = int(headers["inference-header-content-length"])
        out = np.frombuffer(response[length:], dtype=np.float32)
        np.testing.assert_array_equal(out, a + a)


def test_statistics_sum_all_replicas(client):
    """mlp_autocomplete runs two replicas (ORT's CPU default count 2): stats are the model's."""
    before = client.get_inference_statistics("mlp_autocomplete")["model_stats"][0]
    data = np.ones((1, 16), np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(data)
    for _ in range(12):
        client.infer("mlp_autocomplete", inputs)
    after = client.get_inference_statistics("mlp_autocomplete")["model_stats"][0]
    success = after["inference_stats"]["success"]["count"]
    assert success - before["inference_stats"]["success"]["count"] == 12
    everything = client.get_inference_statistics()["model_stats"]
    (entry,) = [e for e in everything if e["name"] == "mlp_autocomplete"]
    assert entry["inference_stats"]["success"]["count"] == success


@pytest.mark.parametrize("target", ["batch_recorder", "sync:batch_recorder"])
def test_bls_reaches_the_target_deployment_and_batches_there(server, target):
    """pb_utils BLS (async_exec, and exec from a thread) from a served python model."""

    def send(value: float):
        with httpclient.InferenceServerClient(server.http_url) as client:
            inputs = [
                httpclient.InferInput("IN", [1, 2], "FP32"),
                httpclient.InferInput("TARGET", [1, 1], "BYTES"),
            ]
            inputs[0].set_data_from_numpy(np.full((1, 2), value, np.float32))
            inputs[1].set_data_from_numpy(np.array([[target.encode()]], dtype=np.object_))
            result = client.infer("bls_forward", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUT"), np.full((1, 2), value))
            assert result.as_numpy("TARGET_READY").tolist() == [[True]]
            return int(result.as_numpy("BATCH_REQUESTS")[0, 0])

    with ThreadPoolExecutor(max_workers=8) as pool:
        batch_requests = list(pool.map(send, range(16)))
    assert max(batch_requests) > 1  # concurrent BLS calls shared executions at the target


def test_bls_to_an_unknown_model_is_the_models_error(client):
    inputs = [
        httpclient.InferInput("IN", [1, 2], "FP32"),
        httpclient.InferInput("TARGET", [1, 1], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(np.zeros((1, 2), np.float32))
    inputs[1].set_data_from_numpy(np.array([[b"no_such_model"]], dtype=np.object_))
    with pytest.raises(InferenceServerException, match=r"unknown model.*no_such_model"):
        client.infer("bls_forward", inputs)
