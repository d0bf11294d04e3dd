"""Server-wide protocol logic, transport-neutral: what the HTTP server routes and gRPC share.

Server metadata, health and readiness, the repository API (index, load, unload), statistics
of every model, the logging and trace settings, and Triton's errors for models without a
deployment. Models are reached through :class:`ModelCalls` (Serve deployment handles in a
cluster: :class:`deployments.apps.handles.ModelHandles`), the repository through
:class:`Repository` and the run-time settings through :class:`RuntimeSettings` (both on the
repository controller's handle), so this module is Ray-free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Protocol, TypedDict

from deployments.core.served_model import ModelMetadata
from deployments.core.shared_memory import CLIENT_SHM_DISABLED, MemoryKind, Region
from deployments.observability.log_settings import LogSettingsDocument
from deployments.observability.statistics import ModelStatistics, merge_entries
from deployments.observability.status import StatusDocument
from deployments.observability.trace_settings import TraceSettingsDocument
from repo_adapter.config import ConfigDocument
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import JsonObject
from repo_adapter.live_repository import UNLOADED_REASON, IndexEntry
from repo_adapter.request_validation import model_not_found
from repo_adapter.version_traffic import TrafficPolicy

logger = logging.getLogger(__name__)

SERVER_NAME = "rayton"
try:
    SERVER_VERSION = metadata.version("rayton")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    SERVER_VERSION = "0+unknown"
# Extensions this server really implements (perf_analyzer reads "statistics").
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",  # "model_repository(unload_dependents)" follows where unload works
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]
UNLOAD_DEPENDENTS = "model_repository(unload_dependents)"
_HANDLE_TIMEOUT_S = 5.0
# The requests that load a model on demand (inference, metadata, config; "" is metadata)
ON_DEMAND_ACTIONS = frozenset(("infer", "", "config", "generate", "generate_stream"))
# How long the frontends route on a cached repository view (a model just loaded elsewhere is
# reachable within this; this server's own load / unload refresh it at once).
VIEW_TTL_S = 1.0


class ServerMetadata(TypedDict):
    name: str
    version: str
    extensions: list[str]


class ModelCalls(Protocol):
    """How the server reaches a deployed model, wherever it runs (errors are Triton's)."""

    async def infer_wire(self, model: str, message: bytes) -> bytes: ...

    def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]: ...

    async def metadata(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ModelMetadata: ...

    async def model_config(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ConfigDocument: ...

    async def is_ready(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> bool: ...

    async def statistics(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> list[ModelStatistics]:
        """The model's statistics summed over every replica serving it."""
        ...

    def forget(self, model: str) -> None:
        """Drop what is cached about ``model`` (it was unloaded)."""
        ...


@dataclass
class RepositoryView:
    """What the frontends keep of the repository's state: enough to route and answer errors.

    ``ready`` is the server's readiness as the repository sees it; ``config_owned`` that a
    Serve config owns the models, so the repository API never unloads (and
    ``unload_dependents`` is not advertised).
    """

    served: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # model -> reason
    ready: bool = False
    config_owned: bool = False
    on_demand: bool = False  # models load on their first request (--load-on-demand)


class Repository(Protocol):
    """The repository's owner (in a cluster: the repository controller's handle)."""

    async def view(self) -> RepositoryView: ...

    async def index(self, ready_only: bool) -> list[IndexEntry]: ...

    async def load(self, model: str, config: str | None, files: dict[str, bytes]) -> None: ...

    async def unload(self, model: str, unload_dependents: bool) -> None: ...

    async def version_traffic(self, model: str) -> TrafficPolicy: ...

    async def set_version_traffic(self, model: str, policy: TrafficPolicy) -> TrafficPolicy: ...

    async def status(self) -> StatusDocument: ...

    async def ensure_loaded(self, model: str) -> bool:
        """On a server that loads models on demand: return once ``model`` serves, loading it
        first; whether it serves (False where its load failed: the view says why)."""
        ...


class RuntimeSettings(Protocol):
    """The server-wide settings clients change at run time, Triton's logging and trace
    extensions (in a cluster: kept by the controller, followed by every replica)."""

    async def log_settings(self) -> LogSettingsDocument: ...

    async def update_log_settings(self, changes: JsonObject) -> LogSettingsDocument: ...

    async def trace_settings(
        self, model: str | None, changes: JsonObject | None
    ) -> TraceSettingsDocument: ...


class SharedMemoryRegistry(Protocol):
    """The registered system and CUDA shared-memory regions' owner (in a cluster: the
    repository controller's handle); Triton's errors, UNSUPPORTED when client shared memory
    is off."""

    async def register_system_region(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None: ...

    async def register_cuda_region(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    async def unregister_regions(self, kind: MemoryKind, name: str) -> None:
        """Forget the regions of ``kind`` named ``name`` (every one when empty), in every
        replica before answering."""
        ...

    async def region_status(self, kind: MemoryKind, name: str) -> list[Region]: ...


class ServerCore:
    """Server-wide protocol logic, transport-neutral: what both frontends answer.

    Errors are :class:`InferenceServerError` with Triton's codes. The repository's view is
    cached for :data:`VIEW_TTL_S` (routing a gRPC request must not cost a call to the
    controller) and refreshed at once after this server changed the repository.
    """

    def __init__(
        self,
        models: ModelCalls,
        repository: Repository,
        settings: RuntimeSettings,
        shared_memory: SharedMemoryRegistry | None = None,
    ) -> None:
        """``shared_memory`` None: a server without the system shared-memory extension."""
        self.models = models
        self.repository = repository
        self.settings = settings
        self.shared_memory = shared_memory
        self._view = RepositoryView()
        self._view_at = -VIEW_TTL_S

    async def view(self, fresh: bool = False) -> RepositoryView:
        now = time.monotonic()
        if fresh or now - self._view_at >= VIEW_TTL_S:
            view = await self.repository.view()
            for gone in set(self._view.served) - set(view.served):
                self.models.forget(gone)
            self._view, self._view_at = view, time.monotonic()
        return self._view

    async def model_metadata(self, model: str, version: str = "") -> ModelMetadata:
        return await self.models.metadata(model, version, timeout_s=_HANDLE_TIMEOUT_S)

    async def model_config(self, model: str, version: str = "") -> ConfigDocument:
        return await self.models.model_config(model, version, timeout_s=_HANDLE_TIMEOUT_S)

    async def model_ready(self, model: str, version: str = "") -> bool:
        return await self.models.is_ready(model, version, timeout_s=_HANDLE_TIMEOUT_S)

    async def model_statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        return await self.models.statistics(model, version, timeout_s=_HANDLE_TIMEOUT_S)

    async def infer_wire(self, model: str, message: bytes) -> bytes:
        """A serialized ``ModelInferRequest`` run by ``model``; its serialized response."""
        return await self.models.infer_wire(model, message)

    def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]:
        """A serialized ``ModelInferRequest`` of a stream run by ``model``; its serialized
        ``ModelStreamInferResponse`` messages."""
        return self.models.infer_wire_stream(model, message)

    async def is_deployed(self, model: str) -> bool:
        return model in (await self.view()).served

    async def serves_now(self, model: str, action: str) -> bool:
        """Whether ``model`` serves, for a request that found no replica of it on its way.

        Where models load on demand, inference, metadata and config requests ask the
        repository, which loads the model first (the request waits, bounded), or waits for
        one being unloaded to load again: the cached view may still list a model just
        unloaded. Other requests (readiness, statistics), and every request on other servers,
        go by the cached view.

        Raises:
            InferenceServerError: the load did not finish in time, or the model is unknown.
        """
        view = await self.view()
        if view.on_demand and action in ON_DEMAND_ACTIONS:
            return await self.repository.ensure_loaded(model)
        return model in view.served

    async def server_metadata(self) -> ServerMetadata:
        extensions = list(EXTENSIONS)
        if self.shared_memory is not None:
            at = extensions.index("binary_tensor_data")
            extensions[at:at] = ["system_shared_memory", "cuda_shared_memory"]
        if not (await self.view()).config_owned:
            extensions.insert(extensions.index("model_repository") + 1, UNLOAD_DEPENDENTS)
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": extensions}

    def _registry(self) -> SharedMemoryRegistry:
        if self.shared_memory is None:
            raise InferenceServerError(CLIENT_SHM_DISABLED, StatusCode.UNSUPPORTED)
        return self.shared_memory

    async def shared_memory_status(self, kind: MemoryKind, name: str = "") -> list[Region]:
        """Every registered region of ``kind``, or the one named (NOT_FOUND when it is not)."""
        if self.shared_memory is None:
            if name:
                raise InferenceServerError(
                    f"Unable to find {kind.value} shared memory region: '{name}'",
                    StatusCode.NOT_FOUND,
                )
            return []
        return await self.shared_memory.region_status(kind, name)

    async def register_system_shared_memory(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None:
        await self._registry().register_system_region(name, key, offset, byte_size)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self._registry().register_cuda_region(name, raw_handle, device_id, byte_size)

    async def unregister_shared_memory(self, kind: MemoryKind, name: str = "") -> None:
        await self._registry().unregister_regions(kind, name)

    async def server_ready(self) -> bool:
        view = await self.view()
        if not view.ready:
            return False
        try:
            states = await asyncio.gather(*(self.model_ready(m) for m in view.served))
        except Exception:  # a model app still deploying or failed: not ready
            return False
        return all(states)

    async def all_statistics(self) -> list[ModelStatistics]:
        entries: list[ModelStatistics] = []
        for model in (await self.view()).served:
            try:
                entries.extend(await self.model_statistics(model))
            except InferenceServerError:
                continue  # no ready version: Triton lists only ready versions
            except Exception:
                logger.warning("no statistics from model '%s'", model)
        return merge_entries(entries)

    async def repository_index(self, ready_only: bool = False) -> list[IndexEntry]:
        return await self.repository.index(ready_only)

    async def status(self) -> StatusDocument:
        """rayton's status document (``rayton status``): models, versions, replicas."""
        return await self.repository.status()

    async def log_settings(self) -> LogSettingsDocument:
        """Triton's logging extension: the settings every replica follows."""
        return await self.settings.log_settings()

    async def update_log_settings(self, changes: JsonObject) -> LogSettingsDocument:
        """Apply ``changes`` everywhere; the new settings (Triton's errors for bad ones)."""
        return await self.settings.update_log_settings(changes)

    async def trace_settings(
        self, model: str | None, changes: JsonObject | None
    ) -> TraceSettingsDocument:
        """Triton's trace extension: the server's (``model`` None) or a model's settings,
        changed first when ``changes`` is given (Triton's errors for bad ones)."""
        return await self.settings.trace_settings(model, changes)

    async def load(self, model: str, config: str | None, files: dict[str, bytes]) -> None:
        """Triton's repository ``load``; errors as Triton answers them."""
        try:
            await self.repository.load(model, config, files)
        finally:
            await self.view(fresh=True)

    async def unload(self, model: str, unload_dependents: bool) -> None:
        try:
            await self.repository.unload(model, unload_dependents)
        finally:
            await self.view(fresh=True)

    async def version_traffic(self, model: str) -> TrafficPolicy:
        """rayton's ``traffic`` extension: how a loaded model spreads the requests that name
        no version (repo_adapter/version_traffic.py)."""
        return await self.repository.version_traffic(model)

    async def set_version_traffic(self, model: str, policy: TrafficPolicy) -> TrafficPolicy:
        """Change that policy live; it holds once this returns."""
        return await self.repository.set_version_traffic(model, policy)

    async def undeployed_model_error(
        self, model: str, version: str = "", action: str = ""
    ) -> InferenceServerError:
        """Triton's error for a request about a model without an application.

        ``action`` is the request kind (``"stats"``, ``"ready"``, ``"infer"``, ``""`` for
        metadata, ...). Readiness of a model that failed to load is not an error (the caller
        answers "not ready"); it gets the UNAVAILABLE error here like every other request.
        """
        if action == "stats":  # core: no ready version is INVALID_ARG here, not NOT_FOUND
            return InferenceServerError(f"requested model '{model}' is not available")
        reason = (await self.view(fresh=True)).unavailable.get(model)
        if reason == UNLOADED_REASON:  # Triton: known, but no version to serve
            return InferenceServerError(
                f"Request for unknown model: '{model}' has no available versions",
                StatusCode.NOT_FOUND,
            )
        if reason is not None:
            return InferenceServerError(
                f"Request for unknown model: '{model}' is not ready: {reason}",
                StatusCode.UNAVAILABLE,
            )
        return model_not_found(model, version)

    async def is_unavailable(self, model: str) -> bool:
        return model in (await self.view()).unavailable
