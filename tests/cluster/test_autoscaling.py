"""Autoscaling per model: the model config's ``AUTOSCALING_CONFIG`` parameter (Serve's
``autoscaling_config``) scales the model's replicas up under load and back down after it,
down to zero replicas where ``min_replicas`` is 0.

Serve's signal is the requests a replica holds, which counts those waiting in its batcher's
queue (``@serve.batch``), so a model whose batches cannot keep up scales out. With
``AUTOSCALING_TARGET_QUEUE_TIME_US`` or ``AUTOSCALING_TARGET_PENDING_REQUESTS`` the signal
is Triton's own: the queue (:mod:`cluster.queue_autoscaling`).
"""

from __future__ import annotations

import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

SCALING = (
    '{"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 1, "upscale_delay_s": 1,'
    ' "downscale_delay_s": 3, "look_back_period_s": 2, "metrics_interval_s": 0.5}'
)
SLOW_CONFIG = f"""\
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "AUTOSCALING_CONFIG" value: {{ string_value: '{SCALING}' }} }}
"""
SLOW_MODEL = """\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.2)  # a model slower than its traffic
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
# Bounds for a busy 2-core machine.
SCALE_TIMEOUT_S = 90


def _running_replicas(app: str) -> int:
    from ray import serve

    status = serve.status().applications.get(app)
    if status is None or app not in status.deployments:
        return 0
    states = status.deployments[app].replica_states
    return int(states.get("RUNNING", 0))


def _wait_for(app: str, count: int, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if _running_replicas(app) == count:
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"'{app}' has {_running_replicas(app)} replicas, not {count}")


def _scale_up_under_load(url: str, model: str) -> tuple[float, list[str]]:
    """6 clients send to ``model`` until it runs 2 replicas: how long that took, and the
    clients' failures."""
    stop = threading.Event()
    failures: list[str] = []

    def client() -> None:
        http = httpclient.InferenceServerClient(url, network_timeout=120)
        while not stop.is_set():
            try:
                _infer_slow(http, model)
            except Exception as err:  # recorded: the tests assert there are none
                failures.append(f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=client) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        return _wait_for(model, 2, SCALE_TIMEOUT_S), failures
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _infer_slow(client: httpclient.InferenceServerClient, model: str) -> None:
    tensor = httpclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
    np.testing.assert_array_equal(client.infer(model, [tensor]).as_numpy("OUT"), [1.0])


def test_a_model_scales_up_under_load_and_back_down(serve_cluster, tmp_path):
    (tmp_path / "slow" / "1").mkdir(parents=True)
    (tmp_path / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (tmp_path / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    (tmp_path / "refused" / "1").mkdir(parents=True)
    refused = SLOW_CONFIG.replace(SCALING, '{"min_replicas": 3, "max_replicas": 2}')
    (tmp_path / "refused" / "config.pbtxt").write_text(refused)
    (tmp_path / "refused" / "1" / "model.py").write_text(SLOW_MODEL)
    serve_cluster.deploy_live(tmp_path, "explicit", ["slow", "refused"])
    index = httpclient.InferenceServerClient(serve_cluster.http_url).get_model_repository_index()
    (entry,) = [e for e in index if e["name"] == "refused"]
    assert entry["state"] == "UNAVAILABLE"
    assert "parameter 'AUTOSCALING_CONFIG'" in entry["reason"], entry
    try:
        _up_under_load_and_back_to_one(serve_cluster.http_url, "slow")
    finally:
        serve_cluster.delete_all()


def _up_under_load_and_back_to_one(url: str, model: str) -> None:
    assert _running_replicas(model) == 1  # the autoscaler's initial count
    up, failures = _scale_up_under_load(url, model)
    down = _wait_for(model, 1, SCALE_TIMEOUT_S)
    assert failures == []
    print(f"{model}: 2 replicas {up:.1f} s into the load, back to 1 {down:.1f} s after it")


# Serve's own signal would never scale this one (100 requests per replica); the queue's does.
ON_THE_QUEUE = (
    '{"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 100, "upscale_delay_s": 1,'
    ' "downscale_delay_s": 3, "look_back_period_s": 2, "metrics_interval_s": 0.5}'
)
QUEUE_TIME_TARGET = (
    'parameters { key: "AUTOSCALING_TARGET_QUEUE_TIME_US" value: { string_value: "50000" } }\n'
)


def test_a_model_scales_on_its_queue_time_where_serves_signal_would_not(serve_cluster, tmp_path):
    """``AUTOSCALING_TARGET_QUEUE_TIME_US``: 6 clients on a 0.2 s model wait ~1 s in its queue,
    20 times the 50 ms target, so it scales out; idle, it scales back."""
    (tmp_path / "queued" / "1").mkdir(parents=True)
    queued = SLOW_CONFIG.replace(SCALING, ON_THE_QUEUE) + QUEUE_TIME_TARGET
    (tmp_path / "queued" / "config.pbtxt").write_text(queued)
    (tmp_path / "queued" / "1" / "model.py").write_text(SLOW_MODEL)
    serve_cluster.deploy_live(tmp_path, "explicit", ["queued"])
    try:
        _up_under_load_and_back_to_one(serve_cluster.http_url, "queued")
    finally:
        serve_cluster.delete_all()


TO_ZERO = (
    '{"min_replicas": 0, "max_replicas": 2, "target_ongoing_requests": 1, "upscale_delay_s": 1,'
    ' "downscale_delay_s": 3, "downscale_to_zero_delay_s": 4, "look_back_period_s": 2,'
    ' "metrics_interval_s": 0.5}'
)


def _replica_samples(metrics_port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as reply:
        lines = reply.read().decode().splitlines()
    return {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("rayton_model_replicas") and 'model="to_zero"' in line
    }


def test_a_model_at_zero_replicas_answers_scales_up_and_back_to_zero(serve_cluster, tmp_path):
    """``min_replicas: 0``: the model loads on one replica (a load still proves the model
    loads), goes to zero when idle and stays READY, answers its first request by starting a
    replica (the request waits, it does not fail), scales up under load and back to zero."""
    (tmp_path / "to_zero" / "1").mkdir(parents=True)
    (tmp_path / "to_zero" / "config.pbtxt").write_text(SLOW_CONFIG.replace(SCALING, TO_ZERO))
    (tmp_path / "to_zero" / "1" / "model.py").write_text(SLOW_MODEL)
    metrics_port = free_port()
    serve_cluster.deploy_live(tmp_path, "explicit", ["to_zero"], metrics_port=metrics_port)
    client = httpclient.InferenceServerClient(serve_cluster.http_url, network_timeout=120)
    try:
        idle = _wait_for("to_zero", 0, SCALE_TIMEOUT_S)
        # Still READY at zero replicas: the index (the controller's) answers without waking
        # it, where /v2/models/to_zero/ready would go to a replica and start one.
        (entry,) = client.get_model_repository_index()
        assert (entry["name"], entry["state"]) == ("to_zero", "READY"), entry
        assert _running_replicas("to_zero") == 0
        start = time.monotonic()
        _infer_slow(client, "to_zero")  # held while a replica starts
        first = time.monotonic() - start
        up, failures = _scale_up_under_load(serve_cluster.http_url, "to_zero")
        down = _wait_for("to_zero", 0, SCALE_TIMEOUT_S)
        assert failures == []
        # /metrics shows the count and the scale events, as the controller saw them.
        deadline = time.monotonic() + 30
        while (replicas := _replica_samples(metrics_port))["rayton_model_replicas"] != 0:
            assert time.monotonic() < deadline, replicas
            time.sleep(1)
        assert replicas["rayton_model_replicas_added"] >= 2, replicas
        assert replicas["rayton_model_replicas_removed"] >= 2, replicas
        _infer_slow(client, "to_zero")  # from zero again
        print(
            f"at zero {idle:.1f} s after loading; first request from zero {first:.2f} s; "
            f"2 replicas {up:.1f} s into the load; back to zero {down:.1f} s after it"
        )
    finally:
        serve_cluster.delete_all()


def test_a_model_reloaded_at_zero_replicas_answers_from_its_new_files(serve_cluster, tmp_path):
    """A reload of a model at zero replicas (``load`` after its files changed) loads the new
    files on one replica, as a load does, keeps the model READY, answers from the new files,
    and the model goes back to zero when idle."""
    model = tmp_path / "to_zero"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(SLOW_CONFIG.replace(SCALING, TO_ZERO))
    (model / "1" / "model.py").write_text(SLOW_MODEL)
    serve_cluster.deploy_live(tmp_path, "explicit", ["to_zero"])
    client = httpclient.InferenceServerClient(serve_cluster.http_url, network_timeout=120)
    try:
        _wait_for("to_zero", 0, SCALE_TIMEOUT_S)
        (model / "1" / "model.py").write_text(SLOW_MODEL.replace("as_numpy())", "as_numpy() + 1)"))
        start = time.monotonic()
        client.load_model("to_zero")
        reload_s = time.monotonic() - start
        assert _running_replicas("to_zero") >= 1  # the new files proved on a replica
        (entry,) = client.get_model_repository_index()
        assert (entry["name"], entry["state"]) == ("to_zero", "READY"), entry
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        np.testing.assert_array_equal(client.infer("to_zero", [tensor]).as_numpy("OUT"), [2.0])
        _wait_for("to_zero", 0, SCALE_TIMEOUT_S)
        print(f"reloaded at zero replicas in {reload_s:.1f} s")
    finally:
        serve_cluster.delete_all()
