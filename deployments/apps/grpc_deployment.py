"""The ``rayton-grpc`` application: Triton's gRPC endpoint, served from one Serve replica.

The replica runs a :mod:`deployments.grpc.server` (started in its ``async def __init__``, on the
replica's event loop) and forwards each RPC through deployment handles. The application has
no HTTP route (``route_prefix: null``). It listens on the public gRPC port, or, where Serve's
HAProxy carries gRPC (``rayton serve --grpc-ingress haproxy``), on a port of its own behind it,
answering every call but a model's ``ModelInfer`` (:mod:`cluster.grpc_routing`).

Deployment: ``num_replicas: 1``, ``num_cpus: 0``. Multi-node clusters (not implemented here):
run one gRPC replica per node (``max_replicas_per_node: 1``, ``num_replicas`` = nodes) behind a
TCP/HTTP2 load balancer, as for Serve's HTTP proxies.
"""

from __future__ import annotations

import logging

from ray import serve

from deployments.apps.replica_control import ControlledReplica, ReplicaControl
from deployments.apps.repository_access import cluster_server_core
from deployments.grpc.server import GrpcSpec, start_grpc_server

logger = logging.getLogger(__name__)

_STOP_GRACE_S = 2.0
GRPC_APP_NAME = "rayton-grpc"
GRPC_DEPLOYMENT_NAME = "grpc"


@serve.deployment
class TritonGrpcServer(ControlledReplica):
    """Hosts the gRPC server; receives no Serve requests itself."""

    async def __init__(self, spec: GrpcSpec) -> None:
        # Serve awaits an async constructor on the replica's user-code event loop, which runs
        # for the replica's lifetime: the server's handlers run there too.
        self.spec = spec
        self.server, self.servicer = await start_grpc_server(spec, cluster_server_core())
        logger.info("Triton gRPC endpoint listening on %s", spec.address)
        self.control = ReplicaControl(held_models=list, traces=False)
        self.control.adopt_controller_settings()

    def address(self) -> str:
        return self.spec.address

    async def __del__(self) -> None:
        server = getattr(self, "server", None)  # None when the constructor failed
        if server is not None:
            await server.stop(_STOP_GRACE_S)
