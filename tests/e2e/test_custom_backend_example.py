"""The article's flow on a live rayton: the example C++ pre-processing backend, built with
CMake by ``examples/custom_backend/build_repository.py``, feeds the ONNX classifier in the
``imgprep_pipeline`` ensemble; unmodified tritonclient calls it over HTTP, gRPC and a gRPC
stream, and the scores equal the classifier run in-process on the numpy-preprocessed image."""

from __future__ import annotations

import queue

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from examples.custom_backend.build_repository import CLASSIFIER, build_repository
from repo_adapter.backends.native.build import BuildError
from tests.examples.test_custom_backend import preprocessed
from tests.support.ports import free_port
from tests.support.requirements import missing

pytestmark = pytest.mark.cluster

PIPELINE = "imgprep_pipeline"


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("custom-backend-e2e")
    try:
        build_repository(root / "repository", root / "build")
    except BuildError as err:
        missing(str(err))
        raise
    grpc_port = free_port()
    serve_cluster.deploy_live(root / "repository", "none", grpc_port=grpc_port)
    serve_cluster.wait_for_repository()
    yield root / "repository", serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def image(height: int, width: int) -> np.ndarray:
    return np.random.default_rng(height * width).integers(0, 256, (1, height, width, 3), np.uint8)


def expected_scores(repository, raw: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(repository / CLASSIFIER / "1" / "model.onnx"))
    return session.run(None, {"INPUT0": preprocessed(raw[0])[None]})[0]


def raw_image_input(module, raw: np.ndarray):
    tensor = module.InferInput("raw_image", list(raw.shape), "UINT8")
    tensor.set_data_from_numpy(raw)
    return tensor


def test_the_ensemble_classifies_images_of_any_size_over_http_and_grpc(server):
    repository, http_url, grpc_url = server
    for module, url, raw in (
        (httpclient, http_url, image(480, 640)),
        (grpcclient, grpc_url, image(37, 53)),
    ):
        with module.InferenceServerClient(url) as client:
            result = client.infer(PIPELINE, [raw_image_input(module, raw)])
        scores = result.as_numpy("final_result")
        assert scores.shape == (1, 16)
        np.testing.assert_allclose(scores, expected_scores(repository, raw), rtol=1e-4, atol=1e-5)


def test_a_grpc_stream_of_frames_gets_one_answer_per_frame_in_order(server):
    repository, _, grpc_url = server
    frames = [image(60 + index, 80) for index in range(4)]
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for index, frame in enumerate(frames):
                inputs = [raw_image_input(grpcclient, frame)]
                client.async_stream_infer(PIPELINE, inputs, request_id=str(index))
            received = [answers.get(timeout=30) for _ in frames]
        finally:
            client.stop_stream()
    for index, (frame, (result, error)) in enumerate(zip(frames, received, strict=True)):
        assert error is None, error
        assert result.get_response().id == str(index)
        np.testing.assert_allclose(
            result.as_numpy("final_result"),
            expected_scores(repository, frame),
            rtol=1e-4,
            atol=1e-5,
        )


def test_malformed_images_get_the_shape_check_or_the_backends_error(server):
    _, http_url, _ = server
    four_channels = np.zeros((1, 4, 4, 4), np.uint8)
    empty = np.zeros((1, 0, 5, 3), np.uint8)
    with httpclient.InferenceServerClient(http_url) as client:
        with pytest.raises(InferenceServerException) as refused_shape:
            client.infer(PIPELINE, [raw_image_input(httpclient, four_channels)])
        with pytest.raises(InferenceServerException) as refused_by_backend:
            image_input = httpclient.InferInput("IMAGE", list(empty.shape), "UINT8")
            image_input.set_data_from_numpy(empty)
            client.infer("imgprep", [image_input])
    assert refused_shape.value.status() == "400"
    assert "unexpected shape for input 'raw_image'" in refused_shape.value.message()
    assert refused_by_backend.value.status() == "400"
    assert refused_by_backend.value.message() == (
        "imgprep: IMAGE must be UINT8 [batch, height, width, 3]"
    )
