"""``rayton serve``: refuses what it cannot serve before starting Ray, serves, and stops
cleanly."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from cluster.local import SERVE_FIXED_PORT_SETTINGS
from deployments.apps.server_args import ServerAppArgs
from deployments.cli import main
from deployments.cli.serve import ServeSettings
from tests.e2e.test_serve_run import wait_until
from tests.support.crashing_models import CONFIG as CRASHES_CONFIG
from tests.support.crashing_models import KILLS_ITS_REPLICA as CRASHES
from tests.support.ports import free_port
from tests.support.processes import (
    ServerProcess,
    rayton_serve_command,
    rayton_serve_env,
    server_ready,
    session_pids,
    start_session,
)
from tests.support.sockets import listening_sockets

TEST_MODELS = Path(__file__).parents[1] / "model_repository"
PYTHON_MODELS = Path(__file__).parents[2] / "repo_adapter" / "backends" / "python_models"


def model_ready(url: str, model: str) -> bool:
    try:
        with httpclient.InferenceServerClient(url) as client:
            return client.is_model_ready(model)
    except Exception:
        return False


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (["--address", "127.0.0.1:6379"], "a joined cluster's HAProxy is not rayton's (--address)"),
        (
            ["--grpc-host", "127.0.0.2"],
            "Serve's HAProxy binds gRPC on the HTTP host (--grpc-host differs)",
        ),
        (["--grpc-port", "0"], "the gRPC endpoint is off (--grpc-port 0)"),
    ],
)
def test_serve_refuses_grpc_through_haproxy_where_it_cannot_be(tmp_path, capsys, options, reason):
    """``--grpc-ingress haproxy`` is refused, saying why, before any Ray process starts;
    ``auto`` falls back to the frontend there instead."""
    command = ["serve", "--model-repository", str(tmp_path), "--grpc-ingress", "haproxy"]
    assert main([*command, *options]) == 2
    assert capsys.readouterr().err == f"error: --grpc-ingress haproxy: {reason}\n"


def test_rayton_serve_refuses_tracing_without_a_file_before_starting_ray(tmp_path, capsys):
    code = main(
        ["serve", "--model-repository", str(tmp_path), "--trace-config", "level=TIMESTAMPS"]
    )
    assert code == 2
    assert "tracing needs a trace file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--load-model", "a"],
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well.",
        ),
        (
            ["--model-control-mode", "explicit", "--load-model", "*", "--load-model", "a"],
            "Wildcard model name '*' must be the ONLY startup model if specified at all.",
        ),
        (["--log-verbose", "-1"], "--log-verbose: Input should be greater than or equal to 0"),
        (["--trace-config", "bogus=1"], "--trace-config: unknown setting 'bogus=1'"),
    ],
)
def test_serve_refuses_bad_settings_before_starting_ray(tmp_path, capsys, options, message):
    assert main(["serve", "--model-repository", str(tmp_path), *options]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize(
    ("fields", "routed"),
    [
        ({}, True),
        ({"grpc_ingress": "frontend"}, False),
        ({"address": "127.0.0.1:6379"}, False),  # auto falls back to the frontend
        ({"endpoints": {"grpc_host": "127.0.0.2"}}, False),
        ({"endpoints": {"grpc_port": 0}}, False),
    ],
)
def test_grpc_goes_through_haproxy_where_it_can(fields, routed):
    settings = ServeSettings(server={"model_repository": "r"}, **fields)
    assert settings.grpc_routed is routed


def test_serve_settings_are_the_server_args_of_a_serve_that_deploys_the_models():
    settings = ServeSettings(
        server={"model_repository": "r", "model_control_mode": "poll"},
        trace_config=["triton,file=/tmp/trace.json", "level=TIMESTAMPS"],
    )
    assert settings.server == ServerAppArgs(
        model_repository="r",
        model_control_mode="poll",
        deploy_models=True,
        trace_file="/tmp/trace.json",
        trace_level=["TIMESTAMPS"],
    )


@pytest.mark.cluster
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM])
def test_serve_prints_endpoints_and_stops_without_orphans(
    example_repository, tmp_path, stop_signal
):
    """Fast ingress as users run it: replicas talk over gRPC, so a 6 MiB tensor crosses hops.

    Ray's temp dir holds a stale ``ray_current_cluster`` (as a dead ``ray start`` leaves it):
    without ``--address`` rayton starts its own cluster anyway.
    """
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: Ray's socket paths
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
    repository = tmp_path / "repository"
    repository.mkdir()
    for model in example_repository.iterdir():
        if model.is_dir():
            (repository / model.name).symlink_to(model)
    (repository / "bytes_identity").symlink_to(TEST_MODELS / "bytes_identity")
    (repository / "init_raises").symlink_to(PYTHON_MODELS / "init_raises")
    (repository / "decoupled").symlink_to(PYTHON_MODELS / "decoupled")
    (repository / "crashes" / "1").mkdir(parents=True)
    (repository / "crashes" / "config.pbtxt").write_text(CRASHES_CONFIG)
    (repository / "crashes" / "1" / "model.py").write_text(CRASHES)
    port, grpc_port = free_port(), free_port()
    server = start_session(
        rayton_serve_command(
            repository,
            port,
            grpc_port,
            "--model-control-mode",
            "explicit",
            "--load-model",
            "add_sub",
            "--load-model",
            "bytes_identity",
            "--load-model",
            "init_raises",
            "--load-model",
            "crashes",
            "--load-model",
            "decoupled",
        ),
        env=rayton_serve_env(ray_tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = f"127.0.0.1:{port}"
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: any(line.startswith("Ctrl-C") for line in lines), 240), (
            "rayton serve never printed its start-up table"
        )
        assert model_ready(url, "add_sub") and model_ready(url, "bytes_identity")
        assert not server_ready(url)  # strict readiness: init_raises failed to load
        with httpclient.InferenceServerClient(url) as client:
            assert not client.is_model_ready("init_raises")
            assert not client.is_model_ready("image_classifier_onnx")  # not loaded
        (metrics_url,) = [
            line.split()[-1] for line in lines if line.strip().startswith("Metrics (Prometheus)")
        ]
        with urllib.request.urlopen(metrics_url, timeout=30) as response:
            page = response.read().decode()
        assert 'nv_inference_request_success{model="add_sub",version="1"}' in page
        check_rayton_status(url, lines)
        with grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            assert client.is_model_ready("add_sub")
            big = np.array([[b"x" * (6 * 1024 * 1024)]], dtype=np.object_)  # > 4 MiB
            inputs = [grpcclient.InferInput("IN", [1, 1], "BYTES")]
            inputs[0].set_data_from_numpy(big)
            assert client.infer("bytes_identity", inputs).as_numpy("OUT")[0, 0] == big[0, 0]
            check_a_stream_through_haproxy(client)
        check_model_infer_skipped_the_frontend(server, lines)
        check_generate_stream_through_haproxy(url)
        check_replicas_answer_http_with_rayton_s_server(url)
        check_serve_request_metrics_come_from_the_replicas(server, ray_tmp, url)
        check_listeners_are_loopback(server, lines, (port, grpc_port))
        # Last: crashes. A python model that ends its stub process fails its request with
        # rayton's answer and serves again; one that takes the shared host down (as native
        # code crashing the replica would) gets HAProxy's answer, Triton's JSON too.
        assert crash_answer(crash_request(url, -1.0)) == (500, "Python model 'crashes' instance ")
        assert wait_until(lambda: model_serves(url, "crashes"), 60), "its stub never came back"
        assert crash_answer(crash_request(url, -2.0)) == (500, "no replica of the model answered")
        server.send_signal(stop_signal)
        server.wait(120)
        reader.join(10)
        output = "".join(lines)
        assert f"http://127.0.0.1:{port}" in output
        assert f"gRPC (Triton):              127.0.0.1:{grpc_port}" in output
        assert "Ray dashboard" in output
        rows = [line.split(None, 1) for line in output.splitlines() if line.startswith("  ")]
        table = {row[0]: row[1] for row in rows if len(row) == 2}
        assert table["add_sub"] == "READY"
        assert table["image_classifier_onnx"] == "not loaded"  # explicit mode
        assert table["init_raises"].startswith("UNAVAILABLE: version 1: "), table
        assert wait_until(lambda: not session_pids(server.pid), 60), (
            f"processes left running: {session_pids(server.pid)}"
        )
    finally:
        for pid in session_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.cluster
def test_serve_keeps_rays_token_auth_on_and_says_how_to_open_the_dashboard(
    example_repository, tmp_path
):
    """Ray 2.60's default (token auth) stays on under rayton serve: the models answer, the
    dashboard wants the token, and the start-up table says where to get it. Ctrl-C then
    stops it within seconds and prints no error."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "add_sub").symlink_to(example_repository / "add_sub")
    home = tmp_path / "home"  # Ray generates the token in ~/.ray/auth_token
    home.mkdir()
    env = rayton_serve_env(ray_tmp)
    env.pop("RAY_AUTH_MODE")
    env["HOME"] = str(home)
    port, grpc_port = free_port(), free_port()
    command = rayton_serve_command(repository, port, grpc_port)
    dashboard_port = command[command.index("--dashboard-port") + 1]
    server = start_session(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True)
    reader.start()
    url = f"127.0.0.1:{port}"
    try:
        assert wait_until(lambda: any(line.startswith("Ctrl-C") for line in lines), 240), lines
        assert any("Ray token auth is on" in line for line in lines), lines
        assert model_ready(url, "add_sub")
        token = (home / ".ray" / "auth_token").read_text().strip()
        dashboard = f"http://127.0.0.1:{dashboard_port}/api/version"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(dashboard, timeout=30)
        assert refused.value.code in (401, 403)
        authorized = urllib.request.Request(dashboard, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(authorized, timeout=30) as response:
            assert response.status == 200
        stopping = time.monotonic()
        server.send_signal(signal.SIGINT)
        server.wait(120)
        assert time.monotonic() - stopping < 30
        reader.join(10)
        shutdown = "".join(lines).split("shutting down...", 1)[1]
        assert "rror" not in shutdown and "failed" not in shutdown, shutdown  # a clean stop
        assert wait_until(lambda: not session_pids(server.pid), 60)
    finally:
        for pid in session_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def crash_request(url: str, value: float) -> urllib.request.Request:
    inputs = [{"name": "IN", "shape": [1, 2], "datatype": "FP32", "data": [value, 1]}]
    return urllib.request.Request(
        f"http://{url}/v2/models/crashes/infer", data=json.dumps({"inputs": inputs}).encode()
    )


def model_serves(url: str, model: str) -> bool:
    try:
        with httpclient.InferenceServerClient(url) as client:
            tensor = httpclient.InferInput("IN", [1, 2], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
            return client.infer(model, [tensor]).as_numpy("OUT").tolist() == [[1.0, 1.0]]
    except Exception:
        return False


def crash_answer(request: urllib.request.Request) -> tuple[int, str]:
    """(status, start of the error) of a request whose replica dies. HAProxy reloads when
    Serve's replicas change; a request that meets a reload gets its connection closed
    instead, so it is sent again (three tries)."""
    for _ in range(3):
        try:
            urllib.request.urlopen(request, timeout=60)
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())["error"][:32]
        except ConnectionError:
            time.sleep(1.0)
    raise AssertionError("every try of the crashing request lost its connection")


# Serve's fixed ports (HAProxy's stats page and exporter, the fallback proxy's HTTP and gRPC)
SERVE_DEFAULT_PORTS = {8404, 9101, 8500, 9500}


def check_a_stream_through_haproxy(client: grpcclient.InferenceServerClient) -> None:
    """A stream HAProxy routed by its first request: the host's replica answers each request
    in order, one naming an unknown model with Triton's error, without ending the stream."""
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    inputs = [grpcclient.InferInput("IN", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
    try:
        for model in ("bytes_identity", "no_such_model", "bytes_identity"):
            client.async_stream_infer(model, inputs)
        (first, no_error), (none, unknown), (last, _) = [responses.get(timeout=60) for _ in "123"]
    finally:
        client.stop_stream()
    assert no_error is None and first.as_numpy("OUT")[0, 0] == b"hello"
    assert none is None and "unknown model: 'no_such_model'" in str(unknown), unknown
    assert last.as_numpy("OUT")[0, 0] == b"hello"
    # A decoupled model's stream, routed by HAProxy to the replica holding it: its responses
    # as the model sent them, after execute returned.
    count = grpcclient.InferInput("INPUT0", [1], "FP32")
    count.set_data_from_numpy(np.array([3], dtype=np.float32))
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        client.async_stream_infer("decoupled", [count], enable_empty_final_response=True)
        streamed = [responses.get(timeout=60) for _ in range(4)]
    finally:
        client.stop_stream()
    assert [error for _, error in streamed] == [None] * 4
    values = [result.as_numpy("OUTPUT0") for result, _ in streamed]
    assert [v.tolist() for v in values[:3]] == [[0.0], [1.0], [2.0]] and values[3] is None
    final = [r.get_response().parameters["triton_final_response"].bool_param for r, _ in streamed]
    assert final == [False, False, False, True]


def check_generate_stream_through_haproxy(url: str) -> None:
    """The generate extension's server-sent events, from rayton's HTTP server in the replica
    through HAProxy, each as the decoupled model sent it."""
    request = urllib.request.Request(
        f"http://{url}/v2/models/decoupled/generate_stream",
        data=json.dumps({"INPUT0": 3}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        events = response.read().decode().split("\n\n")
    assert [json.loads(e.removeprefix("data: "))["OUTPUT0"] for e in events[:-1]] == [0, 1, 2]


def check_replicas_answer_http_with_rayton_s_server(url: str) -> None:
    """Behind HAProxy, the model's and the server's replicas answer on rayton's own HTTP server
    (Serve's uvicorn names itself in a ``server`` header and dates every answer); Serve's own
    routes on a replica's port still answer, from Serve."""
    for path in ("/v2/models/add_sub", "/v2", "/v2/models/add_sub/ready"):
        with urllib.request.urlopen(f"http://{url}{path}", timeout=30) as response:
            assert response.status == 200, path
            assert response.headers.get("server") is None, (path, response.headers.items())
            assert response.headers.get("date") is None, (path, response.headers.items())
    with urllib.request.urlopen(f"http://{url}/-/healthz", timeout=30) as response:
        assert response.status == 200


def check_serve_request_metrics_come_from_the_replicas(server, ray_tmp: Path, url: str) -> None:
    """Serve's per-application HTTP request metrics count the requests replicas answered, with
    the HAProxy manager's per-request log off (rayton's default): rayton's server records
    them in the replica."""
    for _, argv in haproxy_processes(session_pids(server.pid)):
        config = Path(argv[argv.index("-f") + 1]).read_text()
        assert "log-format-sd" not in config  # no log line per request for the manager
    (port_file,) = (ray_tmp / "ray" / "session_latest").glob("metrics_export_port_*")
    ray_port = int(port_file.read_text())
    requests = "ray_serve_num_http_requests_total"
    before = ray_metric_sum(ray_port, requests)
    with httpclient.InferenceServerClient(url) as client:
        inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(np.ones(4, np.float32))
        for _ in range(5):
            client.infer("add_sub", inputs)
    assert wait_until(lambda: ray_metric_sum(ray_port, requests) >= before + 5, 60), (
        before,
        ray_metric_sum(ray_port, requests),
    )
    assert ray_metric_sum(ray_port, "ray_serve_http_request_latency_ms_count") >= 5


def ray_metric_sum(port: int, name: str) -> float:
    """The sum of every series of ``name`` on a Ray node's metrics export."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        page = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith((name + "{", name + " "))
    )


def check_model_infer_skipped_the_frontend(server, lines: list[str]) -> None:
    """HAProxy sent the gRPC ModelInfer straight to the shared host's replica over HTTP/1.1
    and the stream over gRPC (its exporter counts the calls per backend), not through
    rayton's gRPC frontend."""
    (endpoint,) = [line for line in lines if line.strip().startswith("gRPC (Triton)")]
    assert endpoint.endswith("(HAProxy -> model replicas)\n"), endpoint
    exporter = serve_port_settings(session_pids(server.pid))["RAY_SERVE_HAPROXY_METRICS_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter}/metrics", timeout=30) as f:
        page = f.read().decode()

    def counted(backend: str) -> float:
        prefix = f'haproxy_backend_http_requests_total{{proxy="{backend}"'
        values = [
            float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(prefix)
        ]
        return values[0] if values else 0.0

    assert counted("rayton-grpc-h1-rayton-models") >= 1  # the unary ModelInfer
    assert counted("grpc-rayton-models") >= 1  # the stream
    assert counted("rayton_grpc_frontend") >= 1  # is_model_ready, through the frontend


def haproxy_processes(pids: list[int]) -> list[tuple[int, list[str]]]:
    """The pid and command line of each HAProxy among ``pids``."""
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode().split("\0")
        except OSError:
            continue
        if argv[0].endswith("haproxy") and "-f" in argv:
            found.append((pid, argv))
    return found


def serve_port_settings(pids: list[int]) -> dict[str, int]:
    """The ports rayton chose for Serve's fixed ones, from the environment of the session's
    HAProxy (Serve's processes inherit what ``rayton serve`` set before starting Ray)."""
    ((pid, _), *_) = haproxy_processes(pids)
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = dict(
            entry.split("=", 1) for entry in f.read().decode().split("\0") if "=" in entry
        )
    return {setting: int(environ[setting]) for setting in SERVE_FIXED_PORT_SETTINGS}


def serve_grpc_ports(pids: list[int]) -> set[int]:
    """The ports of Serve's gRPC servers HAProxy sends calls to (the replicas' direct ingress
    and the fallback proxy), read from the config of the session's HAProxy. Ray binds them on
    every interface; rayton on the serving host."""
    ports: set[int] = set()
    for _, argv in haproxy_processes(pids):
        with open(argv[argv.index("-f") + 1]) as config:
            for line in config:
                words = line.split()
                if words[:1] == ["server"] and "h2" in words and ":" in words[2]:
                    ports.add(int(words[2].rsplit(":", 1)[1]))
    return ports


def check_listeners_are_loopback(server, lines: list[str], ports: tuple[int, ...]) -> None:
    """Every listener rayton controls (HTTP, gRPC, metrics, dashboard, HAProxy's stats and
    exporter, Serve's gRPC servers) is on 127.0.0.1; Ray's own (GCS, raylet, workers), which
    Ray binds on every interface, are the ones the README names."""
    command = server.args
    dashboard = int(command[command.index("--dashboard-port") + 1])
    metrics = int(command[command.index("--metrics-port") + 1])
    pids = session_pids(server.pid)
    grpc_backends = serve_grpc_ports(pids)
    assert grpc_backends, "Serve's gRPC ingress is on: HAProxy has gRPC backends"
    serve_ports = serve_port_settings(pids)
    assert not set(serve_ports.values()) & SERVE_DEFAULT_PORTS, serve_ports  # free-picked
    haproxy_own = {
        serve_ports["RAY_SERVE_HAPROXY_STATS_PORT"],
        serve_ports["RAY_SERVE_HAPROXY_METRICS_PORT"],
    }
    controlled = {*ports, dashboard, metrics, *serve_ports.values(), *grpc_backends}
    listeners = listening_sockets(pids)
    exposed = [s.describe() for s in listeners if s.port in controlled and not s.loopback]
    assert not exposed, "rayton's listeners off loopback:\n" + "\n".join(exposed)
    on_loopback = {s.port for s in listeners if s.loopback}
    assert {*ports, dashboard, metrics} <= on_loopback, (on_loopback, lines[-12:])
    assert haproxy_own <= on_loopback  # fast ingress runs HAProxy


SLOW_MODEL = """\
import time
import urllib.request

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.5)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""

SLOW_CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


@pytest.mark.cluster
def test_ctrl_c_lets_requests_in_flight_finish_over_http_and_grpc(tmp_path):
    repository = tmp_path / "repository"
    (repository / "slow" / "1").mkdir(parents=True)
    (repository / "slow" / "config.pbtxt").write_text(SLOW_CONFIG)
    (repository / "slow" / "1" / "model.py").write_text(SLOW_MODEL)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # AF_UNIX paths: <108 bytes
    port, grpc_port = free_port(), free_port()
    server = start_session(
        rayton_serve_command(repository, port, grpc_port),
        env=rayton_serve_env(ray_tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    url = f"127.0.0.1:{port}"
    results: list[str] = []

    def call(module, address: str) -> None:
        try:
            with module.InferenceServerClient(address) as client:
                tensor = module.InferInput("IN", [1], "FP32")
                tensor.set_data_from_numpy(np.ones(1, np.float32))
                client.infer("slow", [tensor])
            results.append("ok")
        except Exception as err:  # recorded: the test fails on any
            results.append(f"{module.__name__}: {err}")

    try:
        # Server ready: the start-up loads settled, so both frontends route to the model.
        assert wait_until(lambda: server_ready(url), 240), "rayton serve never came up"
        calls = [
            threading.Thread(target=call, args=(module, address))
            for module, address in ((httpclient, url), (grpcclient, f"127.0.0.1:{grpc_port}"))
            for _ in range(4)
        ]
        for thread in calls:
            thread.start()
        time.sleep(0.5)  # all eight in flight: two run (0.5 s each), the rest wait in the queue
        server.send_signal(signal.SIGINT)
        for thread in calls:
            thread.join(60)
        assert results == ["ok"] * 8, results
        server.wait(120)
        assert wait_until(lambda: not session_pids(server.pid), 60)
    finally:
        for pid in session_pids(server.pid):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.cluster
@pytest.mark.timeout(600)  # two clusters started in turn, each bounded below
def test_two_servers_serve_side_by_side_on_one_machine(example_repository, tmp_path):
    """Each with its own ports (flags, or picked by the OS for Serve's fixed ones) and its own
    HAProxy files: both serve HTTP and gRPC, and each stops without touching the other."""
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "add_sub").symlink_to(example_repository / "add_sub")
    servers: list[tuple[ServerProcess, str, str]] = []
    ray_tmps: list[Path] = []
    try:
        for index in range(2):
            # In turn: the second's ports are picked once the first cluster holds its own.
            ray_tmps.append(Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp")))  # AF_UNIX paths
            port, grpc_port = free_port(), free_port()
            server = ServerProcess(
                rayton_serve_command(repository, port, grpc_port),
                tmp_path / f"server{index}.log",
                rayton_serve_env(ray_tmps[-1]),
            )
            servers.append((server, f"127.0.0.1:{port}", f"127.0.0.1:{grpc_port}"))
            server.wait_http(f"http://127.0.0.1:{port}/v2/health/ready", 240)
        settings = [
            serve_port_settings(session_pids(server.process.pid)) for server, _, _ in servers
        ]
        assert not set(settings[0].values()) & set(settings[1].values()), settings
        for _, url, grpc_url in servers:
            for module, address in ((httpclient, url), (grpcclient, grpc_url)):
                with module.InferenceServerClient(address) as client:
                    inputs = [module.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
                    for tensor in inputs:
                        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
                    result = client.infer("add_sub", inputs).as_numpy("OUTPUT0")
                    np.testing.assert_array_equal(result, np.arange(4) * 2.0)
        first = servers[0][0].process
        first.send_signal(signal.SIGINT)
        first.wait(120)
        assert wait_until(lambda: not session_pids(first.pid), 60)
        _, url, grpc_url = servers[1]
        assert server_ready(url)  # the second kept its HAProxy and replicas
        with grpcclient.InferenceServerClient(grpc_url) as client:
            assert client.is_model_ready("add_sub")
    finally:
        for server, _, _ in servers:
            server.stop()
        for ray_tmp in ray_tmps:
            shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.cluster
@pytest.mark.parametrize("flag", ["--metrics-port", "--grpc-port", "--http-port"])
def test_serve_names_a_taken_port_and_its_flag_before_starting(example_repository, tmp_path, flag):
    """One line, at once, before any Ray process starts (the in-cluster error is the fallback
    for a port taken between the check and the bind)."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: Ray's socket paths
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "add_sub").symlink_to(example_repository / "add_sub")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        command = rayton_serve_command(repository, free_port(), free_port())
        command[command.index(flag) + 1] = str(port)
        started = time.monotonic()
        server = start_session(
            command,
            env=rayton_serve_env(ray_tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, stderr = server.communicate(timeout=60)
        finally:
            for pid in session_pids(server.pid):
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(ray_tmp, ignore_errors=True)
    assert server.returncode == 1, stderr[-2000:]
    assert stderr.strip() == (
        f"error: 127.0.0.1:{port} is not free (Address already in use): choose another {flag}"
    )
    assert time.monotonic() - started < 30  # no cluster was started


def check_rayton_status(url: str, startup_lines: list[str]) -> None:
    """``rayton status`` of the running server: text over HTTP, JSON through Ray."""
    rayton = [str(Path(sys.executable).parent / "rayton"), "status"]
    text = subprocess.run(
        [*rayton, "--url", url], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    rows = {line.split()[0]: line.split() for line in text.splitlines()[3:] if line[:1] != " "}
    assert rows["add_sub"][1:4] == ["1", "READY", "1"], text  # one replica: the shared host
    assert rows["init_raises"][2] == "UNAVAILABLE", text
    assert rows["image_classifier_onnx"][1:3] == ["-", "not"], text  # explicit: not loaded
    assert "    replica " in text, text
    (address,) = [line.split()[-1] for line in startup_lines if "Ray cluster (--address)" in line]
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    document = json.loads(
        subprocess.run(
            [*rayton, "--address", address, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env=env,
        ).stdout
    )
    add_sub = document["models"]["add_sub"]
    assert add_sub["versions"] == [{"version": "1", "state": "READY", "reason": ""}]
    (replica,) = add_sub["replicas"]
    assert replica["gpu_ids"] == [] and replica["pid"] > 0
    # The node as Ray registered it, in both forms.
    assert f"replica {replica['replica']}  node {replica['node_ip']} " in text
    assert document["models"]["init_raises"]["versions"][0]["state"] == "UNAVAILABLE"
    assert document["model_control_mode"] == "explicit"
