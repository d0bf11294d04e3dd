"""Calls between deployments through Serve deployment handles: the one place a typed call
becomes a Serve handle call.

:class:`ModelHandles` reaches a model's replicas with the methods of
:class:`~deployments.apps.replica_api.ModelReplicaApi`, wherever the model lives: the
deployment named after it (deployment name = application name = model name, see
:mod:`deployments.apps.builders`), or the shared host when it has no application of its own.
:func:`broadcast` asks every replica of some deployments one method of the replica surfaces.
Handle methods are looked up once per caller: a lookup costs more than the call on the hot
path (gRPC inference, ensemble steps).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from ray import serve
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator

from deployments.core.served_model import ModelMetadata
from deployments.http.messages import HttpReply, HttpRequest
from deployments.observability.statistics import ModelStatistics
from repo_adapter.config import ConfigDocument
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.request_validation import model_not_found
from repo_adapter.response_stream import StreamedResponse

logger = logging.getLogger(__name__)

# The shared model host (deployments/apps/host_deployment.py); named here, not imported, as
# the host itself uses these handles.
HOST_APP_NAME = "rayton-models"
HOST_DEPLOYMENT_NAME = "models"

T = TypeVar("T")


class _ReplicaMethods:
    """The :class:`ModelReplicaApi` methods of one deployment's handle, looked up once."""

    def __init__(self, handle: DeploymentHandle) -> None:
        self.infer = handle.infer
        self.infer_wire = handle.infer_wire
        self.infer_wire_stream = handle.options(stream=True).infer_wire_stream
        self.infer_stream = handle.options(stream=True).infer_stream
        self.metadata = handle.metadata
        self.model_config = handle.model_config
        self.is_ready = handle.is_ready
        self.statistics = handle.statistics
        self.handle_http = handle.handle_http


class ModelHandles:
    """The :class:`~deployments.core.server_core.ModelCalls` of a Serve cluster."""

    def __init__(self) -> None:
        self._models: dict[str, _ReplicaMethods] = {}
        self._host: _ReplicaMethods | None = None  # the shared host, once looked up

    def replicas(self, model: str) -> _ReplicaMethods:
        """The handle methods of the deployment serving ``model`` (cached).

        Raises Triton's NOT_FOUND error when Serve serves no ``model``.
        """
        found = self._models.get(model)
        if found is None:
            try:
                found = _ReplicaMethods(serve.get_deployment_handle(model, app_name=model))
            except KeyError:  # no application of its own: the shared host, if it runs
                found = self._shared_host(model)
            self._models[model] = found
        return found

    def _shared_host(self, model: str) -> _ReplicaMethods:
        if self._host is None:
            try:
                handle = serve.get_deployment_handle(HOST_DEPLOYMENT_NAME, app_name=HOST_APP_NAME)
            except KeyError:  # Serve's answer for an application it does not have
                raise model_not_found(model) from None
            self._host = _ReplicaMethods(handle)
        return self._host

    def forget(self, model: str) -> None:
        """Drop what is cached about ``model`` (unloaded: its deployment is gone)."""
        self._models.pop(model, None)

    async def infer(self, model: str, request: InferRequest) -> InferResponse:
        return await self._answer(model, self.replicas(model).infer.remote(model, request))

    async def infer_stream(
        self, model: str, request: InferRequest
    ) -> AsyncIterator[StreamedResponse]:
        async for reply in _streamed(
            model, self.replicas(model).infer_stream.remote(model, request)
        ):
            yield reply

    async def infer_wire(self, model: str, message: bytes) -> bytes:
        response = self.replicas(model).infer_wire.remote(model, message)
        return await self._answer(model, response)

    async def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]:
        replies = self.replicas(model).infer_wire_stream.remote(model, message)
        async for reply in _streamed(model, replies):
            yield reply

    async def http(self, model: str, request: HttpRequest) -> HttpReply:
        """``request`` (under ``/v2/models/<model>``) answered by ``model``'s replicas."""
        return await self._answer(model, self.replicas(model).handle_http.remote(request))

    async def metadata(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ModelMetadata:
        response = self.replicas(model).metadata.remote(model, version)
        return await self._answer(model, response, timeout_s)

    async def model_config(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ConfigDocument:
        response = self.replicas(model).model_config.remote(model, version)
        return await self._answer(model, response, timeout_s)

    async def is_ready(self, model: str, version: str = "", timeout_s: float | None = None) -> bool:
        response = self.replicas(model).is_ready.remote(model, version)
        return bool(await self._answer(model, response, timeout_s))

    async def statistics(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> list[ModelStatistics]:
        response = self.replicas(model).statistics.remote(model, version)
        return await self._answer(model, response, timeout_s)

    async def _answer(
        self, model: str, response: DeploymentResponse, timeout_s: float | None = None
    ) -> Any:
        """The replica's answer; Triton's UNAVAILABLE when its process went before answering."""
        try:
            if timeout_s is None:
                return await response
            return await asyncio.wait_for(response, timeout_s)
        except RayActorError as err:  # the replica's process went (a crash, a kill)
            raise _replica_gone(model, err) from None
        except asyncio.TimeoutError:
            # A fresh handle next time: its router is new (see repository_access._read)
            self.forget(model)
            raise


async def _streamed(model: str, replies: DeploymentResponseGenerator) -> AsyncIterator[Any]:
    """A streaming call's replies; Triton's UNAVAILABLE when the replica's process went."""
    try:
        async for reply in replies:
            yield reply
    except RayActorError as err:
        raise _replica_gone(model, err) from None


def _replica_gone(model: str, err: RayActorError) -> InferenceServerError:
    return InferenceServerError(
        f"model '{model}' is unavailable: the replica serving it stopped before "
        f"answering ({type(err).__name__}); Serve is starting a new one",
        StatusCode.UNAVAILABLE,
    )


_BROADCAST_TIMEOUT_S = 10.0
_broadcast_handles: dict[tuple[str, str], DeploymentHandle] = {}


async def _every_replica(
    deployment: str, app: str, method: Callable[..., Any], args: tuple, timeout_s: float
) -> list[Any]:
    handle = _broadcast_handles.get((deployment, app))
    if handle is None:
        handle = serve.get_deployment_handle(deployment, app_name=app)
        _broadcast_handles[deployment, app] = handle
    return await handle.broadcast(method.__name__, *args).results_async(timeout_s=timeout_s)


async def broadcast(
    targets: Iterable[tuple[str, str]],
    method: Callable[..., T | Awaitable[T]],
    *args: Any,
    timeout_s: float = _BROADCAST_TIMEOUT_S,
) -> list[T]:
    """``method(*args)`` on every replica of each ``(deployment, application)``, concurrently:
    the replicas' results in one list. ``method`` is a method of the replica surfaces
    (:mod:`deployments.apps.replica_api`). A target that does not answer this time (not
    deployed, replicas starting or stopping) is left out."""

    async def one(deployment: str, app: str) -> list[Any]:
        try:
            return await _every_replica(deployment, app, method, args, timeout_s)
        except Exception as err:
            logger.debug("%s not answered by %s/%s: %r", method.__name__, app, deployment, err)
            return []

    found = await asyncio.gather(*(one(d, a) for d, a in targets))
    return [result for results in found for result in results]


async def ask_own_replicas(
    method: Callable[..., T | Awaitable[T]], *args: Any, timeout_s: float = _BROADCAST_TIMEOUT_S
) -> list[T]:
    """``method(*args)`` on every replica of this replica's own deployment; a replica's error
    (Triton's, for a version it does not serve) is raised."""
    context = serve.get_replica_context()
    return await _every_replica(context.deployment, context.app_name, method, args, timeout_s)
