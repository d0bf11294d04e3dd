"""Triton's system shared-memory extension on a live cluster, with tritonclient's own
shared-memory utilities: register, infer with inputs read from and outputs written into
regions (HTTP and gRPC, a dedicated model and the shared host), status, unregister, and a
server that does not allow client shared memory."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_CPU count: {instances} }} ]
"""
MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            text = np.array([[b"sum=%d" % int(row.sum())] for row in value], np.object_)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", value * 2), pb_utils.Tensor("TEXT", text)]
            ))
        return responses
"""
SHARED, DEDICATED = "shm_hosted", "shm_dedicated"


def write_repository(root):
    for name, instances in ((SHARED, 1), (DEDICATED, 2)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, instances=instances))
        (root / name / "1" / "model.py").write_text(MODEL)
    return root


@pytest.fixture(scope="module")
def shm_server(serve_cluster, tmp_path_factory):
    repository = write_repository(tmp_path_factory.mktemp("shm-repository"))
    grpc_port = free_port()
    serve_cluster.deploy_live(repository, "none", grpc_port=grpc_port, allow_client_shm=True)
    serve_cluster.wait_for_repository()
    http = httpclient.InferenceServerClient(serve_cluster.http_url)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    tag = os.getpid()
    regions = {
        "input": shm.create_shared_memory_region("input", f"/rt_in_{tag}", 64),
        "output": shm.create_shared_memory_region("output", f"/rt_out_{tag}", 128),
    }
    yield http, grpc, regions, tag
    http.unregister_system_shared_memory()
    for handle in regions.values():
        shm.destroy_shared_memory_region(handle)
    serve_cluster.delete_all()


def test_inputs_and_outputs_travel_through_registered_regions(shm_server):
    http, grpc, regions, tag = shm_server
    http.register_system_shared_memory("input", f"/rt_in_{tag}", 64)
    grpc.register_system_shared_memory("output", f"/rt_out_{tag}", 128)
    status = http.get_system_shared_memory_status()
    assert sorted(r["name"] for r in status) == ["input", "output"]
    assert (
        grpc.get_system_shared_memory_status("input", as_json=True)["regions"]["input"]["key"]
        == f"/rt_in_{tag}"
    )
    for step, model in enumerate((SHARED, DEDICATED, DEDICATED, SHARED)):
        data = np.full((2, 4), step + 1, np.float32)
        shm.set_shared_memory_region(regions["input"], [data])
        client, module = (http, httpclient) if step % 2 == 0 else (grpc, grpcclient)
        tensor = module.InferInput("IN", [2, 4], "FP32")
        tensor.set_shared_memory("input", data.nbytes)
        out = module.InferRequestedOutput("OUT")
        out.set_shared_memory("output", 32, offset=16)
        text = module.InferRequestedOutput("TEXT")
        result = client.infer(model, [tensor], outputs=[out, text])
        entry = result.get_output("OUT")  # the region holds the data, not the reply
        if client is grpc:
            assert list(entry.shape) == [2, 4] and not entry.HasField("contents")
            assert result.get_response().raw_output_contents[0] == b""
        else:
            assert entry["shape"] == [2, 4] and "data" not in entry and "parameters" not in entry
        written = shm.get_contents_as_numpy(regions["output"], np.float32, [2, 4], offset=16)
        np.testing.assert_array_equal(written, data * 2)
        assert result.as_numpy("TEXT").reshape(-1).tolist() == [b"sum=%d" % (4 * (step + 1))] * 2


def test_tritons_errors_for_regions(shm_server):
    http, grpc, _, tag = shm_server
    with pytest.raises(InferenceServerException, match="already in manager"):
        http.register_system_shared_memory("input", f"/rt_in_{tag}", 64)
    with pytest.raises(InferenceServerException, match="Unable to open shared memory region"):
        grpc.register_system_shared_memory("missing", f"/rt_none_{tag}", 64)
    with pytest.raises(InferenceServerException, match="Invalid shared memory region"):
        http.register_system_shared_memory("large", f"/rt_in_{tag}", 4096)
    tensor = httpclient.InferInput("IN", [1, 4], "FP32")
    tensor.set_shared_memory("input", 16, offset=56)
    with pytest.raises(InferenceServerException, match="Invalid offset \\+ byte size"):
        http.infer(DEDICATED, [tensor])
    tensor = httpclient.InferInput("IN", [1, 4], "FP32")
    tensor.set_shared_memory("input", 16)
    small = httpclient.InferRequestedOutput("OUT")
    small.set_shared_memory("output", 8)
    with pytest.raises(InferenceServerException, match="should be at least 16 bytes"):
        http.infer(DEDICATED, [tensor], outputs=[small])


def test_an_unregistered_region_is_unknown_to_every_replica(shm_server):
    http, grpc, regions, tag = shm_server
    http.unregister_system_shared_memory("input")
    tensor = grpcclient.InferInput("IN", [1, 4], "FP32")
    tensor.set_shared_memory("input", 16)
    for _ in range(4):  # both replicas of the dedicated model
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region"):
            grpc.infer(DEDICATED, [tensor])
    http.register_system_shared_memory("input", f"/rt_in_{tag}", 64)
    shm.set_shared_memory_region(regions["input"], [np.ones((1, 4), np.float32)])
    result = grpc.infer(DEDICATED, [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUT"), np.full((1, 4), 2.0))


def test_a_streams_outputs_go_into_their_region(shm_server):
    _, grpc, regions, tag = shm_server
    grpc.unregister_system_shared_memory()
    grpc.register_system_shared_memory("input", f"/rt_in_{tag}", 64)
    grpc.register_system_shared_memory("output", f"/rt_out_{tag}", 128)
    replies: list = []
    grpc.start_stream(callback=lambda result, error: replies.append((result, error)))
    try:
        for value in (4.0, 7.0):
            shm.set_shared_memory_region(regions["input"], [np.full((1, 4), value, np.float32)])
            tensor = grpcclient.InferInput("IN", [1, 4], "FP32")
            tensor.set_shared_memory("input", 16)
            out = grpcclient.InferRequestedOutput("OUT")
            out.set_shared_memory("output", 16, offset=64)
            grpc.async_stream_infer(DEDICATED, [tensor], outputs=[out])
            wanted = 1 if value == 4.0 else 2
            deadline = time.monotonic() + 10
            while len(replies) < wanted and time.monotonic() < deadline:
                time.sleep(0.05)
            result, error = replies[-1]
            assert error is None, error
            assert result.get_response().raw_output_contents[0] == b""
            written = shm.get_contents_as_numpy(regions["output"], np.float32, [1, 4], offset=64)
            np.testing.assert_array_equal(written, np.full((1, 4), 2 * value))
    finally:
        grpc.stop_stream()
