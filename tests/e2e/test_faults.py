"""Faults a live server survives when a replica process dies: a python model running in its
replica's process (``--python-instances in-replica``) that kills that process, a replica
killed by pid under load, and a model whose ``initialize`` raises. Each costs only the
requests it must: the failing ones end promptly with an error (never a hang), the other
models keep serving, and the model serves again once Serve has replaced its replica.

Models get replicas of their own here (``cpu_models="dedicated"``): with the shared host
(``rayton serve``'s default for CPU models) a replica that dies takes every model it hosts
with it, as a Triton process does. A python model in its stub process (the default):
``test_python_stubs.py``.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.crashing_models import (
    CONFIG,
    ECHO,
    PROMPT_S,
    RECOVERY_S,
    infer,
    replica_pids,
    serves,
    steady_load,
    wait_until,
)
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

INIT_RAISES = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("the weights are missing")

    def execute(self, requests):
        return []
"""


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults") / "repository"
    for name, code in (("crashes", ECHO), ("steady", ECHO), ("init_fails", INIT_RAISES)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG)
        (root / name / "1" / "model.py").write_text(code)
    grpc_port = free_port()
    serve_cluster.deploy_live(
        root, "none", grpc_port=grpc_port, cpu_models="dedicated", python_instances="in-replica"
    )
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def test_a_model_whose_initialize_raises_is_unavailable_with_the_reason(server):
    http_url, _ = server
    with httpclient.InferenceServerClient(http_url) as client:
        (entry,) = [m for m in client.get_model_repository_index() if m["name"] == "init_fails"]
        assert entry["state"] == "UNAVAILABLE"
        assert "the weights are missing" in entry["reason"]
        assert not client.is_model_ready("init_fails")
    assert serves(http_url, "steady")


def test_a_model_that_kills_its_process_fails_that_request_and_comes_back(server):
    http_url, grpc_url = server
    assert serves(http_url, "crashes")
    start = time.monotonic()
    with pytest.raises(InferenceServerException) as failed:
        infer(http_url, "crashes", -1.0)
    assert time.monotonic() - start < PROMPT_S
    assert failed.value.status() and failed.value.status().startswith("5"), failed.value
    assert serves(http_url, "steady")  # its own process: untouched
    back = wait_until(lambda: serves(http_url, "crashes"), RECOVERY_S)
    assert back is not None
    error = failed.value
    print(f"os._exit over HTTP: {error.status()} {error.message()!r}, back in {back:.1f} s")
    # Over gRPC the same fault is an error status, not a hang.
    tensor = grpcclient.InferInput("IN", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.full((1, 2), -1.0, np.float32))
    start = time.monotonic()
    with (
        grpcclient.InferenceServerClient(grpc_url) as client,
        pytest.raises(InferenceServerException) as failed,
    ):
        client.infer("crashes", [tensor], client_timeout=PROMPT_S)
    assert time.monotonic() - start < PROMPT_S
    assert "the replica serving it stopped before answering" in failed.value.message()
    back = wait_until(lambda: serves(http_url, "crashes"), RECOVERY_S)
    assert back is not None
    print(f"os._exit over gRPC: {failed.value.status()} {failed.value.message()[:80]!r}")


def test_a_replica_killed_under_load_is_replaced(server):
    http_url, _ = server
    (pid,) = replica_pids(http_url, "steady")
    with steady_load(http_url, "steady") as outcomes:
        time.sleep(2.0)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        recovered = wait_until(
            lambda: any(o.ok and o.begun > killed for o in outcomes[-8:]), RECOVERY_S
        )
        time.sleep(2.0)
    assert recovered is not None, "no request succeeded after the kill"
    assert replica_pids(http_url, "steady") != [pid]
    assert max(o.seconds for o in outcomes) < PROMPT_S + 5  # nothing hung
    before = [o.ok for o in outcomes if o.begun + 0.5 < killed]
    assert before and all(before)
    failed = [o for o in outcomes if not o.ok]
    print(f"replica killed: {len(failed)} failed requests, served again after {recovered:.1f} s")
    assert outcomes[-1].ok  # serving again at the end


def test_errors_after_the_faults_are_still_tritons(server):
    http_url, _ = server
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/init_fails/infer", data=b'{"inputs": []}'
    )
    with pytest.raises(urllib.error.HTTPError) as answered:
        urllib.request.urlopen(request, timeout=30)
    assert answered.value.code in (400, 503)
    assert "error" in json.loads(answered.value.read())
