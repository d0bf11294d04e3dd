"""BLS from python models in a replica: ``InferenceRequest.exec()`` and friends, on Serve handles.

A python model's ``pb_utils.InferenceRequest(...).exec()`` / ``async_exec()`` becomes an
``infer`` on the target model's own deployment, so the target's batching and replicas apply,
as Triton sends BLS requests through the target's scheduler. ``pb_utils.is_model_ready`` asks
the target's replicas. Installed by every model replica (:mod:`deployments.apps.model_deployment`).
"""

from __future__ import annotations

from deployments.apps.handles import ModelHandles
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.python_backend import runtime

_READY_TIMEOUT_S = 10.0
_MODEL_CONTROL = (
    "model load / unload from a python model is not supported yet; redeploy with "
    "'serve deploy' or 'rayton serve --load-model'"
)


class ServeBls:
    """The BLS dispatcher and model repository hook of one replica."""

    def __init__(self, handles: ModelHandles | None = None) -> None:
        self._handles = handles or ModelHandles()

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run ``request`` on its target model's deployment (NOT_FOUND for an unknown one)."""
        return await self._handles.call(request.model_name, "infer", request)

    async def is_model_ready(self, model_name: str, model_version: str) -> bool:
        try:
            ready = await self._handles.call(
                model_name, "is_ready", model_version, timeout_s=_READY_TIMEOUT_S
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


def install_bls() -> None:
    """Make this process's python models reach the other models through Serve."""
    bls = ServeBls()
    runtime.set_bls_dispatcher(bls.infer)
    runtime.set_model_repository_hook(bls)
