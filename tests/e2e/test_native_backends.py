"""Models served by Triton C backends (``libtriton_<name>.so`` written here in C) on a live
rayton: found where Triton looks (the model's directory, then ``--backend-directory``), in
applications of their own, answering tritonclient over HTTP and gRPC; a model whose library
is missing, whose backend refuses to initialize or needs a newer backend API is UNAVAILABLE
with the reason, and the others serve; a backend that segfaults in Execute fails only its
in-flight request and serves again once Serve has replaced its replica."""

from __future__ import annotations

import queue
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.crashing_models import PROMPT_S, RECOVERY_S, wait_until
from tests.support.native_backends import SCALE_CONFIG, build_scale_variants
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

CONFIG = SCALE_CONFIG


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    libraries = build_scale_variants(tmp_path_factory.mktemp("native-libraries"))
    root = tmp_path_factory.mktemp("native") / "repository"
    backends = root.parent / "backends"
    # in_model_dir: its own copy; from_backend_dir: found under --backend-directory;
    # refusing: its library's Initialize fails; no_library: nowhere to be found; crashes:
    # segfaults on 13; newer: built for a newer backend API.
    for name in ("in_model_dir", "from_backend_dir", "refusing", "no_library", "crashes", "newer"):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG)
    shutil.copy(libraries["plain"], root / "in_model_dir" / "libtriton_scale.so")
    shutil.copy(libraries["refuses"], root / "refusing" / "1" / "libtriton_scale.so")
    shutil.copy(libraries["crashes"], root / "crashes" / "libtriton_scale.so")
    shutil.copy(libraries["newer_api"], root / "newer" / "libtriton_scale.so")
    (backends / "scale").mkdir(parents=True)
    shutil.copy(libraries["plain"], backends / "scale" / "libtriton_scale.so")
    (root / "no_library" / "config.pbtxt").write_text(CONFIG.replace('"scale"', '"absent"'))
    (root / "from_backend_dir" / "config.pbtxt").write_text(CONFIG)
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port, backend_directory=str(backends))
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def infer(module, url: str, model: str, values: list[float]) -> np.ndarray:
    with module.InferenceServerClient(url) as client:
        data = np.array(values, np.float32).reshape(-1, 1)
        tensor = module.InferInput("IN", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        return client.infer(model, [tensor]).as_numpy("OUT")


def test_native_models_answer_over_http_and_grpc_from_applications_of_their_own(server):
    from ray import serve

    http_url, grpc_url = server
    # Never in the shared CPU host: native code that crashes takes only its own replicas.
    assert {"in_model_dir", "from_backend_dir"} <= set(serve.status().applications)
    for model in ("in_model_dir", "from_backend_dir"):
        np.testing.assert_array_equal(infer(httpclient, http_url, model, [1, 2]), [[2], [4]])
        np.testing.assert_array_equal(infer(grpcclient, grpc_url, model, [3.5]), [[7.0]])


def test_a_grpc_stream_gets_each_requests_answer_in_order(server):
    _, grpc_url = server
    answers: queue.Queue = queue.Queue()
    values = [1.0, 2.5, -1.0, 4.0]  # the negative one: the backend's error, the stream goes on
    with grpcclient.InferenceServerClient(grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            for index, value in enumerate(values):
                tensor = grpcclient.InferInput("IN", [1, 1], "FP32")
                tensor.set_data_from_numpy(np.array([[value]], np.float32))
                client.async_stream_infer("in_model_dir", [tensor], request_id=str(index))
            received = [answers.get(timeout=30) for _ in values]
        finally:
            client.stop_stream()
    for index, (value, (result, error)) in enumerate(zip(values, received, strict=True)):
        if value < 0:
            assert result is None and "scale: negative input" in str(error)
            continue
        assert error is None, error
        assert result.get_response().id == str(index)
        np.testing.assert_array_equal(result.as_numpy("OUT"), [[value * 2]])


def test_a_backends_error_reaches_the_client_with_its_code(server):
    http_url, _ = server
    with pytest.raises(InferenceServerException) as failed:
        infer(httpclient, http_url, "in_model_dir", [-1])
    assert failed.value.status() == "400"
    assert failed.value.message() == "scale: negative input"


def test_broken_native_models_are_unavailable_with_the_reason(server):
    http_url, _ = server
    with httpclient.InferenceServerClient(http_url) as client:
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
    assert index["in_model_dir"]["state"] == "READY"
    assert index["refusing"]["state"] == "UNAVAILABLE"
    assert "scale: initialize refused" in index["refusing"]["reason"]
    assert index["no_library"]["state"] == "UNAVAILABLE"
    assert "unable to find backend library 'libtriton_absent.so'" in index["no_library"]["reason"]
    assert index["newer"]["state"] == "UNAVAILABLE"
    assert "triton backend API version does not support this backend" in index["newer"]["reason"]


def test_a_backend_that_segfaults_fails_its_request_and_serves_again(server):
    http_url, grpc_url = server

    def serves() -> bool:
        try:
            return infer(httpclient, http_url, "crashes", [1.0]).tolist() == [[2.0]]
        except InferenceServerException:
            return False

    assert serves()
    start = time.monotonic()
    with pytest.raises(InferenceServerException) as failed:
        infer(httpclient, http_url, "crashes", [13.0])
    assert time.monotonic() - start < PROMPT_S
    assert failed.value.status() and failed.value.status().startswith("5"), failed.value
    # Its replica is its own: the other native models never noticed.
    np.testing.assert_array_equal(infer(grpcclient, grpc_url, "in_model_dir", [2.0]), [[4.0]])
    back = wait_until(serves, RECOVERY_S)
    assert back is not None, "the crashed model never served again"
    seen: list[dict] = []

    def noted() -> bool:
        with httpclient.InferenceServerClient(http_url) as client:
            index = client.get_model_repository_index()
        seen[:] = [e for e in index if e["name"] == "crashes"]
        return "a replica stopped unexpectedly" in seen[0].get("reason", "")

    # the index says what happened (Triton's process would be gone), once the controller's
    # watch of Serve's status (every 2 s, a read at most 1 s old) saw it
    assert wait_until(noted, 10) is not None, seen
    assert seen[0]["state"] == "READY", seen
    print(f"segfault: {failed.value.status()} {failed.value.message()!r}, back in {back:.1f} s")
    print(f"index: {seen[0]}")
