"""Models loaded on their first request within a memory budget, on a live server with real
tritonclient clients: every model listed, loaded by an HTTP or a gRPC request, the least
recently used unloaded to make room (each answer still right), a model with requests in
flight never unloaded (the load waits for it), the index, /metrics and status saying so, and
the repository API's loads (explicit mode) made room for as a load on demand is.

Five python and one ONNX model, each declaring 10 MB, under a budget of 25 MB: two fit."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.numbered_models import write_numbered_model
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

MODELS = {"m0": 0, "m1": 1, "m2": 2, "m3": 3, "slow_a": 10, "slow_b": 20}
SLOW_S = 4.0


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("on_demand") / "repository"
    for name, number in MODELS.items():
        kind = "onnx" if name == "m3" else "python"
        write_numbered_model(root, name, number, kind, footprint="10MB", slow_s=SLOW_S)
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "config.pbtxt").write_text("bad_field: 1\n")
    grpc_port, metrics_port = free_port(), free_port()
    serve_cluster.deploy_live(
        root,
        "explicit",
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        server_options={"load_on_demand": True, "memory_budget": "25MB"},
    )
    serve_cluster.wait_for_repository()
    yield serve_cluster.http_url.removeprefix("http://"), f"127.0.0.1:{grpc_port}", metrics_port
    serve_cluster.delete_all()


def infer_http(url: str, model: str, value: float = 1.0) -> float:
    client = httpclient.InferenceServerClient(url, network_timeout=120)
    tensor = httpclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
    return float(client.infer(model, [tensor]).as_numpy("OUT")[0, 0])


def infer_grpc(url: str, model: str, value: float = 1.0) -> float:
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
    return float(client.infer(model, [tensor], client_timeout=120).as_numpy("OUT")[0, 0])


def ready_models(url: str) -> set[str]:
    client = httpclient.InferenceServerClient(url)
    return {e["name"] for e in client.get_model_repository_index() if e.get("state") == "READY"}


def metrics(metrics_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as reply:
        return reply.read().decode()


def sample(text: str, family: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(family) and labels in line and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {family} {labels} in /metrics")


def test_every_model_is_listed_and_loads_on_its_first_request(server):
    http_url, grpc_url, _ = server
    index = httpclient.InferenceServerClient(http_url).get_model_repository_index()
    assert {e["name"] for e in index} == {*MODELS, "broken"}
    assert ready_models(http_url) == set()
    assert infer_http(http_url, "m1") == 2.0
    assert infer_grpc(grpc_url, "m2") == 3.0
    assert ready_models(http_url) == {"m1", "m2"}
    metadata = grpcclient.InferenceServerClient(grpc_url).get_model_metadata("m3")
    assert metadata.name == "m3"  # metadata loads it too (perf_analyzer asks it first)


def test_cycling_through_more_models_than_fit_answers_each_right(server):
    http_url, grpc_url, metrics_port = server
    for _ in range(2):
        for name in ("m0", "m1", "m2", "m3"):
            assert infer_http(http_url, name, 5.0) == 5.0 + MODELS[name]
            assert infer_grpc(grpc_url, name, 5.0) == 5.0 + MODELS[name]
            assert len(ready_models(http_url)) <= 2
    text = metrics(metrics_port)
    assert sample(text, "rayton_memory_budget_bytes") == 25e6
    assert sample(text, "rayton_memory_budget_used_bytes") <= 25e6
    assert sample(text, "rayton_model_evictions", 'model="m0"') >= 1
    assert sample(text, "rayton_model_loads_on_demand", 'model="m0"') >= 2
    with urllib.request.urlopen(f"http://{http_url}/v2/rayton/status", timeout=30) as reply:
        status = json.loads(reply.read())
    assert status["memory_budget"]["capacity_bytes"] == 25_000_000
    assert status["models"]["m0"]["memory"]["evictions"] >= 1


def test_a_model_with_requests_in_flight_is_never_unloaded(server):
    http_url, _, _ = server
    for name in ("slow_a", "slow_b"):  # the two resident models, then both busy
        assert infer_http(http_url, name) == 1.0 + MODELS[name]
    finished: dict[str, float] = {}
    answers: dict[str, float] = {}

    def slow(name: str, value: float = -1.0) -> None:  # negative: SLOW_S in the model
        answers[name] = infer_http(http_url, name, value)
        finished[name] = time.monotonic()

    threads = [threading.Thread(target=slow, args=(n,)) for n in ("slow_a", "slow_b")]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    waiting = threading.Thread(target=slow, args=("m0", 1.0))  # needs one of them to go
    waiting.start()
    time.sleep(1.5)
    # Both are still answering: neither unloaded, m0 still waits.
    assert ready_models(http_url) == {"slow_a", "slow_b"}
    for thread in [*threads, waiting]:
        thread.join(timeout=120)
    assert answers == {"slow_a": 9.0, "slow_b": 19.0, "m0": 1.0}
    # m0 loaded only once a slow model's request had finished.
    assert finished["m0"] > min(finished["slow_a"], finished["slow_b"])


def test_unknown_and_broken_models_get_clear_errors(server):
    http_url, grpc_url, _ = server
    with pytest.raises(InferenceServerException) as unknown:
        infer_http(http_url, "no_such_model")
    assert "no_such_model" in str(unknown.value)
    with pytest.raises(InferenceServerException) as broken:
        infer_grpc(grpc_url, "broken")
    assert "bad_field" in str(broken.value)
    assert infer_http(http_url, "m1") == 2.0  # the server serves on


def test_a_repository_api_load_makes_room_within_the_budget(server):
    http_url, _, metrics_port = server
    client = httpclient.InferenceServerClient(http_url, network_timeout=120)
    for name in ("m0", "m1"):  # the budget is full
        assert infer_http(http_url, name) == 1.0 + MODELS[name]
    client.load_model("m2")
    assert "m2" in ready_models(http_url) and len(ready_models(http_url)) <= 2
    assert sample(metrics(metrics_port), "rayton_memory_budget_used_bytes") <= 25e6
    client.unload_model("m2")
    assert "m2" not in ready_models(http_url)
    assert infer_http(http_url, "m2") == 3.0  # an unloaded model loads again on its request
