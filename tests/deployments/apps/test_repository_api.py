"""The repository API in every model control mode, live, with the unmodified tritonclient.

Each mode gets its own server deployed as ``rayton serve`` deploys it (the repository
controller deploys the models) on the session's cluster; the ``none`` mode of a Serve config
(models owned by the config) is covered too. Messages and codes follow Triton 2.51.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.live_models import write_adder, write_chain, write_warm_model
from tests.support.ports import free_port

pytestmark = pytest.mark.cluster


def infer(client, model: str, value: float = 1.0, version: str = "") -> float:
    module = grpcclient if isinstance(client, grpcclient.InferenceServerClient) else httpclient
    tensor = module.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], np.float32))
    return float(client.infer(model, [tensor], model_version=version).as_numpy("OUT")[0, 0])


def index_of(client) -> dict[str, list[dict]]:
    """The repository index by model name (HTTP client)."""
    found: dict[str, list[dict]] = {}
    for entry in client.get_model_repository_index():
        found.setdefault(entry["name"], []).append(entry)
    return found


def raw_post(url: str, path: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{url}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            data = response.read()
            return response.status, json.loads(data) if data else {}
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


class Server:
    def __init__(self, cluster, grpc_port: int) -> None:
        self.cluster = cluster
        self.http_url = cluster.http_url
        self.grpc_url = f"127.0.0.1:{grpc_port}"

    def http(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(self.http_url, network_timeout=180)

    def grpc(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.grpc_url)


# ----------------------------------------------------------------------------- explicit mode


@pytest.fixture(scope="module")
def explicit(serve_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("explicit") / "repository"
    write_adder(root, "first", offset=1.0)
    write_adder(root, "second", scale=2.0, offset=0.0)
    write_chain(root, "chain", "first", "second")
    write_adder(root, "init_fails", fail_initialize=True)
    write_chain(root, "broken_chain", "first", "init_fails")
    write_warm_model(root, name="warm")
    write_warm_model(root, fail_on_zeros=True, name="cold")
    grpc_port = free_port()
    serve_cluster.deploy_live(root, "explicit", ["first"], grpc_port=grpc_port)
    server = Server(serve_cluster, grpc_port)
    server.root = root
    yield server
    serve_cluster.delete_all()


def test_explicit_start_up_loads_only_the_named_models(explicit):
    with explicit.http() as client:
        index = index_of(client)
        assert index["first"] == [{"name": "first", "version": "1", "state": "READY"}]
        for never_loaded in ("second", "chain", "init_fails", "warm", "cold", "broken_chain"):
            assert index[never_loaded] == [{"name": never_loaded}]
        assert client.is_server_ready()
        assert infer(client, "first", 1.0) == 2.0
        extensions = client.get_server_metadata()["extensions"]
        assert "model_repository(unload_dependents)" in extensions
    with explicit.grpc() as client:
        models = client.get_model_repository_index(as_json=True)["models"]
        assert {m["name"] for m in models} == {
            "first",
            "second",
            "chain",
            "init_fails",
            "warm",
            "cold",
            "broken_chain",
        }
        assert client.get_model_repository_index(as_json=True)["models"] != []


def test_load_and_unload_over_http_and_grpc(explicit):
    with explicit.http() as http, explicit.grpc() as grpc:
        http.load_model("second")
        assert http.is_model_ready("second") and infer(grpc, "second", 3.0) == 6.0
        grpc.unload_model("second")
        assert index_of(http)["second"] == [
            {"name": "second", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        ]
        assert not http.is_model_ready("second")
        for client, status in ((http, "404"), (grpc, "StatusCode.NOT_FOUND")):
            with pytest.raises(InferenceServerException, match="has no available versions") as err:
                infer(client, "second")
            assert err.value.status() == status
        grpc.load_model("second")
        assert infer(http, "second", 1.0) == 2.0
        http.unload_model("second")
        http.unload_model("never_heard_of")  # Triton: unloading an unknown model succeeds


def test_load_errors(explicit):
    with explicit.http() as http, explicit.grpc() as grpc:
        for client in (http, grpc):
            with pytest.raises(InferenceServerException) as unknown:
                client.load_model("nope")
            assert "failed to load 'nope', failed to poll from model repository" in str(
                unknown.value
            )
            with pytest.raises(InferenceServerException) as failing:
                client.load_model("init_fails")
            message = str(failing.value)
            assert "load failed for model 'init_fails'" in message and "init exploded" in message
        (entry,) = index_of(http)["init_fails"]
        assert entry["state"] == "UNAVAILABLE" and "init exploded" in entry["reason"]
        assert entry["version"] == "1"
        with pytest.raises(InferenceServerException) as member_failed:
            http.load_model("broken_chain")
        assert "ensemble 'broken_chain' depends on 'init_fails' which has no loaded version" in str(
            member_failed.value
        )
        assert not http.is_server_ready()  # strict readiness: a load failed
        status, body = raw_post(explicit.http_url, "/v2/repository/models/nope/load", b"{}")
        assert status == 500 and "failed to poll" in body["error"]
        status, body = raw_post(explicit.http_url, "/v2/repository/models/first/load", b"{x")
        assert status == 400 and body["error"] == "failed to parse the request JSON buffer"
        payload = json.dumps({"parameters": {"config": 3}}).encode()
        status, body = raw_post(explicit.http_url, "/v2/repository/models/first/load", payload)
        assert status == 400 and "expected string_param" in body["error"]
        with pytest.raises(InferenceServerException, match="refused"):
            http.load_model("first", config="{}", files={"file:1/model.py": b"print()"})
        with pytest.raises(InferenceServerException, match="failed to poll"):
            http.load_model("first", config="{not json")
        assert infer(http, "first") == 2.0  # the failed loads left it serving


def test_a_model_is_ready_after_its_warmup_and_unavailable_when_it_fails(explicit):
    with explicit.http() as http:
        http.load_model("warm")
        calls = (explicit.root / "warm" / "calls.jsonl").read_text().splitlines()
        assert len(calls) == 3  # both samples ran (one twice) before the load answered
        tensor = httpclient.InferInput("IN", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
        assert http.infer("warm", [tensor]).as_numpy("OUT").tolist() == [[2.0, 2.0]]
        with pytest.raises(InferenceServerException, match="warmup 'zeros'"):
            http.load_model("cold")
        (entry,) = index_of(http)["cold"]
        assert entry["state"] == "UNAVAILABLE" and "zeros are not welcome" in entry["reason"]
        http.unload_model("warm")


def test_load_with_a_config_override_reloads_in_place(explicit):
    with explicit.http() as http:
        before = http.get_model_config("first")
        assert before["max_batch_size"] == 8
        override = json.dumps(
            {
                "backend": "python",
                "max_batch_size": 4,
                "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
                "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
            }
        )
        http.load_model("first", config=override)
        assert http.get_model_config("first")["max_batch_size"] == 4
        http.load_model("first")  # no override given: the last one stays, as in Triton
        assert http.get_model_config("first")["max_batch_size"] == 4
        assert infer(http, "first", 2.0) == 3.0
        http.load_model(
            "first", config=override.replace('"max_batch_size": 4', '"max_batch_size": 8')
        )
        assert http.get_model_config("first")["max_batch_size"] == 8


def test_ensembles_load_their_members_and_unload_with_them(explicit):
    with explicit.http() as http, explicit.grpc() as grpc:
        grpc.load_model("chain")  # loads 'second' too
        assert http.is_model_ready("second") and infer(http, "chain", 1.0) == 4.0
        http.unload_model("second")  # an ensemble goes with its member
        index = index_of(http)
        assert index["chain"][0]["state"] == "UNAVAILABLE"
        assert index["first"][0]["state"] == "READY"
        http.load_model("chain")
        http.unload_model("chain", unload_dependents=True)  # and its members with it
        index = index_of(http)
        assert index["chain"][0]["reason"] == "unloaded"
        assert index["first"][0]["reason"] == "unloaded"
        assert index["second"][0]["reason"] == "unloaded"
        http.load_model("first")


# ----------------------------------------------------------------------------- none and poll


def refused_everywhere(server: Server, message: str) -> None:
    with server.http() as http, server.grpc() as grpc:
        for client in (http, grpc):
            with pytest.raises(InferenceServerException, match=message):
                client.load_model("first")
            with pytest.raises(InferenceServerException, match=message):
                client.unload_model("first")
        status, body = raw_post(server.http_url, "/v2/repository/models/first/unload", b"")
        assert status == 503 and message in body["error"]
        assert infer(http, "first") == 2.0


def test_none_and_poll_modes_refuse_load_and_unload(serve_cluster, tmp_path_factory, explicit):
    serve_cluster.delete_all()
    for mode in ("none", "poll"):
        root = tmp_path_factory.mktemp(mode) / "repository"
        write_adder(root, "first")
        grpc_port = free_port()
        serve_cluster.deploy_live(root, mode, grpc_port=grpc_port, poll_secs=30)
        server = Server(serve_cluster, grpc_port)
        refused_everywhere(server, "explicit model load / unload is not allowed if polling")
        serve_cluster.delete_all()


def test_a_serve_config_owns_its_models(serve_cluster, tmp_path_factory, explicit):
    root = tmp_path_factory.mktemp("declarative") / "repository"
    write_adder(root, "first")
    grpc_port = free_port()
    apps = serve_cluster.deploy_repository(root, grpc_port=grpc_port)
    server = Server(serve_cluster, grpc_port)
    refused_everywhere(server, "deployed by a Serve config")
    with server.http() as http:
        extensions = http.get_server_metadata()["extensions"]
        assert "model_repository" in extensions
        assert "model_repository(unload_dependents)" not in extensions
    serve_cluster.delete(apps)


def wait_for(predicate, timeout_s: float = 90.0, interval_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError("condition not met in time")


def test_model_files_in_a_load_with_an_override_directory(
    serve_cluster, tmp_path_factory, explicit
):
    serve_cluster.delete_all()
    root = tmp_path_factory.mktemp("files") / "repository"
    write_adder(root, "first")
    uploads = tmp_path_factory.mktemp("uploads")
    grpc_port = free_port()
    serve_cluster.deploy_live(
        root, "explicit", grpc_port=grpc_port, model_file_override_dir=str(uploads)
    )
    server = Server(serve_cluster, grpc_port)
    model_py = (root / "first" / "1" / "model.py").read_bytes().replace(b"+ 1.0", b"+ 7.0")
    config = json.dumps(
        {
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
            "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
        }
    )
    try:
        with server.http() as http, server.grpc() as grpc:
            http.load_model("uploaded", config=config, files={"file:1/model.py": model_py})
            assert infer(grpc, "uploaded", 1.0) == 8.0
            grpc.load_model("first", config=config, files={"file:1/model.py": model_py})
            assert infer(http, "first", 1.0) == 8.0  # the sent files replaced the repository's
            with pytest.raises(InferenceServerException, match="'config' must be specified"):
                http.load_model("first", files={"file:1/model.py": model_py})
            http.load_model("first")  # no files: back to the repository's model
            assert infer(http, "first", 1.0) == 8.0 - 6.0
    finally:
        serve_cluster.delete_all()
