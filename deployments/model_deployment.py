"""The Serve deployment of one Triton model: one replica = one model instance.

Thin on purpose: it builds a :class:`ModelService` from the scanned repository entry and
exposes it over HTTP (``__call__``) and to other deployments through handle methods
(``infer`` for gRPC, ensembles and BLS; metadata, readiness, state, statistics).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ray import serve
from tritonclient.grpc import model_config_pb2 as mc

from deployments.model_service import ModelService
from deployments.served_model import ServedModel
from repo_adapter.backends import InstanceSpec
from repo_adapter.repository import RepositoryModel


@dataclass
class ModelSpec:
    """What a replica needs to load a model; plain data so it pickles cheaply."""

    name: str
    model_dir: str
    config_bytes: bytes  # serialized normalised ModelConfig
    versions: list[int]
    labels: dict[str, list[str]] = field(default_factory=dict)
    instance_kind: str = "CPU"
    group_name: str = ""

    @classmethod
    def from_repository_model(
        cls, model: RepositoryModel, instance_kind: str, group_name: str
    ) -> ModelSpec:
        assert model.config is not None
        return cls(
            name=model.name,
            model_dir=str(model.path.resolve()),
            config_bytes=model.config.SerializeToString(),
            versions=list(model.versions),
            labels=model.labels,
            instance_kind=instance_kind,
            group_name=group_name or model.name,
        )

    def config(self) -> mc.ModelConfig:
        config = mc.ModelConfig()
        config.ParseFromString(self.config_bytes)
        return config


def _instance(spec: ModelSpec) -> InstanceSpec:
    try:
        context = serve.get_replica_context()
        index = context.rank.rank if context.rank is not None else 0
    except Exception:  # outside a replica (unit use): instance 0
        index = 0
    device = 0  # Ray sets CUDA_VISIBLE_DEVICES to the replica's GPU: it is always device 0
    return InstanceSpec(
        name=f"{spec.group_name}_{index}", kind=spec.instance_kind, device_id=device
    )


@serve.deployment
class TritonModel(ServedModel):
    """Serves one model (all its selected versions) from each replica."""

    def __init__(self, spec: ModelSpec) -> None:
        self.service = ModelService(
            spec.config(), Path(spec.model_dir), spec.versions, spec.labels, _instance(spec)
        )
        self._serve_http()

    async def __del__(self) -> None:
        await self.service.close()
