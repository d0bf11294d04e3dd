"""KServe's own Python SDK (``kserve`` 0.21) as a second real client: the Open Inference
Protocol over HTTP (JSON and binary tensors) and gRPC against a live rayton. The SDK runs in a
process of its own (:mod:`tests.support.kserve_calls` says why)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.support.kserve_calls import REQUEST_ID, A, B
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def endpoints(serve_cluster, example_repository, tmp_path_factory):
    """``add_sub`` alone, so the server is ready; HTTP and gRPC."""
    repository = tmp_path_factory.mktemp("kserve") / "repository"
    shutil.copytree(example_repository / "add_sub", repository / "add_sub")
    grpc_port = free_port()
    serve_cluster.deploy_live(repository, "none", grpc_port=grpc_port)
    yield f"http://{serve_cluster.http_url}", f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def test_kserve_sdk_reads_health_readiness_and_inference_over_http_and_grpc(endpoints):
    base_url, grpc_address = endpoints
    finished = subprocess.run(
        [sys.executable, "-m", "tests.support.kserve_calls", base_url, grpc_address, "add_sub"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    calls = json.loads(finished.stdout.splitlines()[-1])
    expected = {
        "model_name": "add_sub",
        "id": REQUEST_ID,
        "outputs": {
            "OUTPUT0": [a + b for a, b in zip(A, B, strict=True)],
            "OUTPUT1": [a - b for a, b in zip(A, B, strict=True)],
        },
    }
    assert calls["rest"] == {
        "server_live": True,  # {"live": true}: the protocol's body, which the SDK reads
        "server_ready": True,
        "model_ready": True,
        "unknown_model_ready": False,
        "infer_json": expected,
        "infer_binary": expected,
    }
    assert calls["grpc"] == {
        "server_live": True,
        "server_ready": True,
        "model_ready": True,
        "infer": expected,
    }
