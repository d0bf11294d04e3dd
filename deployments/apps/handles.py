"""Calls to the model deployments through Serve deployment handles.

Deployment name = application name = model name (see :mod:`deployments.apps.builders`);
a model without an application of its own is one the shared host serves.
One cache of handle methods per caller: looking a handle up costs more than the call on the
hot path (gRPC inference, ensemble steps).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from ray import serve
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle

from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.request_validation import model_not_found

logger = logging.getLogger(__name__)

# The shared model host (deployments/apps/host_deployment.py); named here, not imported, as
# the host itself uses these handles.
HOST_APP_NAME = "rayton-models"
HOST_DEPLOYMENT_NAME = "models"


class _HostedMethod:
    """A hosted model's method: ``remote(*args)`` is the host's ``model_call``."""

    def __init__(self, model_call: Any, model: str, method: str) -> None:
        self._model_call, self._model, self._method = model_call, model, method

    def remote(self, *args: Any) -> Any:
        return self._model_call.remote(self._model, self._method, *args)


class ModelHandles:
    """The :class:`~deployments.core.server_core.ModelCalls` of a Serve cluster."""

    def __init__(self) -> None:
        self._methods: dict[tuple[str, str], Any] = {}
        self._host: Any = None  # the shared host's model_call method, once looked up

    def method(self, model: str, method: str) -> Any:
        """``method`` of ``model``'s deployment handle (cached).

        Raises Triton's NOT_FOUND error when Serve has no deployment for ``model``.
        """
        key = (model, method)
        found = self._methods.get(key)
        if found is None:
            try:
                handle: DeploymentHandle = serve.get_deployment_handle(model, app_name=model)
                found = getattr(handle, method)
            except KeyError:  # no application of its own: the shared host, if it runs
                found = _HostedMethod(self._host_call(model), model, method)
            self._methods[key] = found
        return found

    def _host_call(self, model: str) -> Any:
        if self._host is None:
            try:
                self._host = serve.get_deployment_handle(
                    HOST_DEPLOYMENT_NAME, app_name=HOST_APP_NAME
                ).model_call
            except KeyError:  # Serve's answer for an application it does not have
                raise model_not_found(model) from None
        return self._host

    def forget(self, model: str) -> None:
        """Drop the cached methods of ``model`` (unloaded: its deployment is gone)."""
        for key in [k for k in self._methods if k[0] == model]:
            del self._methods[key]

    async def call(self, model: str, method: str, *args: Any, timeout_s: float | None = None):
        """Call ``method`` on one replica of ``model``'s deployment and return its result."""
        response = self.method(model, method).remote(*args)
        try:
            if timeout_s is None:
                return await response
            return await asyncio.wait_for(response, timeout_s)
        except RayActorError as err:  # the replica's process went (a crash, a kill)
            raise InferenceServerError(
                f"model '{model}' is unavailable: the replica serving it stopped before "
                f"answering ({type(err).__name__}); Serve is starting a new one",
                StatusCode.UNAVAILABLE,
            ) from None


_BROADCAST_TIMEOUT_S = 10.0
_broadcast_handles: dict[tuple[str, str], DeploymentHandle] = {}


async def broadcast(
    targets: Iterable[tuple[str, str]],
    method: str,
    *args: Any,
    timeout_s: float = _BROADCAST_TIMEOUT_S,
) -> list[Any]:
    """``method(*args)`` on every replica of each ``(deployment, application)``, concurrently:
    the replicas' results in one list. A target that does not answer this time (not deployed,
    replicas starting or stopping) is left out."""

    async def one(deployment: str, app: str) -> list[Any]:
        try:
            handle = _broadcast_handles.get((deployment, app))
            if handle is None:
                handle = serve.get_deployment_handle(deployment, app_name=app)
                _broadcast_handles[deployment, app] = handle
            return await handle.broadcast(method, *args).results_async(timeout_s=timeout_s)
        except Exception as err:
            logger.debug("%s not answered by %s/%s: %r", method, app, deployment, err)
            return []

    found = await asyncio.gather(*(one(d, a) for d, a in targets))
    return [result for results in found for result in results]
