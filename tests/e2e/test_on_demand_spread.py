"""Models loaded on demand spread over a 3-node ``rayton cluster`` by each node's budget:
models with replicas of their own (``--cpu-models dedicated``) go to the worker with the most
room, two per worker under a budget that holds two, none on the head; once both are full the
least recently used model on the chosen worker makes room. Read back with ``rayton status``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.dev_cluster import RaytonCluster, rayton_status
from tests.support.numbered_models import write_numbered_model
from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command, rayton_serve_env

pytestmark = pytest.mark.cluster

MODELS = 5


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    root = tmp_path_factory.mktemp("on_demand_spread")
    repository = root / "repo"
    for number in range(MODELS):
        write_numbered_model(repository, f"m{number}", number, "onnx", footprint="10MB")
    env = rayton_serve_env(Path(f"/tmp/rt{os.getpid()}s"))
    env["HOME"] = str(root)  # Ray's token file and caches apart from the user's
    cluster = RaytonCluster(root / "cluster.log", env)
    http_port, grpc_port = free_port(), free_port()
    command = rayton_serve_command(repository, http_port, grpc_port)
    command += ["--address", cluster.address, "--proxy-location", "HeadOnly"]
    command += ["--load-on-demand", "true", "--memory-budget", "25MB"]
    command += ["--cpu-models", "dedicated"]
    server = ServerProcess(command, root / "serve.log", env)
    try:
        server.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout_s=300)
        yield cluster, f"127.0.0.1:{http_port}"
    finally:
        server.stop()
        cluster.server.stop()


def infer(url: str, model: str) -> float:
    client = httpclient.InferenceServerClient(url, network_timeout=300)
    tensor = httpclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
    return float(client.infer(model, [tensor]).as_numpy("OUT")[0, 0])


def nodes_of(url: str) -> dict[str, set[str]]:
    """Each model with replicas -> the nodes they run on."""
    models = rayton_status(url)["models"]
    return {
        name: {replica["node_id"] for replica in model["replicas"]}
        for name, model in models.items()
        if model["replicas"]
    }


def test_models_spread_over_the_workers_by_budget(spread):
    cluster, url = spread
    workers = set(cluster.worker_ids)
    for number in range(4):
        assert infer(url, f"m{number}") == 1.0 + number
    placed = nodes_of(url)
    assert set(placed) == {"m0", "m1", "m2", "m3"}
    assert all(len(nodes) == 1 and nodes <= workers for nodes in placed.values()), (
        placed,
        workers,
    )
    per_worker = Counter(next(iter(nodes)) for nodes in placed.values())
    assert sorted(per_worker.values()) == [2, 2], placed  # the budget holds two per node

    assert infer(url, "m4") == 5.0  # no room left: the LRU model on its worker goes
    placed = nodes_of(url)
    assert "m0" not in placed and next(iter(placed["m4"])) in workers, placed
    assert sorted(Counter(next(iter(n)) for n in placed.values()).values()) == [2, 2]
    status = rayton_status(url)
    assert status["models"]["m0"]["memory"]["evictions"] == 1
