"""What a model's Serve deployment exposes, whether it is one model or an ensemble."""

from __future__ import annotations

from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from deployments.grpc.model_infer import infer_serialized
from deployments.http.model_routes import ModelHttpEndpoints
from deployments.statistics import merge_entries
from repo_adapter.inference import InferRequest, InferResponse

_STATISTICS_TIMEOUT_S = 10.0


class ServedModel:
    """HTTP (``__call__``) and handle methods over ``self.service``.

    Subclasses set ``self.service`` (a ModelService or EnsembleService) and call
    :meth:`_serve_http`. Handle methods serve gRPC, ensembles and the server application.
    """

    service: Any

    def _serve_http(self) -> None:
        self._http = ModelHttpEndpoints(self.service, self.statistics)

    async def __call__(self, request: Request) -> Response:
        return await self._http.handle(request)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.service.infer(request)

    async def infer_grpc(self, message: bytes, stream: bool = False) -> bytes:
        """A serialized ``ModelInferRequest`` -> its serialized response (gRPC frontend)."""
        return await infer_serialized(self.service.infer, message, stream)

    def metadata(self, version: str = "") -> dict[str, Any]:
        return self.service.metadata(version)

    def model_config(self, version: str = "") -> dict[str, Any]:
        return self.service.model_config(version)

    def is_ready(self, version: str = "") -> bool:
        return self.service.is_ready(version)

    def state(self) -> dict[str, Any]:
        return self.service.state()

    async def statistics(self, version: str = "") -> list[dict[str, Any]]:
        """The model's statistics summed over all its replicas, as Triton reports a model."""
        context = serve.get_replica_context()
        handle = serve.get_deployment_handle(context.deployment, context.app_name)
        per_replica = await handle.broadcast("local_statistics", version).results_async(
            timeout_s=_STATISTICS_TIMEOUT_S
        )
        return merge_entries([entry for entries in per_replica for entry in entries])

    def local_statistics(self, version: str = "") -> list[dict[str, Any]]:
        """This replica's counters only."""
        return self.service.statistics(version)
