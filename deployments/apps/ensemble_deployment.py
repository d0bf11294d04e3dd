"""The Serve deployment of one ensemble: an :class:`EnsembleModel` whose members are handles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from tritonclient.grpc import model_config_pb2 as mc

from deployments.apps.handles import ModelHandles
from deployments.apps.model_deployment import (
    ServedModelDeployment,
    spec_from_user_config,
    spec_to_user_config,
)
from deployments.apps.node_response_cache import NodeResponseStore, model_cache
from deployments.apps.repository_access import ControllerCaches
from deployments.core.ensemble_model import EnsembleModel
from deployments.core.served_model import ServedModel
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse


@dataclass
class EnsembleSpec:
    """What an ensemble replica needs; plain data (Serve's ``user_config``)."""

    name: str
    config_bytes: bytes
    versions: list[int]
    labels: dict[str, list[str]] = field(default_factory=dict)
    generation: str = ""

    def to_user_config(self) -> dict[str, Any]:
        return spec_to_user_config(self)

    @classmethod
    def from_user_config(cls, data: dict[str, Any]) -> EnsembleSpec:
        return spec_from_user_config(cls, data)


@serve.deployment
class TritonEnsemble(ServedModelDeployment):
    """Serves one ensemble; members are other applications' model deployments."""

    def __init__(self, name: str, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        self._members = ModelHandles()
        self._cache_store = NodeResponseStore(ControllerCaches())
        super().__init__(name, max_input_size)

    def build(self, user_config: dict[str, Any]) -> Callable[[], ServedModel]:
        spec = EnsembleSpec.from_user_config(user_config)
        config = mc.ModelConfig()
        config.ParseFromString(spec.config_bytes)

        def load() -> ServedModel:
            return EnsembleModel(
                config,
                spec.versions,
                spec.labels,
                self._call_member,
                self._stream_member,
                model_cache(config, spec.generation, self._cache_store),
            )

        return load

    async def _call_member(self, request: InferRequest) -> InferResponse:
        return await self._members.infer(request.model_name, request)

    def _stream_member(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        return self._members.infer_stream(request.model_name, request)
