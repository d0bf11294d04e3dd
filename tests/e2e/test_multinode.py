"""Placement on a multi-node cluster: ``rayton cluster`` (``ray.cluster_utils.Cluster``: a head
and two worker nodes with 2 logical GPUs and the per-GPU resources each) served by
``rayton serve --address``, read back from every replica with ``rayton status``; a sequence
model's replicas on the three nodes, behind HAProxy, each sequence's requests reaching the
replica that holds it; requests naming a shared-memory region served on the region's node.

One cluster for the module; its own processes (not the session's cluster), each in a process
session of its own and ended pid by pid.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.support.dev_cluster import RAYTON, RaytonCluster
from tests.support.live_models import ADDER_MODEL
from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command, rayton_serve_env
from tests.support.sequences import MODEL as SEQUENCE_MODEL
from tests.support.sequences import (
    check_a_replica_kill,
    check_mixed_sequences,
    write_sequence_model,
)

pytestmark = pytest.mark.cluster

PINNED = """\
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { name: "g" count: 2 kind: KIND_GPU gpus: [ 0, 1 ] } ]
"""
MIXED = """\
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [
  { name: "cpu" count: 1 kind: KIND_CPU },
  { name: "gpu" count: 1 kind: KIND_GPU gpus: [ 1 ] }
]
"""
# GPU instances pinned to GPU 0 alone: one deployment, no router, on the workers only (a model
# of several groups is reached through its router, which may run on the head node and read a
# region there itself).
GPU_ZERO = """\
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { name: "g" count: 2 kind: KIND_GPU gpus: [ 0 ] } ]
"""
# One replica per node: HAProxy sends requests to all three.
REGIONAL = """\
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
parameters { key: "MAX_REPLICAS_PER_NODE" value: { string_value: "1" } }
"""
GPUS_PER_WORKER = 2
SEQUENCE_REPLICAS = 3
# Bounds for a 2-core machine running three raylets.
NODE_LOSS_RECOVERY_S = 90


def _write_model(root: Path, name: str, config: str, offset: float) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(
        ADDER_MODEL.format(init="pass", scale=1.0, offset=offset)
    )


@pytest.fixture(scope="module")
def multinode(tmp_path_factory):
    root = tmp_path_factory.mktemp("multinode")
    repository = root / "repo"
    _write_model(repository, "pinned", PINNED, 1.0)
    _write_model(repository, "mixed", MIXED, 2.0)
    _write_model(repository, "regional", REGIONAL, 3.0)
    _write_model(repository, "gpu_zero", GPU_ZERO, 4.0)  # loaded by the region test
    write_sequence_model(repository, replicas=SEQUENCE_REPLICAS, per_node=1)
    ray_tmp = Path(f"/tmp/rt{os.getpid()}m")
    env = rayton_serve_env(ray_tmp)
    env["HOME"] = str(root)  # Ray's token file and caches apart from the user's
    cluster = RaytonCluster(root / "cluster.log", env, GPUS_PER_WORKER)
    http_port, grpc_port = free_port(), free_port()
    command = rayton_serve_command(repository, http_port, grpc_port)
    command += ["--address", cluster.address, "--proxy-location", "HeadOnly"]
    command += ["--model-control-mode", "explicit", "--load-model", "pinned"]
    command += ["--load-model", "mixed", "--load-model", SEQUENCE_MODEL]
    command += ["--load-model", "regional", "--allow-client-shm", "true"]
    server = ServerProcess(command, root / "serve.log", env)
    try:
        server.wait_http(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout_s=300)
        yield cluster, f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
    finally:
        server.stop()
        cluster.server.stop()


def _status(url: str) -> dict:
    result = subprocess.run(
        [RAYTON, "status", "--url", url, "--json"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _infer(url: str, model: str, value: float, protocol: str = "http") -> float:
    """``OUT`` of ``model`` for ``IN = value`` over HTTP or gRPC (``url``: that endpoint)."""
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    return float(client.infer(model, [tensor]).as_numpy("OUT")[0, 0])


def test_the_front_runs_on_the_head_node(multinode):
    """The server, the repository controller and the frontends: never on a worker that can
    go away with the repository's state."""
    cluster, _, _ = multinode
    workers = {worker["node_id"] for worker in cluster.description["workers"]}
    code = (
        "import json, ray\n"
        "from ray._private import state\n"
        "from cluster.local import loopback_kept\n"
        f"with loopback_kept({cluster.address!r}) as ip:\n"
        f"    ray.init(address={cluster.address!r}, _node_ip_address=ip, logging_level='ERROR')\n"
        "alive = [a for a in state.actors().values() if a['State'] == 'ALIVE']\n"
        "print(json.dumps([[a['Name'], a['Address']['NodeID']] for a in alive]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    actors = json.loads(result.stdout.strip().splitlines()[-1])
    apps = ("rayton-server", "rayton-grpc", "rayton-metrics")
    front = [a for a in actors if any(app in (a[0] or "") for app in apps)]
    assert len(front) >= 4, actors  # server, repository controller, gRPC, metrics
    assert not [a for a in front if a[1] in workers], front


def test_gpu_group_becomes_half_gpu_replicas_pinned_per_gpu_over_both_nodes(multinode):
    cluster, http_url, grpc_url = multinode
    replicas = _status(http_url)["models"]["pinned"]["replicas"]
    assert len(replicas) == 4
    workers = {worker["node_id"] for worker in cluster.description["workers"]}
    by_gpu = Counter(r["cuda_visible_devices"] for r in replicas)
    assert by_gpu == {"0": 2, "1": 2}, replicas  # count: 2 per listed GPU
    for replica in replicas:
        gpu = replica["cuda_visible_devices"]
        assert replica["deployment"] == f"pinned.g.gpu{gpu}"
        assert len(replica["gpu_ids"]) == 1  # a share of one GPU from Ray's accounting
        assert replica["node_id"] in workers  # the head has no GPU
    assert {r["node_id"] for r in replicas} == workers  # spread over both workers
    assert _infer(http_url, "pinned", 1.0) == 2.0
    assert _infer(grpc_url, "pinned", 1.0, "grpc") == 2.0


def test_a_model_with_a_cpu_and_a_gpu_group_gets_both(multinode):
    _, http_url, grpc_url = multinode
    model = _status(http_url)["models"]["mixed"]
    assert [v["state"] for v in model["versions"]] == ["READY"]
    deployments = Counter(r["deployment"] for r in model["replicas"])
    assert deployments == {"mixed.cpu": 1, "mixed.gpu.gpu1": 1}
    gpu = next(r for r in model["replicas"] if r["deployment"] == "mixed.gpu.gpu1")
    assert gpu["cuda_visible_devices"] == "1"
    # Requests at once reach both groups, and the statistics count them all.
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(_infer(http_url, "mixed", 1.0)))
        for _ in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [3.0] * 16
    assert _infer(grpc_url, "mixed", 1.0, "grpc") == 3.0
    stats = httpclient.InferenceServerClient(http_url).get_inference_statistics("mixed")
    assert int(stats["model_stats"][0]["inference_stats"]["success"]["count"]) >= 17


def _region_tensors(module, region, value: float):
    """``IN`` (``value``, written into ``region`` first) and ``OUT``, both named by their
    regions, for ``module`` (tritonclient's http or grpc)."""
    shm.set_shared_memory_region(region, [np.array([[value]], np.float32)])
    tensor = module.InferInput("IN", [1, 1], "FP32")
    tensor.set_shared_memory("mn_in", 4)
    output = module.InferRequestedOutput("OUT")
    output.set_shared_memory("mn_out", 4)
    return tensor, output


def test_requests_naming_a_region_are_served_on_the_regions_node(multinode):
    """A region is a file of the head node's /dev/shm (registered through the front, which
    runs there): a request HAProxy gives a worker's replica hops to the head's replica; a
    model with no replica on the head node answers UNAVAILABLE with the reason."""
    cluster, http_url, grpc_url = multinode
    replicas = _status(http_url)["models"]["regional"]["replicas"]
    assert len({r["node_id"] for r in replicas}) == 3, replicas  # one per node
    tag = os.getpid()
    regions = {
        "in": shm.create_shared_memory_region("mn_in", f"/rt_mn_in_{tag}", 4),
        "out": shm.create_shared_memory_region("mn_out", f"/rt_mn_out_{tag}", 4),
    }
    http = httpclient.InferenceServerClient(http_url)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    try:
        http.register_system_shared_memory("mn_in", f"/rt_mn_in_{tag}", 4)
        http.register_system_shared_memory("mn_out", f"/rt_mn_out_{tag}", 4)
        answered = Counter()
        for step in range(24):  # one at a time: each reads what it wrote
            module, client = (httpclient, http) if step % 2 else (grpcclient, grpc)
            tensor, output = _region_tensors(module, regions["in"], step)
            client.infer("regional", [tensor], outputs=[output])
            out = shm.get_contents_as_numpy(regions["out"], np.float32, [1, 1])
            assert float(out[0, 0]) == step + 3.0, (step, module.__name__)
            answered[module.__name__] += 1
        assert answered == {"tritonclient.http": 12, "tritonclient.grpc": 12}
        # Streams: each routed by its first request to any node's replica, which hops it.
        replies: queue.Queue = queue.Queue()
        for stream_number in range(6):
            grpc.start_stream(callback=lambda result, error: replies.put((result, error)))
            try:
                for step in range(2):
                    value = 100 + 10 * stream_number + step
                    tensor, output = _region_tensors(grpcclient, regions["in"], value)
                    grpc.async_stream_infer("regional", [tensor], outputs=[output])
                    _, error = replies.get(timeout=60)
                    assert error is None, error
                    out = shm.get_contents_as_numpy(regions["out"], np.float32, [1, 1])
                    assert float(out[0, 0]) == value + 3.0, (stream_number, step)
            finally:
                grpc.stop_stream()
        # A model on the workers only: no replica can reach the region.
        http.load_model("gpu_zero")
        gpu_nodes = {r["node_id"] for r in _status(http_url)["models"]["gpu_zero"]["replicas"]}
        assert gpu_nodes <= set(cluster.worker_ids), gpu_nodes
        tensor = httpclient.InferInput("IN", [1, 1], "FP32")
        tensor.set_shared_memory("mn_in", 4)
        with pytest.raises(InferenceServerException, match="has no replica on node") as error:
            http.infer("gpu_zero", [tensor])
        assert error.value.status() == "503", error.value
    finally:
        http.unregister_system_shared_memory()
        for handle in regions.values():
            shm.destroy_shared_memory_region(handle)
        for model in ("regional", "gpu_zero"):  # the later tests need the worker nodes' room
            http.unload_model(model)


def test_sequences_reach_the_replica_holding_them_on_any_node(multinode):
    _, http_url, grpc_url = multinode
    replicas = _status(http_url)["models"][SEQUENCE_MODEL]["replicas"]
    assert len({r["node_id"] for r in replicas}) == SEQUENCE_REPLICAS, replicas  # one per node
    check_mixed_sequences((http_url, grpc_url), replicas=SEQUENCE_REPLICAS)


def test_a_killed_sequence_replica_fails_only_its_own_sequences(multinode):
    _, http_url, grpc_url = multinode
    try:
        lost, kept, interrupted = check_a_replica_kill(
            (http_url, grpc_url), replicas=SEQUENCE_REPLICAS, interruptions=True
        )
        print(
            f"{lost} sequences lost with the replica, {kept} kept; {interrupted} requests of "
            "kept sequences met a connection through the killed replica broken"
        )
    finally:  # the next test needs the worker nodes for the pinned model alone
        httpclient.InferenceServerClient(http_url).unload_model(SEQUENCE_MODEL)


def test_losing_a_worker_node_reschedules_its_replicas(multinode):
    cluster, http_url, _ = multinode
    # One worker's 2 GPUs hold the pinned model's 4 half-GPU replicas, not the mixed one too.
    httpclient.InferenceServerClient(http_url).unload_model("mixed")
    lost = cluster.description["workers"][0]
    failures: list[str] = []
    answered_at: list[float] = []
    stop = threading.Event()

    def client() -> None:
        # One request at a time: at most one is in flight when the node goes.
        while not stop.is_set():
            try:
                assert _infer(http_url, "pinned", 1.0) == 2.0
                answered_at.append(time.monotonic())
            except Exception as err:
                failures.append(f"{type(err).__name__}: {err}")
                time.sleep(0.2)

    thread = threading.Thread(target=client)
    thread.start()
    time.sleep(2)
    killed_at = time.monotonic()
    os.kill(lost["raylet_pid"], 9)  # the node's raylet: its workers die with it
    try:
        deadline = killed_at + NODE_LOSS_RECOVERY_S
        while time.monotonic() < deadline:
            replicas = _status(http_url)["models"]["pinned"]["replicas"]
            alive = [r for r in replicas if r["node_id"] != lost["node_id"]]
            if len(alive) == 4 and len(replicas) == 4:
                break
            time.sleep(2)
        else:
            pytest.fail(
                f"replicas not rescheduled after {NODE_LOSS_RECOVERY_S} s: {replicas}; "
                f"failed requests: {failures}"
            )
        recovered = time.monotonic() - killed_at
        time.sleep(2)
    finally:
        stop.set()
        thread.join()
    after = [t for t in answered_at if t > killed_at]
    assert after, "no request answered after the node was lost"
    # At most the one request in flight on the lost node fails.
    assert len(failures) <= 1, failures
    by_gpu = Counter(r["cuda_visible_devices"] for r in replicas)
    assert by_gpu == {"0": 2, "1": 2}
    around = [t for t in answered_at if t > killed_at - 2]
    gap = max((b - a for a, b in itertools.pairwise(around)), default=0.0)
    print(
        f"replicas back on the remaining node {recovered:.1f} s after the loss; "
        f"{len(after)} requests answered after it, the longest wait between two answers "
        f"{gap:.1f} s; failed requests: {failures}"
    )
