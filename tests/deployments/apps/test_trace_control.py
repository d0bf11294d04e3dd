"""Triton's trace extension on a live cluster: every setting round trips over HTTP and gRPC
(server-wide and per model), bad settings are refused on both, and traced requests reach the
trace file with Triton's layout (HTTP, gRPC, an ensemble's steps as its children, the count)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

ECHO = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
ECHO_CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
PIPELINE_CONFIG = """\
platform: "ensemble"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling {
  step [ { model_name: "echo" model_version: -1
           input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ]
}
"""
HTTP_STAMPS = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "INFER_RESPONSE_COMPLETE",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]


ANSWER = {"model_name": "echo", "model_version": "1", "OUT": [3.0, 4.0]}


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("traces") / "trace.json"


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory, trace_file):
    root = tmp_path_factory.mktemp("tracing") / "repository"
    (root / "echo" / "1").mkdir(parents=True)
    (root / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    (root / "echo" / "1" / "model.py").write_text(ECHO)
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(PIPELINE_CONFIG)
    grpc_port = free_port()
    trace = {"trace_file": str(trace_file), "trace_level": ["TIMESTAMPS"], "trace_rate": 1}
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port, trace=trace)
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def started(trace_file: Path) -> dict:
    return {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": str(trace_file),
        "trace_mode": "triton",
    }


def send(http_url: str, model: str = "echo", request_id: str = "") -> None:
    tensor = httpclient.InferInput("IN", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
    with httpclient.InferenceServerClient(http_url) as client:
        client.infer(model, [tensor], request_id=request_id)


def traces(trace_file: Path) -> dict[int, dict]:
    """id -> {"header": ..., "stamps": [names], "tensors": [...]} from the trace file."""
    found: dict[int, dict] = {}
    if not trace_file.exists():
        return found
    for event in json.loads(trace_file.read_text()):
        entry = found.setdefault(event["id"], {"header": None, "stamps": [], "tensors": []})
        if "model_name" in event:
            entry["header"] = event
        elif "timestamps" in event:
            entry["stamps"] += [t["name"] for t in event["timestamps"]]
        else:
            entry["tensors"].append(event)
    return found


def wait_for_traces(trace_file: Path, count: int, timeout_s: float = 15.0) -> dict[int, dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = traces(trace_file)
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{count} traces expected, the file has {len(traces(trace_file))}")


def post(http_url: str, path: str, body) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{http_url}{path}", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_traced_requests_reach_the_trace_file(server, trace_file):
    http_url, grpc_url = server
    with httpclient.InferenceServerClient(http_url) as http:
        assert "trace" in http.get_server_metadata()["extensions"]
        assert http.get_trace_settings() == started(trace_file)
    send(http_url, request_id="first")
    (first,) = wait_for_traces(trace_file, 1).values()
    assert first["header"] == {
        "id": 1,
        "model_name": "echo",
        "model_version": 1,
        "request_id": "first",
    }
    assert first["stamps"] == HTTP_STAMPS
    with grpcclient.InferenceServerClient(grpc_url) as grpc:
        tensor = grpcclient.InferInput("IN", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32))
        grpc.infer("echo", [tensor])
    grpc_trace = wait_for_traces(trace_file, 2)[2]
    assert grpc_trace["stamps"][:2] == ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"]
    assert grpc_trace["stamps"][-2:] == ["GRPC_SEND_START", "GRPC_SEND_END"]
    send(http_url, "pipeline")
    found = wait_for_traces(trace_file, 4)
    (ensemble,) = [t for t in found.values() if t["header"]["model_name"] == "pipeline"]
    (step,) = [t for t in found.values() if t["header"].get("parent_id")]
    assert step["header"]["model_name"] == "echo"
    assert step["header"]["parent_id"] == ensemble["header"]["id"]
    assert "COMPUTE_START" in step["stamps"] and "HTTP_RECV_START" in ensemble["stamps"]
    # The generate extension's requests are traced as HTTP inferences
    body = {"IN": [3.0, 4.0]}
    assert post(http_url, "/v2/models/echo/generate", body) == (200, ANSWER)
    generated = wait_for_traces(trace_file, 5)[5]
    assert generated["header"]["model_name"] == "echo"
    # (its reply is a stream: sending starts once the first response is there)
    assert sorted(generated["stamps"]) == sorted(HTTP_STAMPS)
    assert generated["stamps"][:2] == HTTP_STAMPS[:2] and generated["stamps"][-1] == "HTTP_SEND_END"


def test_count_level_and_tensors_change_what_is_traced(server, trace_file):
    http_url, _ = server
    before = len(wait_for_traces(trace_file, 1))
    with httpclient.InferenceServerClient(http_url) as http:
        http.update_trace_settings(settings={"trace_count": "2", "trace_level": ["TENSORS"]})
        for _ in range(4):
            send(http_url)
        found = wait_for_traces(trace_file, before + 2)
        time.sleep(1.0)  # anything beyond the count would have arrived by now
        assert len(traces(trace_file)) == before + 2
        assert http.get_trace_settings()["trace_count"] == "0"
        last = found[max(found)]
        assert last["stamps"] == []  # TENSORS only
        assert [t["activity"] for t in last["tensors"]] == [
            "TENSOR_QUEUE_INPUT",
            "TENSOR_BACKEND_OUTPUT",
        ]
        assert last["tensors"][0]["tensor"] == {
            "name": "IN",
            "data": "1,2",
            "shape": "1,2",
            "dtype": "FP32",
        }
        http.update_trace_settings(settings={"trace_count": "-1", "trace_level": ["OFF"]})
        send(http_url)
        time.sleep(1.0)
        assert len(traces(trace_file)) == before + 2  # OFF: nothing more
        restored = http.update_trace_settings(settings={"trace_level": None, "trace_count": None})
        assert restored == started(trace_file)


def test_every_setting_round_trips_server_wide_and_per_model(server, trace_file):
    http_url, grpc_url = server
    with httpclient.InferenceServerClient(http_url) as http:
        changed = http.update_trace_settings(
            settings={"trace_rate": "5", "trace_count": "7", "log_frequency": "3"}
        )
        assert changed == started(trace_file) | {
            "trace_rate": "5",
            "trace_count": "7",
            "log_frequency": "3",
        }
        assert http.get_trace_settings() == changed
        own = http.update_trace_settings("echo", {"trace_rate": "9", "trace_level": ["TENSORS"]})
        assert own == changed | {"trace_rate": "9", "trace_level": ["TENSORS"]}
        assert http.get_trace_settings("echo") == own
        assert http.get_trace_settings("pipeline") == changed
    with grpcclient.InferenceServerClient(grpc_url) as grpc:
        model = grpc.get_trace_settings("echo", as_json=True)["settings"]
        assert model["trace_rate"] == {"value": ["9"]}
        cleared = grpc.update_trace_settings("echo", {"trace_rate": None}, as_json=True)
        assert cleared["settings"]["trace_rate"] == {"value": ["5"]}
        server_wide = grpc.update_trace_settings(
            settings={"trace_rate": None, "trace_count": None, "log_frequency": None},
            as_json=True,
        )["settings"]
        assert server_wide["trace_rate"] == {"value": ["1"]}
        assert server_wide["log_frequency"] == {"value": ["0"]}
        grpc.update_trace_settings("echo", {"trace_level": None})
    with httpclient.InferenceServerClient(http_url) as http:
        assert http.get_trace_settings("echo") == started(trace_file)


def test_bad_settings_are_refused_on_both_protocols(server, trace_file):
    http_url, grpc_url = server
    assert post(http_url, "/v2/trace/setting", {"trace_rate": "0"}) == (
        400,
        {"error": "Attempting to set invalid trace setting :sample rate must be non-zero"},
    )
    assert post(http_url, "/v2/trace/setting", {"trace_file": "/tmp/elsewhere.json"}) == (
        501,
        {"error": "trace file location can not be updated through network protocol"},
    )
    assert post(http_url, "/v2/models/nosuch/trace/setting", {"trace_rate": "3"}) == (
        400,
        {"error": "Request for unknown model : nosuch"},
    )
    assert post(http_url, "/v2/models/echo/trace/setting", {"trace_count": "-5"}) == (
        400,
        {"error": "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"},
    )
    with grpcclient.InferenceServerClient(grpc_url) as grpc:
        with pytest.raises(InferenceServerException, match="expect only 1 value for 'trace_rate'"):
            grpc.update_trace_settings(settings={"trace_rate": ["1", "2"]})
        with pytest.raises(InferenceServerException, match="Request for unknown model : nosuch"):
            grpc.get_trace_settings("nosuch")
    with httpclient.InferenceServerClient(http_url) as http:
        assert http.get_trace_settings() == started(trace_file)
