"""Decoupled models on a live rayton (Triton's ``model_transaction_policy { decoupled: true
}``): a python model's responses sent from its own thread after ``execute`` returned, and a C
backend's sent through its response factory, reach a tritonclient gRPC stream in order with
Triton's final flags; HTTP ``infer`` and gRPC ``ModelInfer`` answer Triton's errors."""

from __future__ import annotations

import queue
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.native_backends import SCALE_CONFIG, build_scale_variants
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

PYTHON_MODEL = Path(__file__).parents[1] / "repo_adapter" / "backends" / "python_models"
DECOUPLED_SCALE = SCALE_CONFIG + "model_transaction_policy { decoupled: true }\n"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    libraries = build_scale_variants(tmp_path_factory.mktemp("decoupled-libraries"))
    root = tmp_path_factory.mktemp("decoupled") / "repository"
    for name in ("decoupled", "bls_decoupled"):
        shutil.copytree(PYTHON_MODEL / name, root / name)
    (root / "scale_stream" / "1").mkdir(parents=True)
    (root / "scale_stream" / "config.pbtxt").write_text(DECOUPLED_SCALE)
    shutil.copy(libraries["decoupled"], root / "scale_stream" / "libtriton_scale.so")
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port)
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def count_input(module, count: float, name: str = "INPUT0"):
    tensor = module.InferInput(name, [1], "FP32")
    tensor.set_data_from_numpy(np.array([count], np.float32))
    return tensor


class Stream:
    """A tritonclient gRPC stream and what it received."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.received: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.received.put((result, error)))

    def send(self, model: str, inputs, request_id: str, empty_final: bool = False) -> None:
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, enable_empty_final_response=empty_final
        )

    def take(self, count: int) -> list:
        """The next ``count`` messages: (request id, OUTPUT0 or OUT or None, final flag) or
        the error's text."""
        got = []
        for _ in range(count):
            result, error = self.received.get(timeout=WAIT_S)
            if error is not None:
                got.append(str(error))
                continue
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            names = [output.name for output in response.outputs]
            data = result.as_numpy(names[0]).tolist() if names else None
            got.append((response.id, data, final))
        return got

    def nothing_more(self, wait_s: float = 0.5) -> bool:
        time.sleep(wait_s)
        return self.received.empty()

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(server):
    opened = Stream(server[1])
    yield opened
    opened.close()


def test_a_python_models_responses_arrive_in_order_with_tritons_final_flags(stream):
    stream.send("decoupled", [count_input(grpcclient, 3)], "three")
    assert stream.take(3) == [
        ("three", [0.0], False),
        ("three", [1.0], False),
        ("three", [2.0], False),
    ]
    assert stream.nothing_more()  # the final flag alone is not sent unless asked
    stream.send("decoupled", [count_input(grpcclient, 2)], "asked", empty_final=True)
    assert stream.take(3) == [
        ("asked", [0.0], False),
        ("asked", [1.0], False),
        ("asked", None, True),
    ]
    stream.send("decoupled", [count_input(grpcclient, 0)], "zero", empty_final=True)
    assert stream.take(1) == [("zero", None, True)]


def test_errors_are_messages_of_the_stream_which_goes_on(stream):
    stream.send("decoupled", [count_input(grpcclient, -1)], "negative")
    stream.send("decoupled", [count_input(grpcclient, 999)], "raises")
    stream.send("decoupled", [count_input(grpcclient, 1)], "after")
    negative, raises, after = stream.take(3)
    assert negative == "negative count"
    assert "ValueError: refused on purpose" in raises
    assert after == ("after", [0.0], False)


def test_requests_of_one_stream_each_get_all_their_responses(stream):
    counts = {f"r{i}": 5 + i for i in range(8)}
    for request_id, count in counts.items():
        stream.send("decoupled", [count_input(grpcclient, count)], request_id)
    got = stream.take(sum(counts.values()))
    for request_id, count in counts.items():
        mine = [data for rid, data, _ in got if rid == request_id]
        assert mine == [[float(i)] for i in range(count)]


def test_a_c_backends_factory_responses_reach_the_stream(stream):
    stream.send("scale_stream", [count_input(grpcclient, 10.0, "IN").set_shape([1, 1])], "c", True)
    assert stream.take(4) == [
        ("c", [10.0], False),  # the shape the backend gave
        ("c", [11.0], False),
        ("c", [12.0], False),
        ("c", None, True),
    ]


def test_single_response_calls_to_a_decoupled_model_answer_tritons_errors(server):
    http_url, grpc_url = server
    client = httpclient.InferenceServerClient(http_url)
    with client, pytest.raises(InferenceServerException) as http_error:
        client.infer("decoupled", [count_input(httpclient, 1)])
    assert http_error.value.status() == "501"
    assert http_error.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy"
    )
    grpc = grpcclient.InferenceServerClient(grpc_url)
    with grpc, pytest.raises(InferenceServerException) as grpc_error:
        grpc.infer("decoupled", [count_input(grpcclient, 1)])
    assert grpc_error.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "ModelInfer RPC doesn't support models with decoupled" in grpc_error.value.message()


def test_bls_reads_a_decoupled_models_responses(server):
    http_url, _ = server
    with httpclient.InferenceServerClient(http_url) as client:
        result = client.infer("bls_decoupled", [count_input(httpclient, 4, "COUNT")])
    assert result.as_numpy("VALUES").tolist() == [0.0, 1.0, 2.0, 3.0]
    assert result.as_numpy("RESPONSES").tolist() == [5]  # the final flag alone: an empty one
