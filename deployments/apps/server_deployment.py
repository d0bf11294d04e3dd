"""The server application's ingress deployment (route ``/``): the server-wide HTTP routes."""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from deployments.apps.handles import ModelHandles
from deployments.apps.log_control import adopt_log_settings, apply_in_this_replica
from deployments.apps.repository_access import ControllerRepository
from deployments.core.server_core import ServerCore
from deployments.http.server_routes import ServerHttpEndpoints

SERVER_DEPLOYMENT_NAME = "server"


@serve.deployment
class TritonServer:
    """Answers the server-wide part of Triton's HTTP protocol; the repository controller
    (a deployment of the same application, passed as ``controller``) owns the state."""

    async def __init__(self, controller: Any) -> None:
        self.core = ServerCore(ModelHandles(), ControllerRepository(controller))
        self._http = ServerHttpEndpoints(self.core)
        asyncio.get_running_loop().create_task(adopt_log_settings())

    def apply_log_settings(self, settings: dict[str, Any]) -> None:
        """Triton's log settings, from the controller."""
        apply_in_this_replica(settings)

    async def __call__(self, request: Request) -> Response:
        return await self._http.handle(request)

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """The repository index as clients get it (``rayton serve`` prints it at start-up)."""
        return await self.core.repository_index(ready_only)
