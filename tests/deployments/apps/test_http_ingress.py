"""rayton's server in a replica: Serve's own paths go to Serve's entry, every other request to
the deployment's handle_http with Serve's per-request records kept around it; Serve's proxy
path reaches the same handle_http through __call__."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from deployments.apps.http_ingress import HttpIngress, ReplicaHttpHandler
from deployments.http.messages import HttpReply, HttpRequest


class Accounting:
    def __init__(self):
        self.events = []

    async def start(self):
        self.events.append("start")

    def finish(self, method, status, latency_ms):
        assert latency_ms >= 0
        self.events.append(("finish", method, status))


class Echo(HttpIngress):
    async def handle_http(self, request: HttpRequest) -> HttpReply:
        if request.path == "/bug":
            raise RuntimeError("bug")
        return HttpReply(201, request.body, {"x-path": request.path})


async def serve_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"success"})


async def test_serve_s_paths_go_to_serve_and_are_not_counted_as_requests():
    accounting = Accounting()
    handler = ReplicaHttpHandler(Echo(), serve_app, accounting)
    reply = await handler.handle(HttpRequest("GET", "/-/healthz"))
    assert (reply.status, reply.body) == (200, b"success")
    assert accounting.events == []


async def test_a_request_is_counted_around_the_deployment_s_answer_failed_or_not():
    accounting = Accounting()
    handler = ReplicaHttpHandler(Echo(), serve_app, accounting)
    reply = await handler.handle(HttpRequest("POST", "/v2/models/m/infer", body=b"x"))
    assert (reply.status, reply.body) == (201, b"x")
    with pytest.raises(RuntimeError):
        await handler.handle(HttpRequest("GET", "/bug"))
    assert accounting.events == ["start", ("finish", "POST", 201), "start", ("finish", "GET", 500)]


async def test_serve_s_proxy_path_reaches_handle_http_within_the_body_limit():
    ingress = Echo()
    ingress.max_body_size = 4

    def starlette_request(body: bytes) -> Request:
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(b"content-length", str(len(body)).encode())]
        scope = {"type": "http", "method": "POST", "path": "/p", "headers": headers}
        return Request(scope, receive)

    response = await ingress(starlette_request(b"abcd"))
    assert (response.status_code, response.body, response.headers["x-path"]) == (201, b"abcd", "/p")
    refused = await ingress(starlette_request(b"abcde"))
    assert refused.status_code == 400 and b"exceeds the maximum input size" in refused.body


async def test_a_unary_grpc_model_infer_goes_to_infer_grpc_message_framed_and_counted():
    from deployments.grpc.over_http import GRPC_INFER_PATH, frame

    class Model(Echo):
        async def infer_grpc_message(self, message: bytes) -> bytes:
            return message.upper()

    accounting = Accounting()
    headers = {"content-type": "application/grpc"}
    call = HttpRequest("POST", GRPC_INFER_PATH, headers, frame(b"abc"))
    reply = await ReplicaHttpHandler(Model(), serve_app, accounting).handle(call)
    assert (reply.body, reply.trailers) == (frame(b"ABC"), {"grpc-status": "0"})
    assert accounting.events == ["start", ("finish", "POST", 200)]
    # a deployment that serves no model answers the call with gRPC's UNIMPLEMENTED
    refused = await ReplicaHttpHandler(Echo(), serve_app, Accounting()).handle(call)
    assert refused.headers["grpc-status"] == "12"
