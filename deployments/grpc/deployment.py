"""The ``rayton-grpc`` application: Triton's gRPC endpoint, served from one Serve replica.

Serve's own gRPC proxy routes by an ``application`` metadata key that ``tritonclient`` never
sends, and pickles every message on the way, so it is not used. Instead the replica of this
deployment runs a standalone ``grpc.aio`` server on ``grpc_host:grpc_port`` (started in its
``async def __init__``, on the replica's event loop) and forwards each RPC through deployment
handles: ``ModelInfer`` goes straight to the model's replicas as the request's wire bytes
(they decode it and answer with the response's bytes), like an HTTP request does through
Serve's proxy. The application has no HTTP route (``route_prefix: null``).

Deployment: ``num_replicas: 1``, ``num_cpus: 0``. The port is bound without ``SO_REUSEPORT``,
so a second server on the same port fails to start instead of silently sharing it; a replica
waits up to :data:`BIND_WAIT_S` for the port, so a replacement replica (redeploy) can start
while its predecessor drains. Multi-node
clusters (not implemented here): run one gRPC replica per node (``max_replicas_per_node: 1``,
``num_replicas`` = nodes) behind a TCP/HTTP2 load balancer, as for Serve's HTTP proxies.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc
from ray import serve
from ray.serve import Application

from deployments.applications import GrpcAppArgs, server_spec
from deployments.grpc.servicer import TritonGrpcServicer, add_servicer_to_server, health_handler
from deployments.server_deployment import ServerCore, ServerSpec

logger = logging.getLogger(__name__)

GRPC_DEPLOYMENT_NAME = "grpc"
# tritonclient sends and accepts messages up to INT32_MAX; grpc's default receive limit is 4 MiB.
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.so_reuseport", 0),
]
_STOP_GRACE_S = 2.0
# How long a starting replica retries a busy port (a replaced replica may still hold it).
BIND_WAIT_S = 30.0
_BIND_RETRY_S = 0.5


@dataclass
class GrpcSpec:
    """What the gRPC replica needs: the scanned repository and where to listen."""

    server: ServerSpec
    host: str = "127.0.0.1"
    port: int = 8001

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6 literal
        return f"{host}:{self.port}"


async def start_grpc_server(
    spec: GrpcSpec, bind_wait_s: float = BIND_WAIT_S
) -> tuple[grpc.aio.Server, TritonGrpcServicer]:
    """A started ``grpc.aio`` server answering ``inference.GRPCInferenceService``.

    Must run on the event loop that will serve it. Raises RuntimeError when the address
    cannot be bound within ``bind_wait_s`` (port in use).
    """
    servicer = TritonGrpcServicer(ServerCore(spec.server))
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


@serve.deployment
class TritonGrpcServer:
    """Hosts the gRPC server; receives no Serve requests itself."""

    async def __init__(self, spec: GrpcSpec) -> None:
        # Serve awaits an async constructor on the replica's user-code event loop, which runs
        # for the replica's lifetime: the server's handlers run there too.
        self.spec = spec
        self.server, self.servicer = await start_grpc_server(spec)
        logger.info("Triton gRPC endpoint listening on %s", spec.address)

    def address(self) -> str:
        return self.spec.address

    async def __del__(self) -> None:
        server = getattr(self, "server", None)  # None when the constructor failed
        if server is not None:
            await server.stop(_STOP_GRACE_S)


def build_grpc_app(args: GrpcAppArgs) -> Application:
    """The gRPC application (``import_path`` target)."""
    if isinstance(args, dict):
        args = GrpcAppArgs.model_validate(args)
    spec = GrpcSpec(server_spec(args), host=args.grpc_host, port=args.grpc_port)
    return TritonGrpcServer.options(
        name=GRPC_DEPLOYMENT_NAME, num_replicas=1, ray_actor_options={"num_cpus": 0}
    ).bind(spec)
