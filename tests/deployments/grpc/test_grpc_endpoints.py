"""Triton's gRPC protocol against a live Ray Serve, with the real tritonclient.grpc (sync + aio)."""

from __future__ import annotations

import asyncio
import queue
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.utils import InferenceServerException

from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

TEST_MODELS = Path(__file__).parents[1] / "model_repository"


@pytest.fixture(scope="module")
def grpc_url(serve_cluster, example_repository, tmp_path_factory):
    repository = tmp_path_factory.mktemp("grpc") / "repository"
    shutil.copytree(example_repository, repository)
    for model in TEST_MODELS.iterdir():
        shutil.copytree(model, repository / model.name)
    (repository / "broken").mkdir()
    (repository / "broken" / "config.pbtxt").write_text('backend: "python" max_batch_size: x')
    port = free_port()
    apps = serve_cluster.deploy_repository(repository, grpc_port=port)
    yield f"127.0.0.1:{port}"
    serve_cluster.delete(apps)


@pytest.fixture
def client(grpc_url):
    with grpcclient.InferenceServerClient(grpc_url) as c:
        yield c


def add_sub_inputs(module=grpcclient, n: int = 4):
    a = np.arange(n, dtype=np.float32)
    b = np.ones(n, dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [n], "FP32"), module.InferInput("INPUT1", [n], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return a, b, inputs


def status_of(fn) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        fn()
    return info.value.status(), info.value.message()


# ----------------------------------------------------------------------------- health, metadata


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert not client.is_server_ready()  # strict readiness: 'broken' failed to load
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "rayton"
    assert {"binary_tensor_data", "classification", "statistics"} <= set(metadata["extensions"])


def test_model_metadata_config_and_ready(client):
    metadata = client.get_model_metadata("image_classifier_onnx", as_json=True)
    assert metadata["platform"] == "onnxruntime_onnx" and metadata["versions"] == ["1"]
    assert metadata["inputs"] == [
        {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "3", "64", "64"]}
    ]
    proto = client.get_model_metadata("image_classifier_onnx")
    assert list(proto.inputs[0].shape) == [-1, 3, 64, 64]
    assert client.is_model_ready("add_sub") and client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("broken")  # failed to load: not ready, no error
    config = client.get_model_config("add_sub", as_json=True)["config"]
    assert config["backend"] == "python" and config["instance_group"][0]["kind"] == "KIND_CPU"
    auto = client.get_model_config("mlp_autocomplete").config
    assert auto.max_batch_size == 4 and auto.HasField("dynamic_batching")


def test_unknown_model_and_version(client):
    status, message = status_of(lambda: client.get_model_metadata("no_such_model"))
    assert status == "StatusCode.NOT_FOUND" and "unknown model" in message
    status, message = status_of(lambda: client.get_model_metadata("add_sub", "7"))
    assert status == "StatusCode.NOT_FOUND" and "version 7" in message
    assert not client.is_model_ready("no_such_model")  # not ready, not an error (as core)
    assert not client.is_model_ready("add_sub", "7")
    status, message = status_of(lambda: client.get_model_config("broken"))
    assert status == "StatusCode.UNAVAILABLE" and "broken" in message
    status, message = status_of(lambda: client.get_model_metadata("add_sub", "x"))
    assert status == "StatusCode.INVALID_ARGUMENT" and "version string 'x'" in message


def test_repository_index(client):
    index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    assert index["add_sub"]["state"] == "READY" and index["add_sub"]["version"] == "1"
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "failed to parse" in index["broken"]["reason"]
    status, message = status_of(lambda: client.load_model("add_sub"))
    # A Serve config owns this server's models (rayton serve's modes: test_repository_api).
    assert status == "StatusCode.UNAVAILABLE" and "deployed by a Serve config" in message


# ----------------------------------------------------------------------------- inference


def test_infer_python_model(client):
    a, b, inputs = add_sub_inputs()
    outputs = [grpcclient.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs, request_id="42")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response(as_json=True)
    assert (response["model_name"], response["model_version"], response["id"]) == (
        "add_sub",
        "1",
        "42",
    )
    only_one = client.infer("add_sub", inputs, outputs=outputs[1:])
    assert only_one.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(only_one.as_numpy("OUTPUT1"), a - b)


def test_infer_onnx_batch_and_classification(client, example_repository):
    images = np.random.default_rng(1).random((2, 3, 64, 64), dtype=np.float32)
    inputs = [grpcclient.InferInput("INPUT0", list(images.shape), "FP32")]
    inputs[0].set_data_from_numpy(images)
    plain = client.infer("image_classifier_onnx", inputs).as_numpy("OUTPUT0")
    assert plain.shape == (2, 16)
    np.testing.assert_allclose(plain.sum(axis=1), 1.0, rtol=1e-5)
    result = client.infer(
        "image_classifier_onnx",
        inputs,
        outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)],
    )
    classes = result.as_numpy("OUTPUT0")
    assert classes.shape == (2, 3)
    labels = (example_repository / "image_classifier_onnx" / "labels.txt").read_text().split("\n")
    for row, expected in zip(classes, plain, strict=True):
        value, index, label = row[0].decode().split(":")
        assert int(index) == int(np.argmax(expected))
        assert float(value) == pytest.approx(expected.max(), abs=1e-6)
        assert label == labels[int(index)]


def test_bytes_round_trip_and_messages_over_4_mib(client):
    data = np.array([[b"hello", b"\x00\xffbinary", "üñí".encode()]], dtype=np.object_)
    inputs = [grpcclient.InferInput("IN", list(data.shape), "BYTES")]
    inputs[0].set_data_from_numpy(data)
    assert client.infer("bytes_identity", inputs).as_numpy("OUT").tolist() == data.tolist()
    big = np.array([[b"x" * (6 * 1024 * 1024)]], dtype=np.object_)  # > grpc's 4 MiB default
    inputs = [grpcclient.InferInput("IN", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(big)
    assert client.infer("bytes_identity", inputs).as_numpy("OUT")[0, 0] == big[0, 0]


def test_ensemble_image_pipeline(client, example_repository):
    image = (example_repository.parent / "images" / "mug.png").read_bytes()
    encoded = np.frombuffer(image, dtype=np.uint8)[None, :]
    inputs = [grpcclient.InferInput("IMAGE", list(encoded.shape), "UINT8")]
    inputs[0].set_data_from_numpy(encoded)
    result = client.infer(
        "image_pipeline",
        inputs,
        outputs=[grpcclient.InferRequestedOutput("CLASSIFICATION", class_count=3)],
    )
    top3 = result.as_numpy("CLASSIFICATION")
    assert top3.shape == (1, 3)
    scores = [float(entry.decode().split(":")[0]) for entry in top3[0]]
    assert scores == sorted(scores, reverse=True)


def test_infer_errors(client):
    _, _, inputs = add_sub_inputs()
    status, message = status_of(lambda: client.infer("no_such_model", inputs))
    assert status == "StatusCode.NOT_FOUND" and "unknown model" in message
    status, message = status_of(lambda: client.infer("add_sub", inputs, model_version="9"))
    assert status == "StatusCode.NOT_FOUND" and "version 9" in message
    _, _, short = add_sub_inputs(n=2)
    status, message = status_of(lambda: client.infer("add_sub", [short[0], inputs[1]]))
    assert status == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT0'" in message
    status, message = status_of(lambda: client.infer("add_sub", inputs[:1]))
    assert status == "StatusCode.INVALID_ARGUMENT" and "missing required input" in message
    outputs = [grpcclient.InferRequestedOutput("NOPE")]
    status, message = status_of(lambda: client.infer("add_sub", inputs, outputs=outputs))
    assert status == "StatusCode.INVALID_ARGUMENT" and "NOPE" in message
    status, message = status_of(lambda: client.infer("broken", inputs))
    assert status == "StatusCode.UNAVAILABLE"
    assert client.is_server_live()  # and the server carries on


def test_statistics(client):
    _, _, inputs = add_sub_inputs()
    client.infer("add_sub", inputs)
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert stats["name"] == "add_sub" and stats["version"] == "1"
    assert int(stats["inference_stats"]["success"]["count"]) >= 1
    proto = client.get_inference_statistics("add_sub").model_stats[0]
    assert proto.execution_count >= 1 and proto.inference_stats.success.ns > 0
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert "add_sub" in {entry["name"] for entry in everything}
    status, message = status_of(lambda: client.get_inference_statistics("no_such_model"))
    assert status == "StatusCode.INVALID_ARGUMENT" and "not available" in message


def test_stream_infer_answers_in_order_and_survives_errors(client):
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        a, b, inputs = add_sub_inputs()
        _, _, short = add_sub_inputs(n=2)
        client.async_stream_infer("add_sub", inputs, request_id="s1")
        client.async_stream_infer("add_sub", [short[0], inputs[1]], request_id="s2")
        client.async_stream_infer("add_sub", inputs, request_id="s3")
        received = [responses.get(timeout=60) for _ in range(3)]
    finally:
        client.stop_stream()
    (first, error1), (_, error2), (third, error3) = received
    assert error1 is None and error3 is None
    assert first.get_response().id == "s1" and third.get_response().id == "s3"
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), a + b)
    assert "unexpected shape for input 'INPUT0'" in error2.message()


def test_unsupported_features(client):
    status, message = status_of(lambda: client.register_system_shared_memory("region", "/key", 64))
    assert status == "StatusCode.UNIMPLEMENTED" and "shared memory" in message
    status, message = status_of(lambda: client.register_cuda_shared_memory("r", b"", 0, 64))
    assert status == "StatusCode.UNIMPLEMENTED" and "--allow-client-shm" in message
    assert client.get_cuda_shared_memory_status(as_json=True) == {}  # none registered
    trace = client.get_trace_settings(as_json=True)["settings"]  # tracing is supported: off
    assert trace["trace_level"] == {"value": ["OFF"]}
    settings = client.get_log_settings(as_json=True)["settings"]  # logging is supported
    assert settings["log_verbose_level"] == {"uint32_param": 0}


def test_grpc_health_check(grpc_url):
    with grpc.insecure_channel(grpc_url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"") == b"\x08\x02"  # NOT_SERVING: 'broken' keeps the server unready


# ----------------------------------------------------------------------------- aio client


async def test_aio_client_infer_stream_and_batching(grpc_url):
    async with aiogrpcclient.InferenceServerClient(grpc_url) as client:
        assert await client.is_server_live()
        a, b, inputs = add_sub_inputs(aiogrpcclient)
        result = await client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        async def requests():
            for request_id in ("x1", "x2"):
                yield {"model_name": "add_sub", "inputs": inputs, "request_id": request_id}

        received = [item async for item in client.stream_infer(requests())]
        assert [(r.get_response().id, e) for r, e in received] == [("x1", None), ("x2", None)]

        async def one(rows: int):
            data = np.full((rows, 2), rows, np.float32)
            tensor = aiogrpcclient.InferInput("IN", [rows, 2], "FP32")
            tensor.set_data_from_numpy(data)
            result = await client.infer("batch_recorder", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUT"), data)
            return int(result.as_numpy("BATCH_REQUESTS")[0, 0])

        shared = await asyncio.gather(*(one(rows) for rows in [1, 3, 1, 2] * 6))
        assert max(shared) > 1  # concurrent gRPC requests reach the dynamic batcher together


def test_bls_through_the_grpc_frontend_concurrently(grpc_url):
    def send(value: float):
        with grpcclient.InferenceServerClient(grpc_url) as client:
            inputs = [
                grpcclient.InferInput("IN", [1, 2], "FP32"),
                grpcclient.InferInput("TARGET", [1, 1], "BYTES"),
            ]
            inputs[0].set_data_from_numpy(np.full((1, 2), value, np.float32))
            inputs[1].set_data_from_numpy(np.array([[b"batch_recorder"]], dtype=np.object_))
            result = client.infer("bls_forward", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUT"), np.full((1, 2), value))
            return int(result.as_numpy("BATCH_REQUESTS")[0, 0])

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert max(pool.map(send, range(16))) > 1


def test_real_text_embeddings_over_grpc_equal_the_weights_run_in_process(grpc_url):
    from examples.embed_client import embed
    from examples.minilm import embed as reference

    sentences = ["A man is eating food.", "A monkey is playing drums."]
    served = embed(sentences, "text_embedding", grpc_url, "grpc")
    cosines = (served * reference(sentences)).sum(axis=1)
    assert served.shape == (2, 384) and cosines.min() >= 0.9999, cosines
