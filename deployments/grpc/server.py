"""A ``grpc.aio`` server answering Triton's gRPC protocol (and gRPC health) from a ServerCore.

Serve's own gRPC proxy routes by an ``application`` metadata key that ``tritonclient`` never
sends, and pickles every message on the way: the ``rayton-grpc`` application's replica
(:mod:`deployments.apps.grpc_deployment`) runs this server on its event loop instead, either
on the public port or behind Serve's HAProxy, which then sends each model's ``ModelInfer``
to the model's replicas itself (:mod:`cluster.grpc_routing`). ``ModelInfer`` that reaches
this server goes to the model's replicas as the request's wire bytes.

The port is bound without ``SO_REUSEPORT``, so a second server on the same port fails to start
instead of silently sharing it; a server waits up to :data:`BIND_WAIT_S` for the port, so a
replacement replica (redeploy) can start while its predecessor drains.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from deployments.core.server_core import ServerCore
from deployments.grpc.servicer import TritonGrpcServicer, add_servicer_to_server, health_handler

logger = logging.getLogger(__name__)

# tritonclient sends and accepts messages up to INT32_MAX; grpc's default receive limit is 4 MiB.
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.so_reuseport", 0),
]
# How long a starting replica retries a busy port (a replaced replica may still hold it).
BIND_WAIT_S = 30.0
_BIND_RETRY_S = 0.5


@dataclass
class GrpcSpec:
    """Where the gRPC endpoint listens."""

    host: str = "127.0.0.1"
    port: int = 8001

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6 literal
        return f"{host}:{self.port}"


async def start_grpc_server(
    spec: GrpcSpec,
    core: ServerCore,
    bind_wait_s: float = BIND_WAIT_S,
) -> tuple[grpc.aio.Server, TritonGrpcServicer]:
    """A started ``grpc.aio`` server answering ``inference.GRPCInferenceService`` with the
    server's protocol logic ``core``. Must run on the event loop that will serve it.
    Raises RuntimeError when the address cannot be bound within ``bind_wait_s`` (port in use).
    """
    servicer = TritonGrpcServicer(core)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bind_wait_s
    while True:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        add_servicer_to_server(servicer, server)
        server.add_generic_rpc_handlers((health_handler(servicer.core),))
        try:
            server.add_insecure_port(spec.address)
            break
        except RuntimeError as err:
            if loop.time() >= deadline:
                raise RuntimeError(
                    f"cannot listen for gRPC on {spec.address} (tried for {bind_wait_s:g} s; "
                    f"is the port in use?): {err}"
                ) from None
            await asyncio.sleep(_BIND_RETRY_S)
    await server.start()
    return server, servicer
