"""The server application's ingress deployment (route ``/``): the server-wide HTTP routes."""

from __future__ import annotations

from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from deployments.apps.handles import ModelHandles
from deployments.apps.repository_access import ControllerRepository
from deployments.core.server_core import ServerCore
from deployments.http.server_routes import ServerHttpEndpoints


@serve.deployment
class TritonServer:
    """Answers the server-wide part of Triton's HTTP protocol; the repository controller
    (a deployment of the same application, passed as ``controller``) owns the state."""

    def __init__(self, controller: Any) -> None:
        self.core = ServerCore(ModelHandles(), ControllerRepository(controller))
        self._http = ServerHttpEndpoints(self.core)

    async def __call__(self, request: Request) -> Response:
        return await self._http.handle(request)

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """The repository index as clients get it (``rayton serve`` prints it at start-up)."""
        return await self.core.repository_index(ready_only)
