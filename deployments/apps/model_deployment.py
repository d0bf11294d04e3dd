"""The Serve deployment of one Triton model: one replica = one model instance.

Thin on purpose: a replica builds a :class:`SingleModel` from the scanned repository entry and
exposes it over HTTP (``__call__``) and to other deployments through handle methods (``infer``
for ensembles and BLS, ``infer_grpc`` for the gRPC frontend; metadata, readiness, state,
statistics). :class:`ServedModelDeployment` is that surface, shared with ensembles.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response
from tritonclient.grpc import model_config_pb2 as mc

from deployments.apps.batch_admission import serve_batch_admission
from deployments.apps.bls import install_bls
from deployments.core.served_model import ServedModel, VersionState
from deployments.core.single_model import SingleModel
from deployments.core.statistics import merge_entries
from deployments.grpc.model_infer import infer_serialized
from deployments.http.model_routes import ModelHttpEndpoints
from repo_adapter.backends import InstanceSpec
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.repository import RepositoryModel

_STATISTICS_TIMEOUT_S = 10.0


class ServedModelDeployment:
    """HTTP (``__call__``) and handle methods over one :class:`ServedModel`.

    Subclasses build the served model and pass it to :meth:`_serve`. Handle methods serve
    gRPC, ensembles, BLS and the server application.
    """

    served: ServedModel

    def _serve(self, served: ServedModel) -> None:
        self.served = served
        self._http = ModelHttpEndpoints(served, self.statistics)

    async def __call__(self, request: Request) -> Response:
        return await self._http.handle(request)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.served.infer(request)

    async def infer_grpc(self, message: bytes, stream: bool = False) -> bytes:
        """A serialized ``ModelInferRequest`` -> its serialized response (gRPC frontend)."""
        return await infer_serialized(self.served.infer, message, stream)

    def metadata(self, version: str = "") -> dict[str, Any]:
        return self.served.metadata(version)

    def model_config(self, version: str = "") -> dict[str, Any]:
        return self.served.model_config(version)

    def is_ready(self, version: str = "") -> bool:
        return self.served.is_ready(version)

    def state(self) -> dict[str, VersionState]:
        return self.served.state()

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
        return self.served.statistics(version)


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
    """This replica's model instance: named after its group and replica rank."""
    context = serve.get_replica_context()
    index = context.rank.rank if context.rank is not None else 0
    device = 0  # Ray sets CUDA_VISIBLE_DEVICES to the replica's GPU: it is always device 0
    return InstanceSpec(
        name=f"{spec.group_name}_{index}", kind=spec.instance_kind, device_id=device
    )


@serve.deployment
class TritonModel(ServedModelDeployment):
    """Serves one model (all its selected versions) from each replica."""

    def __init__(self, spec: ModelSpec) -> None:
        install_bls()  # before the backend loads: initialize() may make BLS calls already
        self.model = SingleModel(
            spec.config(),
            Path(spec.model_dir),
            spec.versions,
            spec.labels,
            _instance(spec),
            admission=serve_batch_admission,
        )
        self._serve(self.model)

    async def __del__(self) -> None:
        await self.model.close()
