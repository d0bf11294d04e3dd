"""HAProxy routing Triton's ModelInfer by model name (cluster/grpc_routing.py), checked with
the real HAProxy binary: the edited config must load, and calls from the real tritonclient
must reach the backend the model names (a small gRPC server per backend records them)."""

from __future__ import annotations

import asyncio
import queue
import socket
import socketserver
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from cluster.grpc_routing import FRONTEND_BACKEND, NO_REPLICA_ANSWERED, route_model_infer
from cluster.haproxy_wrapper import haproxy_wrapper
from cluster.serve_binds import bound_address
from tests.support.ports import free_port

HOST_APP = "rayton-models"


def serve_config(
    port: int,
    backends: dict[str, int],
    http_backends: dict[str, int] | None = None,
    fallback: int | None = None,
) -> str:
    """The gRPC part of the config Ray 2.60's Serve writes (its template's shape), with one
    application backend per entry of ``backends`` (application -> server port), the HTTP
    backends of ``http_backends`` (application -> its replica's HTTP port) and, with
    ``fallback``, Serve's gRPC fallback proxy as every gRPC backend's backup."""
    rules = "".join(
        f"    acl is_grpc-{app} req.hdr(application) -m str {app}\n"
        f"    use_backend grpc-{app} if is_grpc-{app}\n"
        for app in backends
    )
    checks = "    default-server fastinter 100ms downinter 100ms fall 2 rise 2 inter 100ms check\n"
    backup = (
        f"    server SERVE_PROXY_ACTOR-fallback 127.0.0.1:{fallback} proto h2 check backup\n"
        if fallback
        else ""
    )
    sections = "".join(
        f"backend grpc-{app}\n    mode http\n    log global\n    http-reuse always\n"
        + (f"    option tcp-check\n    tcp-check connect\n{checks}" if fallback else "")
        + f"    server SERVE_REPLICA_{app} 127.0.0.1:{server} proto h2\n{backup}"
        for app, server in backends.items()
    )
    sections += "".join(
        f"backend http-{app}\n    log global\n    http-reuse always\n"
        "    option httpchk GET /-/healthz\n    http-check expect status 200\n"
        f"{checks}"
        f"    server SERVE_REPLICA_{app} 127.0.0.1:{server} check\n"
        f"    server SERVE_PROXY_ACTOR-fallback 127.0.0.1:1 check backup\n"
        for app, server in (http_backends or {}).items()
    )
    return (
        "global\n    maxconn 100\n"
        "defaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n"
        "    timeout server 30s\n"
        "frontend grpc_frontend\n"
        "    # gRPC requires HTTP/2.\n"
        f"    bind 127.0.0.1:{port} proto h2\n"
        "    mode http\n    log global\n\n"
        "    acl is_healthz path /ray.serve.RayServeAPIService/Healthz\n"
        "    http-request return status 200 content-type application/grpc hdr grpc-status 0"
        " if is_healthz\n\n"
        "    # Route per-app on the `application` metadata that Ray Serve clients attach.\n"
        f"{rules}"
        "    # Zero apps, or multiple apps without a matching `application` header.\n"
        "    default_backend default_grpc_backend\n"
        "backend default_grpc_backend\n    mode http\n"
        "    http-request return status 200 content-type application/grpc hdr grpc-status 5 hdr"
        ' grpc-message "Application metadata not set."\n'
        f"{sections}"
        "listen stats\n  stats enable\n"
    )


def haproxy_binary() -> str:
    from ray.serve._private.haproxy import get_haproxy_binary

    return get_haproxy_binary()


def test_the_edit_routes_model_infer_and_sends_the_rest_to_the_frontend():
    config = serve_config(8001, {"mlp": 40000, HOST_APP: 40001, "rayton-server": 40002})
    edited = route_model_infer(config, "127.0.0.1:9999", HOST_APP)
    lines = [line.strip() for line in edited.splitlines()]
    assert "default_backend default_grpc_backend" not in lines
    assert lines[-2:] == ["log global", "server rayton-grpc-frontend 127.0.0.1:9999 proto h2"]
    assert f"backend {FRONTEND_BACKEND}" in lines
    section = lines.index("frontend grpc_frontend"), lines.index("backend default_grpc_backend")
    frontend = lines[section[0] : section[1]]
    # every ModelInfer names its model's application; a hosted or unknown model goes to the host
    assert frontend.index("http-request del-header application") < frontend.index(
        "http-request set-header application %[req.body,bytes(5),protobuf(1)] if rayton_model_infer"
    )
    # a stream waits for its first bytes only: its body does not end while it is open
    assert "http-request wait-for-body time 1d at-least 1 if rayton_model_stream" in frontend
    assert frontend[-2:] == [
        f"use_backend grpc-{HOST_APP} if rayton_model_infer",
        f"default_backend {FRONTEND_BACKEND}",
    ]
    host = lines.index(f"backend grpc-{HOST_APP}")
    assert lines[host + 1] == f"http-request set-header application {HOST_APP}"
    checked = subprocess.run(
        [haproxy_binary(), "-c", "-f", "/dev/stdin"], input=edited, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_without_a_host_model_infer_of_other_models_goes_to_the_frontend():
    edited = route_model_infer(serve_config(8001, {"mlp": 40000}), "127.0.0.1:9999", HOST_APP)
    assert "use_backend grpc-rayton-models" not in edited
    assert f"    default_backend {FRONTEND_BACKEND}" in edited.splitlines()


def test_a_config_without_grpc_is_left_alone():
    config = "global\n    maxconn 100\nfrontend http_frontend\n    bind 127.0.0.1:8000\n"
    assert route_model_infer(config, "127.0.0.1:9999", HOST_APP) == config


def test_serve_grpc_binds_move_to_the_serving_host():
    assert bound_address("[::]:40000", "127.0.0.1") == "127.0.0.1:40000"
    assert bound_address("[::]:9500", "::1") == "[::1]:9500"
    assert bound_address("10.0.0.1:40000", "127.0.0.1") == "10.0.0.1:40000"


class RecordingServer:
    """A gRPC server in a thread that answers every call with an empty reply (a stream's
    requests with a response naming their model) and records ``(method, application header,
    model name of a ModelInfer or of each request of a stream)``."""

    def __init__(self) -> None:
        self.port = free_port()
        self.calls: list[tuple[str, str, str]] = []
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._loop.run_forever()

    async def _start(self) -> None:
        calls = self.calls

        class Recorder(grpc.GenericRpcHandler):
            def service(self, details):
                method = details.method.rsplit("/", 1)[-1]
                application = dict(details.invocation_metadata).get("application", "")

                async def answer(request: bytes, context) -> bytes:
                    model = ""
                    if method == "ModelInfer":
                        model = pb.ModelInferRequest.FromString(request).model_name
                        calls.append((method, application, model))
                        return pb.ModelInferResponse(model_name=model).SerializeToString()
                    calls.append((method, application, model))
                    return b""

                async def answer_stream(requests, context):
                    async for request in requests:
                        model = pb.ModelInferRequest.FromString(request).model_name
                        calls.append((method, application, model))
                        response = pb.ModelInferResponse(model_name=model)
                        yield pb.ModelStreamInferResponse(
                            infer_response=response
                        ).SerializeToString()

                if method == "ModelStreamInfer":
                    return grpc.stream_stream_rpc_method_handler(answer_stream)
                return grpc.unary_unary_rpc_method_handler(answer)

        self.server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1)])
        self.server.add_generic_rpc_handlers((Recorder(),))
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self.server.start()
        self._ready.set()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(0), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def routed(tmp_path):
    """HAProxy with the edited config in front of recording servers: the ``mlp``
    application, the shared host and rayton's frontend."""
    servers = {name: RecordingServer() for name in ("mlp", HOST_APP, "frontend")}
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        serve_config(port, {"mlp": servers["mlp"].port, HOST_APP: servers[HOST_APP].port})
    )
    wrapper = haproxy_wrapper("127.0.0.1", (f"127.0.0.1:{servers['frontend'].port}", HOST_APP))
    assert wrapper is not None
    process = subprocess.Popen([wrapper, "-db", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield grpcclient.InferenceServerClient(f"127.0.0.1:{port}"), servers
    finally:
        process.terminate()
        process.wait(10)
        for server in servers.values():
            server.stop()


def infer_input(rows: int, width: int = 512) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT0", [rows, width], "FP32")
    tensor.set_data_from_numpy(np.zeros((rows, width), np.float32))
    return tensor


def test_calls_reach_the_backend_their_model_names(routed):
    client, servers = routed
    assert client.infer("mlp", [infer_input(1)]).get_response().model_name == "mlp"
    # tensors far larger than HAProxy's buffer: the name is read from the first bytes
    assert client.infer("mlp", [infer_input(4096)]).get_response().model_name == "mlp"
    client.infer("hosted_model", [infer_input(1)])
    # a client's own application header does not pick the route
    client.infer("other", [infer_input(1)], headers={"application": "mlp"})
    client.is_server_live()
    assert servers["mlp"].calls == [("ModelInfer", "mlp", "mlp")] * 2
    assert servers[HOST_APP].calls == [
        ("ModelInfer", HOST_APP, "hosted_model"),
        ("ModelInfer", HOST_APP, "other"),
    ]
    assert servers["frontend"].calls == [("ServerLive", "", "")]


def stream_models(client, requests: list[tuple], pause_s: float = 0.0) -> list[str]:
    """Send ``(model, rows[, width])`` requests on one stream, each after the previous one's
    response (as a client waiting for its answer does); the models the responses name."""
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        time.sleep(pause_s)  # a stream opened before its first request
        named = []
        for model, *shape in requests:
            client.async_stream_infer(model, [infer_input(*shape)])
            result, error = responses.get(timeout=10)
            assert error is None, error
            named.append(result.get_response().model_name)
        return named
    finally:
        client.stop_stream()


def test_a_stream_goes_where_its_first_request_names_even_a_small_one(routed):
    client, servers = routed
    # a ~40-byte request, answered at once (not held until a wait for more bytes ran out)
    assert stream_models(client, [("mlp", 1, 1)]) == ["mlp"]
    # every request of a stream goes where its first one went; the replica answers them all
    assert stream_models(client, [("mlp", 1), ("hosted_model", 1)], pause_s=0.5) == [
        "mlp",
        "hosted_model",
    ]
    assert stream_models(client, [("hosted_model", 4096)]) == ["hosted_model"]
    assert servers["mlp"].calls == [("ModelStreamInfer", "mlp", "mlp")] * 2 + [
        ("ModelStreamInfer", "mlp", "hosted_model")
    ]
    assert servers[HOST_APP].calls == [("ModelStreamInfer", HOST_APP, "hosted_model")]
    assert servers["frontend"].calls == []


class RecordingHttpServer:
    """rayton's HTTP server in a thread answering unary ModelInfer over HTTP/1.1 as a
    replica does (gRPC framing, trailers), and its health check; records
    ``(path, application header, model name)``."""

    def __init__(self) -> None:
        from deployments.grpc.over_http import answer_unary
        from deployments.http.messages import HttpReply
        from deployments.http.server import HttpServer

        self.port = free_port()
        self.calls: list[tuple[str, str, str]] = []

        async def handle(request):
            if request.path == "/-/healthz":
                return HttpReply(200, b"success")

            async def answer(message: bytes) -> bytes:
                model = pb.ModelInferRequest.FromString(message).model_name
                self.calls.append((request.path, request.headers.get("application", ""), model))
                return pb.ModelInferResponse(model_name=model).SerializeToString()

            return await answer_unary(request, answer)

        self._server = HttpServer(handle)
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        self._thread = threading.Thread(
            target=self._loop.run_until_complete,
            args=(self._server.serve(self._sock),),
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(setattr, self._server, "should_exit", True)
        self._thread.join(10)
        self._sock.close()


@pytest.fixture
def routed_h1(tmp_path):
    """HAProxy with the edited config in front of the ``mlp`` application and the shared host,
    each with a gRPC server and an HTTP server, Serve's fallback proxy and rayton's frontend;
    ``mlp``'s HTTP server is stopped by the test that wants no replica up."""
    grpc_servers = {name: RecordingServer() for name in ("mlp", HOST_APP, "fallback", "frontend")}
    http_servers = {name: RecordingHttpServer() for name in ("mlp", HOST_APP)}
    port = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        serve_config(
            port,
            {name: grpc_servers[name].port for name in ("mlp", HOST_APP)},
            {name: server.port for name, server in http_servers.items()},
            fallback=grpc_servers["fallback"].port,
        )
    )
    wrapper = haproxy_wrapper("127.0.0.1", (f"127.0.0.1:{grpc_servers['frontend'].port}", HOST_APP))
    process = subprocess.Popen([wrapper, "-db", "-f", str(config)], stderr=subprocess.PIPE)
    time.sleep(1)  # listening, and the first health checks done
    try:
        yield grpcclient.InferenceServerClient(f"127.0.0.1:{port}"), grpc_servers, http_servers
    finally:
        process.terminate()
        process.wait(10)
        for server in [*grpc_servers.values(), *http_servers.values()]:
            server.stop()


def test_unary_model_infer_goes_over_http_1_1_to_the_replicas_and_streams_stay_on_grpc(routed_h1):
    client, grpc_servers, http_servers = routed_h1
    assert client.infer("mlp", [infer_input(1)]).get_response().model_name == "mlp"
    assert client.infer("mlp", [infer_input(4096)]).get_response().model_name == "mlp"
    assert client.infer("hosted_model", [infer_input(1)]).get_response().model_name == (
        "hosted_model"
    )
    assert stream_models(client, [("mlp", 1)]) == ["mlp"]
    path = "/inference.GRPCInferenceService/ModelInfer"
    assert http_servers["mlp"].calls == [(path, "mlp", "mlp")] * 2
    assert http_servers[HOST_APP].calls == [(path, HOST_APP, "hosted_model")]
    assert grpc_servers["mlp"].calls == [("ModelStreamInfer", "mlp", "mlp")]
    assert grpc_servers[HOST_APP].calls == grpc_servers["fallback"].calls == []


def test_while_no_replica_serves_http_a_unary_call_goes_to_serve_s_grpc_fallback(routed_h1):
    client, grpc_servers, http_servers = routed_h1
    http_servers["mlp"].stop()
    time.sleep(1)  # two failed health checks
    assert client.infer("mlp", [infer_input(1)]).get_response().model_name == "mlp"
    assert grpc_servers["fallback"].calls == [("ModelInfer", "mlp", "mlp")]


class HangingUpHttpServer:
    """A replica's HTTP port that passes its health check and hangs up on every call without
    an answer, as a replica dying with the call does."""

    def __init__(self, port: int) -> None:
        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while request_line := self.rfile.readline():
                    length = 0
                    while (header := self.rfile.readline()) not in (b"\r\n", b""):
                        name, _, value = header.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    self.rfile.read(length)
                    if request_line.split()[1] != b"/-/healthz":
                        return  # hang up
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nsuccess")

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_replica_hanging_up_on_a_unary_call_answers_unavailable_with_the_reason(routed_h1):
    client, _, http_servers = routed_h1
    http_servers["mlp"].stop()
    hanging_up = HangingUpHttpServer(http_servers["mlp"].port)
    try:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("mlp", [infer_input(1)])
    finally:
        hanging_up.stop()
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    assert caught.value.message() == NO_REPLICA_ANSWERED
