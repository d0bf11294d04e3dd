"""A python model with its own packages, served: EXECUTION_ENV_PATH (a packed venv) and Ray's
``runtime_env`` through the ``RAY_RUNTIME_ENV`` parameter; a broken environment leaves only
that model UNAVAILABLE, with the reason, while the others serve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.packed_env import PACKAGE, packed_venv
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

CONFIG = """\
backend: "python"
max_batch_size: 4
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
parameters {{ key: "{key}" value: {{ string_value: '{value}' }} }}
"""
PACKED_MODEL = f"""
import triton_python_backend_utils as pb_utils

import {PACKAGE}


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", {PACKAGE}.triple(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())
            )])
            for r in requests
        ]
"""
ENV_VAR_MODEL = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        offset = float(os.environ["RAYTON_TEST_OFFSET"])  # set by the model's runtime_env
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + offset
            )])
            for r in requests
        ]
"""


def _model(root: Path, name: str, key: str, value: str, code: str) -> Path:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(CONFIG.format(key=key, value=value))
    (root / name / "1" / "model.py").write_text(code)
    return root / name


@pytest.fixture(scope="module")
def served(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("environments")
    packed = _model(
        root, "packed", "EXECUTION_ENV_PATH", "$$TRITON_MODEL_DIRECTORY/env.tar.gz", PACKED_MODEL
    )
    packed_venv(packed)
    broken = _model(
        root,
        "broken_env",
        "EXECUTION_ENV_PATH",
        "$$TRITON_MODEL_DIRECTORY/env.tar.gz",
        PACKED_MODEL,
    )
    (broken / "env.tar.gz").write_bytes(b"not an archive")
    _model(
        root,
        "with_env_vars",
        "RAY_RUNTIME_ENV",
        '{"env_vars": {"RAYTON_TEST_OFFSET": "10"}}',
        ENV_VAR_MODEL,
    )
    grpc_port = free_port()
    models = ["packed", "broken_env", "with_env_vars"]
    serve_cluster.deploy_live(root, "explicit", models, grpc_port=grpc_port)
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def _infer(url: str, model: str, protocol: str, value: float = 2.0) -> float:
    module = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(url)
    tensor = module.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], np.float32))
    return float(client.infer(model, [tensor]).as_numpy("OUT")[0, 0])


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_packed_environment_gives_the_model_its_package(served, protocol):
    http_url, grpc_url = served
    with pytest.raises(ImportError):
        __import__(PACKAGE)  # the server's own environment does not have it
    assert _infer(http_url if protocol == "http" else grpc_url, "packed", protocol) == 6.0


def test_a_runtime_env_reaches_the_models_replicas(served):
    http_url, _ = served
    assert _infer(http_url, "with_env_vars", "http") == 12.0


def test_a_broken_archive_is_unavailable_with_the_reason_and_the_rest_serve(served):
    http_url, _ = served
    index = httpclient.InferenceServerClient(http_url).get_model_repository_index()
    (entry,) = [e for e in index if e["name"] == "broken_env"]
    assert entry["state"] == "UNAVAILABLE"
    assert "execution environment of Python model 'broken_env'" in entry["reason"]
    assert "not a readable tar archive" in entry["reason"]
    assert _infer(http_url, "packed", "http") == 6.0
