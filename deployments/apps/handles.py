"""Calls to the model deployments through Serve deployment handles.

Deployment name = application name = model name (see :mod:`deployments.apps.builders`).
One cache of handle methods per caller: looking a handle up costs more than the call on the
hot path (gRPC inference, ensemble steps).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from repo_adapter.request_validation import model_not_found


class ModelHandles:
    """The :class:`~deployments.core.server_core.ModelCalls` of a Serve cluster."""

    def __init__(self) -> None:
        self._methods: dict[tuple[str, str], Any] = {}

    def method(self, model: str, method: str) -> Any:
        """``method`` of ``model``'s deployment handle (cached).

        Raises Triton's NOT_FOUND error when Serve has no deployment for ``model``.
        """
        key = (model, method)
        found = self._methods.get(key)
        if found is None:
            try:
                handle: DeploymentHandle = serve.get_deployment_handle(model, app_name=model)
            except KeyError:  # Serve's answer for an application it does not have
                raise model_not_found(model) from None
            found = self._methods[key] = getattr(handle, method)
        return found

    async def call(self, model: str, method: str, *args: Any, timeout_s: float | None = None):
        """Call ``method`` on one replica of ``model``'s deployment and return its result."""
        response = self.method(model, method).remote(*args)
        if timeout_s is None:
            return await response
        return await asyncio.wait_for(response, timeout_s)
