"""The Serve deployment of one Triton model: one replica = one model instance.

Thin on purpose: a replica builds a :class:`SingleModel` from the spec Serve hands it as
``user_config`` (so a reload is an in-place reconfigure, not a new process) and exposes it
over HTTP (``__call__``), over gRPC from HAProxy through Serve's gRPC ingress (``ModelInfer``,
``ModelStreamInfer``), and to other deployments through handle methods (``infer`` for
ensembles and BLS, ``infer_grpc`` for the gRPC frontend; metadata, readiness, state,
statistics, ``slot_status`` for the repository controller). :class:`ServedModelDeployment` is
that surface, shared with ensembles.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.apps.batch_admission import serve_batch_admission
from deployments.apps.bls import install_bls
from deployments.apps.handles import ModelHandles
from deployments.apps.log_control import adopt_log_settings, apply_in_this_replica
from deployments.apps.replica_info import replica_info
from deployments.apps.repository_access import ControllerRepository
from deployments.apps.trace_control import adopt_trace_settings, controller_trace_setting
from deployments.apps.trace_control import apply_in_this_replica as apply_trace_table
from deployments.core.model_slot import ModelSlot
from deployments.core.served_model import ServedModel, VersionState
from deployments.core.server_core import ServerCore
from deployments.core.single_model import SingleModel
from deployments.core.statistics import merge_entries
from deployments.core.tracing import TRACER
from deployments.grpc.model_infer import (
    SerializedMessage,
    answer_grpc,
    infer_routed,
    infer_serialized,
    stream_routed,
)
from deployments.grpc.servicer import TritonGrpcServicer
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.http.model_routes import ModelHttpEndpoints
from repo_adapter.backends import InstanceSpec
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.python_backend import collect_metrics
from repo_adapter.repository import RepositoryModel

_STATISTICS_TIMEOUT_S = 10.0


async def adopt_controller_settings() -> None:
    """A starting replica takes the controller's log and trace settings."""
    await asyncio.gather(adopt_log_settings(), adopt_trace_settings())


class ServedModelDeployment:
    """HTTP (``__call__``) and handle methods over the replica's :class:`ModelSlot`.

    Subclasses build their model from the spec Serve passes as ``user_config``
    (:meth:`reconfigure`), so a changed model reaches running replicas in place: the new
    generation loads beside the serving one and takes over once loaded (see
    :mod:`deployments.core.model_slot`). Handle methods serve gRPC, ensembles, BLS, the
    server application and the repository controller (``slot_status``).
    """

    def __init__(self, name: str, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        self.slot = ModelSlot(name)
        self._http = ModelHttpEndpoints(
            self.slot, self.statistics, controller_trace_setting, max_input_size
        )
        self._log_settings_adopted = False
        self._forwarder: TritonGrpcServicer | None = None

    def build(self, user_config: dict[str, Any]) -> tuple[str, Callable[[], ServedModel]]:
        """The generation ``user_config`` describes and how to build its model."""
        raise NotImplementedError

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        if not self._log_settings_adopted:  # first call: the replica is starting
            self._log_settings_adopted = True
            self._adopting = asyncio.get_running_loop().create_task(adopt_controller_settings())
        generation, build = self.build(user_config)
        await self.slot.load(generation, build)

    def slot_status(self) -> dict[str, Any]:
        """This replica's generation, pending load and version states (for the controller)."""
        return self.slot.status().to_dict()

    async def __call__(self, request: Request) -> Response:
        return await self._http.handle(request)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.slot.infer(request)

    async def infer_grpc(self, message: bytes, stream: bool = False) -> bytes:
        """A serialized ``ModelInferRequest`` -> its serialized response (gRPC frontend)."""
        return await infer_serialized(self.slot.infer, message, stream)

    async def ModelInfer(  # the RPC's name: Serve's gRPC ingress calls it
        self, request: pb.ModelInferRequest, grpc_context: Any = None
    ) -> SerializedMessage:
        """Triton's ``ModelInfer`` straight from Serve's gRPC ingress (HAProxy routed it here
        by its model name: see cluster/grpc_routing.py)."""
        return await answer_grpc(infer_routed(self.slot.infer, request), grpc_context)

    async def ModelStreamInfer(  # the RPC's name: Serve's gRPC ingress calls it
        self, request_stream: AsyncIterator[pb.ModelInferRequest], grpc_context: Any = None
    ) -> AsyncIterator[SerializedMessage]:
        """Triton's ``ModelStreamInfer`` straight from Serve's gRPC ingress (HAProxy routed
        the stream here by the model its first request names). A later request naming
        another model is answered by that model, through its deployment."""

        def local(model: str):
            return self.slot.infer if model == self.slot.name else None

        async for reply in stream_routed(
            request_stream, local, lambda: self._other_models().forward_infer
        ):
            yield reply

    def _other_models(self) -> TritonGrpcServicer:
        """How this replica reaches the other models, as the gRPC frontend does (made on
        first use: most streams name one model)."""
        if self._forwarder is None:
            self._forwarder = TritonGrpcServicer(ServerCore(ModelHandles(), ControllerRepository()))
        return self._forwarder

    def metadata(self, version: str = "") -> dict[str, Any]:
        return self.slot.metadata(version)

    def model_config(self, version: str = "") -> dict[str, Any]:
        return self.slot.model_config(version)

    def is_ready(self, version: str = "") -> bool:
        return self.slot.is_ready(version)

    def state(self) -> dict[str, VersionState]:
        return self.slot.state()

    async def statistics(self, version: str = "") -> list[dict[str, Any]]:
        """The model's statistics summed over all its replicas, as Triton reports a model."""
        return await statistics_over_replicas("local_statistics", version)

    def apply_log_settings(self, settings: dict[str, Any]) -> None:
        """Triton's log settings, from the controller."""
        apply_in_this_replica(settings)

    def apply_trace_settings(self, table: dict[str, Any]) -> None:
        """Triton's trace settings, from the controller."""
        apply_trace_table(table)

    def replica_info(self) -> dict[str, Any]:
        """Where this replica runs (for ``rayton status``)."""
        return replica_info([self.slot.name])

    def metrics_snapshot(self) -> dict[str, Any]:
        """This replica's metric counters and its python models' own metrics."""
        return {"versions": self.slot.metrics(), "custom": collect_metrics()}

    def local_statistics(self, version: str = "") -> list[dict[str, Any]]:
        """This replica's counters only."""
        return self.slot.statistics(version)

    async def __del__(self) -> None:
        await TRACER.flush()
        await self.slot.close()


async def statistics_over_replicas(method: str, *args: Any) -> list[dict[str, Any]]:
    """Statistics entries from ``method`` on every replica of this deployment, merged."""
    context = serve.get_replica_context()
    handle = serve.get_deployment_handle(context.deployment, context.app_name)
    per_replica = await handle.broadcast(method, *args).results_async(
        timeout_s=_STATISTICS_TIMEOUT_S
    )
    return merge_entries([entry for entries in per_replica for entry in entries])


def spec_to_user_config(spec: Any) -> dict[str, Any]:
    """A spec dataclass as Serve's ``user_config`` (JSON: the config travels as base64)."""
    data = asdict(spec)
    data["config_bytes"] = base64.b64encode(spec.config_bytes).decode()
    return data


def spec_from_user_config(cls: type, data: dict[str, Any]) -> Any:
    """The spec dataclass ``cls`` back from its ``user_config``."""
    data = dict(data)
    data["config_bytes"] = base64.b64decode(data["config_bytes"])
    return cls(**data)


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
    generation: str = ""  # the repository's fingerprint of what this spec loads
    pinned_gpu: int | None = None  # the GPU index of the node this replica must use
    gpu_memory_fraction: float = 0.0  # its share of the GPU's memory (0: no cap)

    @classmethod
    def from_repository_model(
        cls,
        model: RepositoryModel,
        instance_kind: str,
        group_name: str,
        generation: str = "",
        pinned_gpu: int | None = None,
        gpu_memory_fraction: float = 0.0,
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
            generation=generation,
            pinned_gpu=pinned_gpu,
            gpu_memory_fraction=gpu_memory_fraction,
        )

    def to_user_config(self) -> dict[str, Any]:
        return spec_to_user_config(self)

    @classmethod
    def from_user_config(cls, data: dict[str, Any]) -> ModelSpec:
        return spec_from_user_config(cls, data)

    def config(self) -> mc.ModelConfig:
        config = mc.ModelConfig()
        config.ParseFromString(self.config_bytes)
        return config


def _instance(spec: ModelSpec) -> InstanceSpec:
    """This replica's model instance: named after its group and replica rank.

    Its GPU is always device 0: Ray sets ``CUDA_VISIBLE_DEVICES`` to the GPU it gave the
    replica, and a pinned replica makes its pinned GPU the only visible one (before any
    runtime initialises CUDA), as Ray cannot hand out a chosen index (see cluster/placement.py).
    """
    context = serve.get_replica_context()
    index = context.rank.rank if context.rank is not None else 0
    if spec.instance_kind == "GPU" and spec.pinned_gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(spec.pinned_gpu)
    return InstanceSpec(
        name=f"{spec.group_name}_{index}",
        kind=spec.instance_kind,
        device_id=0,
        gpu_memory_fraction=spec.gpu_memory_fraction,
    )


@serve.deployment
class TritonModel(ServedModelDeployment):
    """Serves one model (all its selected versions) from each replica."""

    def __init__(self, name: str, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        install_bls()  # before the backend loads: initialize() may make BLS calls already
        super().__init__(name, max_input_size)

    def build(self, user_config: dict[str, Any]) -> tuple[str, Callable[[], ServedModel]]:
        spec = ModelSpec.from_user_config(user_config)
        instance = _instance(spec)

        def load() -> ServedModel:
            return SingleModel(
                spec.config(),
                Path(spec.model_dir),
                spec.versions,
                spec.labels,
                instance,
                admission=serve_batch_admission,
            )

        return spec.generation or _digest(user_config), load


def _digest(user_config: dict[str, Any]) -> str:
    """A generation for a spec that carries none (built without the repository's fingerprint)."""
    text = json.dumps(user_config, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
