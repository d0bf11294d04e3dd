"""The Serve deployment of one ensemble: an :class:`EnsembleModel` whose members are handles."""

from __future__ import annotations

from dataclasses import dataclass, field

from ray import serve
from tritonclient.grpc import model_config_pb2 as mc

from deployments.apps.handles import ModelHandles
from deployments.apps.model_deployment import ServedModelDeployment
from deployments.core.ensemble_model import EnsembleModel
from repo_adapter.inference_types import InferRequest, InferResponse


@dataclass
class EnsembleSpec:
    """What an ensemble replica needs; plain data so it pickles cheaply."""

    name: str
    config_bytes: bytes
    versions: list[int]
    labels: dict[str, list[str]] = field(default_factory=dict)


@serve.deployment
class TritonEnsemble(ServedModelDeployment):
    """Serves one ensemble; members are other applications' model deployments."""

    def __init__(self, spec: EnsembleSpec) -> None:
        config = mc.ModelConfig()
        config.ParseFromString(spec.config_bytes)
        self._members = ModelHandles()
        self._serve(EnsembleModel(config, spec.versions, spec.labels, self._call_member))

    async def _call_member(self, request: InferRequest) -> InferResponse:
        return await self._members.call(request.model_name, "infer", request)
