"""How a rayton deployment answers HTTP: :meth:`HttpIngress.handle_http`, reached by
rayton's own server on the replica's port, or by Serve's HTTP path.

* **rayton's server** (:mod:`deployments.http.server`) takes the port Serve's direct ingress
  gives an ingress replica, in place of Serve's uvicorn and per-request ASGI path. What Serve
  did there keeps happening: the replica's ``max_ongoing_requests`` slots, its ongoing-request
  count (autoscaling and draining read it), its request metrics (the Ray dashboard's rates and
  latencies), Serve's health check and routes (``/-/...``, answered by Serve's own entry),
  and the graceful stop (Serve sets ``should_exit``).
* **Serve's path** (its proxy, or a replica where rayton's server is not in place) comes in
  through ``__call__``, which turns Serve's Starlette request into the same
  :class:`HttpRequest`.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from cluster.serve_internals import (
    DirectIngressSeat,
    ReplicaRequestAccounting,
    take_direct_ingress_http,
)
from deployments.grpc.over_http import GRPC_INFER_PATH, answer_unary, is_grpc_infer
from deployments.http.asgi_call import AsgiApp, asgi_call
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.responses import error_response
from deployments.http.server import HttpServer
from deployments.http.starlette_bridge import read_request, starlette_response
from repo_adapter.errors import InferenceServerError, StatusCode

SERVE_PATHS = "/-/"  # Serve's own routes on a replica's port: health check, routes


class HttpIngress:
    """Base of the deployments that serve HTTP; subclasses answer :meth:`handle_http`."""

    def __init__(self, max_body_size: int | None = None) -> None:
        # The largest body read (Triton's --http-max-input-size); None: no limit.
        self.max_body_size = max_body_size
        # Where other replicas reach this replica's own port ("" until Serve opens it; only
        # an ingress behind HAProxy has one)
        self.direct_address = ""
        # Before the replica starts serving: Serve starts its port after the constructor.
        take_direct_ingress_http(_server_for)

    async def handle_http(self, request: HttpRequest) -> HttpReply:
        raise NotImplementedError

    async def infer_grpc_message(self, message: bytes) -> bytes:
        """A serialized ``ModelInferRequest`` HAProxy sent over HTTP/1.1
        (grpc/over_http.py) -> the serialized ``ModelInferResponse``; deployments that serve
        models answer it."""
        raise InferenceServerError("ModelInfer is not served here", StatusCode.UNSUPPORTED)

    async def __call__(self, request: Request) -> Response:
        try:
            http_request = await read_request(request, self.max_body_size)
        except InferenceServerError as err:
            return starlette_response(error_response(err))
        return starlette_response(await self.handle_http(http_request))


def _server_for(seat: DirectIngressSeat) -> HttpServer | None:
    ingress = seat.user_callable
    if not isinstance(ingress, HttpIngress):
        return None
    ingress.direct_address = seat.address
    handler = ReplicaHttpHandler(ingress, seat.serve_app, seat.accounting)
    return HttpServer(
        handler.handle,
        max_body_size=ingress.max_body_size,
        keep_alive_timeout_s=seat.keep_alive_timeout_s,
        unlimited_paths=(GRPC_INFER_PATH,),  # Triton's gRPC has no body limit
    )


class ReplicaHttpHandler:
    """One request on a replica's port: Serve's paths to Serve, the rest to the deployment
    (a unary gRPC ``ModelInfer`` to its :meth:`HttpIngress.infer_grpc_message`), with Serve's
    records kept around it."""

    def __init__(
        self, ingress: HttpIngress, serve_app: AsgiApp, accounting: ReplicaRequestAccounting
    ) -> None:
        self._ingress = ingress
        self._serve_app = serve_app
        self._accounting = accounting

    async def handle(self, request: HttpRequest) -> HttpReply:
        if request.path.startswith(SERVE_PATHS):
            return await asgi_call(self._serve_app, request)
        accounting = self._accounting
        await accounting.start()
        started = time.perf_counter()
        status = 500
        try:
            if is_grpc_infer(request):
                reply = await answer_unary(request, self._ingress.infer_grpc_message)
            else:
                reply = await self._ingress.handle_http(request)
            status = reply.status
            return reply
        finally:
            accounting.finish(request.method, status, (time.perf_counter() - started) * 1000)
