"""Models loaded on demand spread over a 3-node ``rayton cluster`` by each node's budget:
models with replicas of their own (``--cpu-models dedicated``) go to the worker with the most
room, two per worker under a budget that holds two, none on the head; once both are full the
least recently used model on the chosen worker makes room. GPU models under a GPU budget that
holds one per GPU go one to each of the workers' four (logical) GPUs, and the fifth takes the
GPU of the least recently used (one of them loaded at start-up, placed the same way). Read
back with ``rayton status``.
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
GPUS_PER_WORKER = 2


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    root = tmp_path_factory.mktemp("on_demand_spread")
    repository = root / "repo"
    for number in range(MODELS):
        write_numbered_model(repository, f"m{number}", number, "onnx", footprint="10MB")
        write_numbered_model(
            repository, f"g{number}", 10 + number, footprint="1MB", gpu_footprint="1GB"
        )
    env = rayton_serve_env(Path(f"/tmp/rt{os.getpid()}s"))
    env["HOME"] = str(root)  # Ray's token file and caches apart from the user's
    cluster = RaytonCluster(root / "cluster.log", env, GPUS_PER_WORKER)
    http_port, grpc_port = free_port(), free_port()
    command = rayton_serve_command(repository, http_port, grpc_port)
    command += ["--address", cluster.address, "--proxy-location", "HeadOnly"]
    command += ["--load-on-demand", "true", "--memory-budget", "25MB"]
    command += ["--gpu-memory-budget", "1.5GB", "--cpu-models", "dedicated"]
    command += ["--model-control-mode", "explicit", "--load-model", "g0"]  # placed by budget
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
    """Each CPU model (``m<n>``) with replicas -> the nodes they run on."""
    models = rayton_status(url)["models"]
    return {
        name: {replica["node_id"] for replica in model["replicas"]}
        for name, model in models.items()
        if model["replicas"] and name.startswith("m")
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


def test_gpu_models_go_one_per_gpu_by_the_gpu_budget(spread):
    cluster, url = spread
    for number in range(4):
        assert infer(url, f"g{number}") == 11.0 + number
    status = rayton_status(url)
    gpus = {}
    for number in range(4):
        model = status["models"][f"g{number}"]
        (replica,) = model["replicas"]
        gpus[f"g{number}"] = f"{replica['node_id']}/gpu{replica['cuda_visible_devices']}"
        assert model["memory"]["gpu"] == gpus[f"g{number}"], model
        assert model["memory"]["gpu_bytes"] == 1_000_000_000
    assert len(set(gpus.values())) == 4, gpus  # each on a GPU of its own
    assert status["models"]["g0"]["memory"]["loads"] == 0  # loaded at start-up
    assert {gpu.split("/")[0] for gpu in gpus.values()} == set(cluster.worker_ids)

    assert infer(url, "g0") == 11.0  # g1 is now the least recently used
    assert infer(url, "g4") == 15.0  # no GPU has room: g1's makes it
    status = rayton_status(url)
    assert status["models"]["g1"]["memory"]["evictions"] == 1
    assert not status["models"]["g1"]["replicas"]
    (replica,) = status["models"]["g4"]["replicas"]
    assert f"{replica['node_id']}/gpu{replica['cuda_visible_devices']}" == gpus["g1"]
    budget = status["memory_budget"]
    assert (budget["gpu_capacity_bytes"], budget["gpu_used_bytes"]) == (1_500_000_000, 4 * 10**9)
