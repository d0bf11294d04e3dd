"""BLS from python models in a replica: ``InferenceRequest.exec()`` and friends, on Serve handles.

A python model's ``pb_utils.InferenceRequest(...).exec()`` / ``async_exec()`` becomes an
``infer`` on the target model's own deployment, so the target's batching and replicas apply,
as Triton sends BLS requests through the target's scheduler; ``exec(decoupled=True)`` an
``infer_stream`` (a streaming handle call), a decoupled target's responses as it sends them.
``pb_utils.is_model_ready`` asks the target's replicas. A target loaded in the caller's own
process (the shared host's models) is called there, through its own batcher, without a hop:
as Triton does, and so that a host replica's BLS calls never wait on the host's own request
slots. Installed by every model replica (:mod:`deployments.apps.model_deployment`,
:mod:`deployments.apps.host_deployment`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from deployments.apps.handles import ModelHandles
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.python_backend import runtime
from repo_adapter.response_stream import StreamedResponse

_READY_TIMEOUT_S = 10.0
_MODEL_CONTROL = (
    "model load / unload from a python model is not supported yet; redeploy with "
    "'serve deploy' or 'rayton serve --load-model'"
)


class ServeBls:
    """The BLS dispatcher and model repository hook of one replica."""

    def __init__(
        self,
        handles: ModelHandles | None = None,
        local_model: Callable[[str], Any | None] | None = None,
    ) -> None:
        self._handles = handles or ModelHandles()
        # name -> a ready model of this process (with infer / is_ready), or None
        self._local_model = local_model or (lambda name: None)

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run ``request`` on its target model (NOT_FOUND for an unknown one)."""
        local = self._local_model(request.model_name)
        if local is not None:
            return await local.infer(request)
        return await self._handles.infer(request.model_name, request)

    async def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        """``request``'s responses on its target model as they come (a decoupled target's
        several): ``exec(decoupled=True)``."""
        local = self._local_model(request.model_name)
        if local is not None:
            replies = local.infer_stream(request)
        else:
            replies = self._handles.infer_stream(request.model_name, request)
        async for item in replies:
            yield item

    async def is_model_ready(self, model_name: str, model_version: str) -> bool:
        local = self._local_model(model_name)
        if local is not None:
            return bool(local.is_ready(model_version))
        try:
            ready = await self._handles.is_ready(
                model_name, model_version, timeout_s=_READY_TIMEOUT_S
            )
        except InferenceServerError as err:
            if err.code is StatusCode.NOT_FOUND:  # no such model: not ready, as in Triton
                return False
            raise
        return bool(ready)

    def load_model(self, model_name: str, config: str, files: dict[str, bytes] | None) -> None:
        raise InferenceServerError(_MODEL_CONTROL, StatusCode.UNSUPPORTED)

    def unload_model(self, model_name: str, unload_dependents: bool) -> None:
        raise InferenceServerError(_MODEL_CONTROL, StatusCode.UNSUPPORTED)


def install_bls(local_model: Callable[[str], Any | None] | None = None) -> None:
    """Make this process's python models reach the other models through Serve.

    ``local_model(name)``: a ready model this process serves itself, or None.
    """
    bls = ServeBls(local_model=local_model)
    runtime.set_bls_dispatcher(bls.infer)
    runtime.set_bls_stream_dispatcher(bls.infer_stream)
    runtime.set_model_repository_hook(bls)
