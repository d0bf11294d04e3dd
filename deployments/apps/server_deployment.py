"""The server application's ingress deployment (route ``/``): the server-wide HTTP routes."""

from __future__ import annotations

from typing import Any

from ray import serve

from deployments.apps.handles import ModelHandles
from deployments.apps.http_ingress import HttpIngress
from deployments.apps.replica_control import ControlledReplica, ReplicaControl
from deployments.apps.repository_access import cluster_server_core
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.server_routes import ServerHttpEndpoints
from repo_adapter.live_repository import IndexEntry

SERVER_DEPLOYMENT_NAME = "server"


@serve.deployment
class TritonServer(HttpIngress, ControlledReplica):
    """Answers the server-wide part of Triton's HTTP protocol; the repository controller
    (a deployment of the same application, passed as ``controller``) owns the state."""

    async def __init__(self, controller: Any) -> None:
        super().__init__()  # no limit: a load request may carry model files
        self.core = cluster_server_core(controller)
        self._http = ServerHttpEndpoints(self.core, ModelHandles().http)
        self.control = ReplicaControl(held_models=list, traces=False)
        self.control.adopt_controller_settings()

    async def handle_http(self, request: HttpRequest) -> HttpReply:
        return await self._http.handle(request)

    async def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        """The repository index as clients get it (``rayton serve`` prints it at start-up)."""
        return await self.core.repository_index(ready_only)
