"""The repository controller as the frontends reach it: the :class:`Repository` and the
:class:`RuntimeSettings` of :class:`~deployments.core.server_core.ServerCore`, over its handle."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import ray
from ray import serve

from deployments.apps.handles import ModelHandles
from deployments.core.model_host import HostedSet
from deployments.core.server_core import RepositoryView, ServerCore
from deployments.core.shared_memory import MemoryKind, Region
from deployments.observability.log_settings import LogSettingsDocument
from deployments.observability.status import StatusDocument
from deployments.observability.trace_settings import TraceSettingsDocument
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import JsonObject
from repo_adapter.live_repository import IndexEntry
from repo_adapter.version_traffic import TrafficPolicy

# The controller's deployment and application (it lives in the server application).
CONTROLLER_APP_NAME = "rayton-server"
CONTROLLER_DEPLOYMENT_NAME = "repository"
T = TypeVar("T")
# How long a read of the controller's state may take (loads and unloads are not bounded).
READ_TIMEOUT_S = 30.0


class _ControllerHandle:
    def __init__(self, handle: Any = None) -> None:
        self._handle = handle  # None: looked up by name on first use

    @property
    def handle(self):
        if self._handle is None:
            self._handle = serve.get_deployment_handle(
                CONTROLLER_DEPLOYMENT_NAME, app_name=CONTROLLER_APP_NAME
            )
        return self._handle

    async def _read(self, call: Callable[[Any], Awaitable[T]]) -> T:
        """``call(handle)``, bounded. A handle whose call did not return in time is replaced:
        a Serve router that stopped hearing from Serve's controller never routes again, and
        a new handle has a router of its own (one CI run's server stayed not ready that way)."""
        try:
            return await asyncio.wait_for(call(self.handle), READ_TIMEOUT_S)
        except asyncio.TimeoutError:
            self._handle = None
            raise InferenceServerError(
                f"the repository controller did not answer within {READ_TIMEOUT_S:.0f} s",
                StatusCode.UNAVAILABLE,
            ) from None


class ControllerRepository(_ControllerHandle):
    """:class:`~deployments.core.server_core.Repository` on the controller's deployment handle."""

    async def view(self) -> RepositoryView:
        return await self._read(lambda handle: handle.view.remote())

    async def index(self, ready_only: bool) -> list[IndexEntry]:
        return await self._read(lambda handle: handle.index.remote(ready_only))

    async def status(self) -> StatusDocument:
        return await self._read(lambda handle: handle.status.remote())

    async def load(self, model: str, config: str | None, files: dict[str, bytes]) -> None:
        await self.handle.load.remote(model, config, files)

    async def unload(self, model: str, unload_dependents: bool) -> None:
        await self.handle.unload.remote(model, unload_dependents)

    async def version_traffic(self, model: str) -> TrafficPolicy:
        return await self._read(lambda handle: handle.version_traffic.remote(model))

    async def set_version_traffic(self, model: str, policy: TrafficPolicy) -> TrafficPolicy:
        return await self.handle.set_version_traffic.remote(model, policy)

    async def ensure_loaded(self, model: str) -> bool:
        # Bounded by the controller (--load-on-demand-timeout-secs), not by READ_TIMEOUT_S.
        return await self.handle.ensure_loaded.remote(model)


class ControllerSettings(_ControllerHandle):
    """:class:`~deployments.core.server_core.RuntimeSettings` on the controller's handle."""

    async def log_settings(self) -> LogSettingsDocument:
        return await self._read(lambda handle: handle.log_settings.remote())

    async def update_log_settings(self, changes: JsonObject) -> LogSettingsDocument:
        return await self.handle.update_log_settings.remote(changes)

    async def trace_settings(
        self, model: str | None, changes: JsonObject | None
    ) -> TraceSettingsDocument:
        return await self.handle.trace_settings.remote(model, changes)


class ControllerCaches(_ControllerHandle):
    """Where this node's response cache answers, as the controller says (a replica's
    :data:`~deployments.apps.node_response_cache.CacheFinder`)."""

    async def __call__(self) -> str | None:
        node_id = ray.get_runtime_context().get_node_id()
        return await self._read(lambda handle: handle.response_cache.remote(node_id))


class ControllerHosting(_ControllerHandle):
    """The shared host's models, as the controller holds them (a starting host replica's)."""

    async def hosted_set(self) -> HostedSet:
        return await self._read(lambda handle: handle.hosted_set.remote())

    async def hosted_revision(self) -> int:
        return await self._read(lambda handle: handle.hosted_revision.remote())


class ControllerSharedMemory(_ControllerHandle):
    """:class:`~deployments.core.server_core.SharedMemoryRegistry` on the controller's handle,
    and the regions' list a replica takes."""

    async def register_system_region(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        await self.handle.register_system_region.remote(name, key, offset, byte_size)

    async def register_cuda_region(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self.handle.register_cuda_region.remote(name, raw_handle, device_id, byte_size)

    async def unregister_regions(self, kind: MemoryKind, name: str) -> None:
        await self.handle.unregister_regions.remote(kind, name)

    async def region_status(self, kind: MemoryKind, name: str) -> list[Region]:
        return await self._read(lambda handle: handle.region_status.remote(kind, name))

    async def regions(self) -> list[Region]:
        return await self._read(lambda handle: handle.regions.remote())


def cluster_server_core(controller: Any = None) -> ServerCore:
    """The server's protocol logic as a replica runs it: models over their deployment
    handles, the repository and settings over the controller's (``controller``: its handle,
    when the caller was given one)."""
    return ServerCore(
        ModelHandles(),
        ControllerRepository(controller),
        ControllerSettings(controller),
        ControllerSharedMemory(controller),
    )
