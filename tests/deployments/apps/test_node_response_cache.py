"""The response cache on a live cluster: the replicas of a node share one cache (a request
one replica answered is a hit on the other), Triton's statistics and metrics count hits and
misses; and the same server, started without ``--allow-client-shm``, refusing client shared
memory."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from tritonclient.utils import InferenceServerException

from deployments.apps.handles import broadcast
from deployments.apps.replica_api import ModelReplicaApi
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

SLOW_MODEL = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("DOUBLE", value * 2), pb_utils.Tensor("PLUS", value + 1),
            ]))
        return responses
"""

CONFIG = """\
name: "cached_slow"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "DOUBLE" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "PLUS" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU count: 2 } ]
response_cache { enable: true }
"""


def write_repository(root: Path) -> Path:
    model = root / "cached_slow"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(SLOW_MODEL)
    return root


def infer(client: httpclient.InferenceServerClient, value: float, outputs=()) -> dict:
    tensor = httpclient.InferInput("IN", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, np.float32))
    requested = [httpclient.InferRequestedOutput(name) for name in outputs] or None
    result = client.infer("cached_slow", [tensor], outputs=requested)
    return {out["name"]: result.as_numpy(out["name"]) for out in result.get_response()["outputs"]}


def inference_stats(client: httpclient.InferenceServerClient) -> dict:
    return client.get_inference_statistics("cached_slow")["model_stats"][0]


def per_replica_hits() -> list[int]:
    app = serve.status().applications["cached_slow"]
    targets = [(name, "cached_slow") for name in app.deployments]
    entries = asyncio.run(broadcast(targets, ModelReplicaApi.local_statistics, "cached_slow"))
    return [entry[0]["inference_stats"]["cache_hit"]["count"] for entry in entries]


@pytest.fixture(scope="module")
def cached_server(serve_cluster, tmp_path_factory):
    repository = write_repository(tmp_path_factory.mktemp("cache-repository"))
    grpc_port, metrics_port = free_port(), free_port()
    serve_cluster.deploy_live(
        repository,
        "none",
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        cpu_models="dedicated",  # one replica per instance: 2 replicas on this node
        cache_config=["local,size=1048576"],
    )
    serve_cluster.wait_for_repository()
    yield serve_cluster, grpc_port, metrics_port
    serve_cluster.delete_all()


def test_the_replicas_of_a_node_share_one_cache(cached_server):
    cluster, _, _ = cached_server
    client = httpclient.InferenceServerClient(cluster.http_url)
    first = infer(client, 1.0)
    for _ in range(20):
        again = infer(client, 1.0)
        np.testing.assert_array_equal(again["DOUBLE"], first["DOUBLE"])
        np.testing.assert_array_equal(again["PLUS"], np.full((1, 4), 2.0))
    stats = inference_stats(client)
    inference = stats["inference_stats"]
    assert (inference["cache_miss"]["count"], inference["cache_hit"]["count"]) == (1, 20)
    assert stats["execution_count"] == 1 and stats["inference_count"] == 1
    hits = per_replica_hits()
    # Serve spread the 20 hits over both replicas: the one that did not run the request
    # answered it from the node's cache.
    assert len(hits) == 2 and all(count > 0 for count in hits), hits


def test_a_hit_answers_the_outputs_asked_for_over_both_protocols(cached_server):
    cluster, grpc_port, _ = cached_server
    client = httpclient.InferenceServerClient(cluster.http_url)
    infer(client, 5.0, ["DOUBLE"])
    assert list(infer(client, 5.0, ["PLUS"])) == ["PLUS"]
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    tensor = grpcclient.InferInput("IN", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), 5.0, np.float32))
    result = grpc.infer("cached_slow", [tensor])
    np.testing.assert_array_equal(result.as_numpy("PLUS"), np.full((1, 4), 6.0))
    np.testing.assert_array_equal(result.as_numpy("DOUBLE"), np.full((1, 4), 10.0))


def test_metrics_count_hits_and_misses_per_model(cached_server):
    cluster, _, metrics_port = cached_server
    client = httpclient.InferenceServerClient(cluster.http_url)
    infer(client, 9.0)
    infer(client, 9.0)
    inference = inference_stats(client)["inference_stats"]
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    samples = {
        family.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if family.name.startswith("nv_cache_num") and sample.labels.get("model") == "cached_slow"
    }
    assert samples["nv_cache_num_hits_per_model"] == inference["cache_hit"]["count"]
    assert samples["nv_cache_num_misses_per_model"] == inference["cache_miss"]["count"]


def test_a_server_that_does_not_allow_client_shm_refuses_regions(cached_server):
    # This server runs with the default --allow-client-shm false, as Triton since 2.71.
    cluster, grpc_port, _ = cached_server
    client = httpclient.InferenceServerClient(cluster.http_url)
    disabled = "Client shared memory is disabled. Start the server with '--allow-client-shm=true'"
    with pytest.raises(InferenceServerException, match=re.escape(disabled)):
        client.register_system_shared_memory("region", "/rt_key", 64)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    with pytest.raises(InferenceServerException, match=r"UNIMPLEMENTED.*disabled"):
        grpc.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []
    assert "system_shared_memory" in client.get_server_metadata()["extensions"]
