"""Triton's logging extension on a live cluster: settings round trip over HTTP and gRPC, and
every replica follows them (a python model's verbose lines reach the log file only while the
verbose level is on)."""

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

from deployments.observability.log_settings import LogSettings
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster

LOGGING_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            pb_utils.Logger.log_verbose(f"verbose line {int(value[0, 0])}")
            pb_utils.Logger.log_info(f"info line {int(value[0, 0])}")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
"""
CONFIG = """\
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
DEFAULTS = LogSettings().to_json()  # Triton's (checked field by field in the unit tests)


@pytest.fixture(scope="module")
def log_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs") / "rayton.log"


@pytest.fixture(scope="module")
def server(serve_cluster, tmp_path_factory, log_file):
    root = tmp_path_factory.mktemp("logging") / "repository"
    (root / "talker" / "1").mkdir(parents=True)
    (root / "talker" / "config.pbtxt").write_text(CONFIG)
    (root / "talker" / "1" / "model.py").write_text(LOGGING_MODEL)
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "none", grpc_port=grpc_port, log_file=str(log_file))
    yield serve_cluster.http_url, f"127.0.0.1:{grpc_port}"
    serve_cluster.delete_all()


def talk(url: str, value: int) -> None:
    tensor = httpclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
    with httpclient.InferenceServerClient(url) as client:
        client.infer("talker", [tensor])


def wait_for_line(path: Path, text: str, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.2)
    return False


def test_settings_round_trip_and_every_replica_follows_them(server, log_file):
    http_url, grpc_url = server
    started = DEFAULTS | {"log_file": str(log_file)}  # set at start-up, as Triton's --log-file
    with httpclient.InferenceServerClient(http_url) as http:
        assert http.get_log_settings() == started
        assert "logging" in http.get_server_metadata()["extensions"]
        talk(http_url, 0)
        changed = http.update_log_settings({"log_verbose_level": 1})
        assert changed == started | {"log_verbose_level": 1}
        assert http.get_log_settings() == changed
    talk(http_url, 1)
    assert wait_for_line(log_file, "verbose line 1")  # written by the model's replica
    text = log_file.read_text()
    assert "info line 0" in text and "verbose line 0" not in text  # verbose was off then
    with grpcclient.InferenceServerClient(grpc_url) as grpc:
        quieter = {"log_verbose_level": 0, "log_info": False}
        settings = grpc.update_log_settings(quieter, as_json=True)["settings"]
        assert settings["log_verbose_level"] == {"uint32_param": 0}
        assert settings["log_info"] == {"bool_param": False}
        current = grpc.get_log_settings(as_json=True)["settings"]
        assert current["log_file"] == {"string_param": str(log_file)}
    talk(http_url, 2)
    with httpclient.InferenceServerClient(http_url) as http:
        http.update_log_settings({"log_info": True})
    talk(http_url, 3)
    assert wait_for_line(log_file, "info line 3")
    text = log_file.read_text()
    assert "verbose line 2" not in text and "info line 2" not in text
    assert "verbose line 3" not in text


def post_logging(http_url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://{http_url}/v2/logging", data=json.dumps(body).encode()
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_bad_settings_are_refused_on_both_protocols(server, log_file):
    http_url, grpc_url = server
    assert post_logging(http_url, {"log_info": "yes"}) == (
        400,
        {"error": "attempt to access JSON non-boolean as boolean"},
    )
    assert post_logging(http_url, {"log_file": "/tmp/elsewhere.log"}) == (
        501,
        {"error": "log file location can not be updated through network protocol"},
    )
    with (
        grpcclient.InferenceServerClient(grpc_url) as grpc,
        pytest.raises(InferenceServerException, match="invalid argument for --log_format"),
    ):
        grpc.update_log_settings({"log_format": "json"})
    restore = {k: v for k, v in DEFAULTS.items() if k != "log_file"}
    with httpclient.InferenceServerClient(http_url) as http:
        assert http.update_log_settings(restore) == DEFAULTS | {"log_file": str(log_file)}
