"""A request for a model at zero replicas waits a bounded time on ``rayton serve``: behind
HAProxy, Serve's proxy holds it while a replica starts, up to
``--scale-from-zero-timeout-secs``, and the client then gets Triton's UNAVAILABLE as JSON; the
replica it woke keeps starting while requests keep coming, and answers them."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from cluster.haproxy_wrapper import NO_REPLICA_STARTED
from tests.support.ports import free_port
from tests.support.processes import ServerProcess, rayton_serve_command, rayton_serve_env

pytestmark = pytest.mark.cluster

# Idle for 8 s: to zero. The retries below come closer together, so the replica the timed-out
# request woke is not stopped before it serves.
SCALING = (
    '{"min_replicas": 0, "max_replicas": 1, "downscale_to_zero_delay_s": 8,'
    ' "downscale_delay_s": 8, "look_back_period_s": 1, "metrics_interval_s": 0.5}'
)
CONFIG = f"""\
backend: "python"
max_batch_size: 4
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
parameters {{ key: "AUTOSCALING_CONFIG" value: {{ string_value: '{SCALING}' }} }}
parameters {{ key: "SLOW_START_MARKER" value: {{ string_value: "{{marker}}" }} }}
"""
# A replica started once the marker exists takes 20 s to initialize: longer than the bound.
MODEL = """\
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if os.path.exists(config["parameters"]["SLOW_START_MARKER"]["string_value"]):
            time.sleep(20)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)])
            for r in requests
        ]
"""
HELD_S = 3


def _replicas(http_url: str, model: str) -> int:
    with urllib.request.urlopen(f"http://{http_url}/v2/rayton/status", timeout=30) as reply:
        return len(json.loads(reply.read())["models"][model]["replicas"])


def _infer(http_url: str) -> tuple[int, dict]:
    """(HTTP status, JSON body) of one request, as any HTTP client sees it."""
    body = {"inputs": [{"name": "IN", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]}
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/waking/infer",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_request_at_zero_replicas_waits_a_bounded_time_then_the_replica_serves(tmp_path):
    marker = tmp_path / "slow-start"
    (tmp_path / "repo" / "waking" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "waking" / "config.pbtxt").write_text(
        CONFIG.replace("{marker}", str(marker))
    )
    (tmp_path / "repo" / "waking" / "1" / "model.py").write_text(MODEL)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # AF_UNIX paths: <108 bytes
    http_port = free_port()
    command = rayton_serve_command(tmp_path / "repo", http_port, free_port())
    command += ["--scale-from-zero-timeout-secs", str(HELD_S)]
    server = ServerProcess(command, tmp_path / "serve.log", rayton_serve_env(ray_tmp))
    http_url = f"127.0.0.1:{http_port}"
    try:
        server.wait_http(f"http://{http_url}/v2/health/ready", timeout_s=300)
        deadline = time.monotonic() + 90
        while _replicas(http_url, "waking"):
            assert time.monotonic() < deadline, "the idle model never went to zero replicas"
            time.sleep(1)
        # The last replica drains for 2 s (a cluster rayton starts) and HAProxy then drops it.
        time.sleep(6)
        assert _replicas(http_url, "waking") == 0
        marker.touch()  # the replica this request wakes starts slowly
        start = time.monotonic()
        status, body = _infer(http_url)
        held = time.monotonic() - start
        assert status == 503 and body == {"error": NO_REPLICA_STARTED}, (status, body)
        assert HELD_S - 0.5 <= held < HELD_S + 10, held
        # The replica keeps starting: a later request gets the model's answer.
        client = httpclient.InferenceServerClient(http_url, network_timeout=120)
        deadline = time.monotonic() + 120
        while True:
            tensor = httpclient.InferInput("IN", [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[1.0]], np.float32))
            try:
                out = client.infer("waking", [tensor]).as_numpy("OUT")
                break
            except Exception as err:
                assert time.monotonic() < deadline, f"never served after the timeout: {err}"
                time.sleep(1)
        assert float(out[0, 0]) == 2.0
        print(
            f"held {held:.1f} s (bound {HELD_S} s), then answered "
            f"{time.monotonic() - start:.1f} s after the first request"
        )
    finally:
        server.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)
