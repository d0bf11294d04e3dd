"""The Serve deployment of one Triton model: one replica = one model instance.

Thin on purpose: a replica builds a :class:`SingleModel` from the spec Serve hands it as
``user_config`` (so a reload is an in-place reconfigure, not a new process) and exposes it
over HTTP (``__call__``), over gRPC from HAProxy through Serve's gRPC ingress (``ModelInfer``,
``ModelStreamInfer``), to other deployments through the
:class:`~deployments.apps.replica_api.ModelReplicaApi` and to the control plane through
:class:`~deployments.apps.replica_control.ControlledReplica`. :class:`ServedModelDeployment`
is that surface, shared with routers and ensembles.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ray import serve
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.apps.batch_admission import serve_batch_admission
from deployments.apps.bls import install_bls
from deployments.apps.handles import ask_own_replicas
from deployments.apps.http_ingress import HttpIngress
from deployments.apps.node_response_cache import NodeResponseStore, model_cache
from deployments.apps.region_hops import ReplicaRegionHops
from deployments.apps.replica_api import ModelReplicaApi
from deployments.apps.replica_control import ControlledReplica, ReplicaControl
from deployments.apps.repository_access import ControllerCaches, cluster_server_core
from deployments.apps.sequence_directory import replica_sequence_routing, routes_sequences
from deployments.apps.shared_memory_access import replica_regions
from deployments.apps.trace_control import controller_trace_setting
from deployments.core.model_slot import ModelSlot, SlotStatus
from deployments.core.served_model import ModelMetadata, ServedModel
from deployments.core.single_model import SingleModel
from deployments.grpc.model_infer import (
    RoutedCalls,
    SerializedMessage,
    answer_grpc,
    infer_message,
    parse_infer_request,
)
from deployments.grpc.servicer import TritonGrpcServicer
from deployments.http import region_calls, sequence_calls
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.model_routes import ModelHttpEndpoints
from deployments.observability.queue_signals import QueueSignals
from deployments.observability.statistics import ModelStatistics, merge_entries
from repo_adapter.backends import InstanceSpec
from repo_adapter.config import ConfigDocument
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.repository import RepositoryModel
from repo_adapter.request_validation import model_not_found
from repo_adapter.response_stream import StreamedResponse
from repo_adapter.version_traffic import TrafficPolicy, policy_from_spec


class ServedModelDeployment(HttpIngress, ControlledReplica):
    """HTTP (``__call__``), gRPC and the :class:`ModelReplicaApi` over the replica's
    :class:`ModelSlot`, for the deployments that serve one model each.

    Subclasses build their model from the spec Serve passes as ``user_config``
    (:meth:`reconfigure`), so a changed model reaches running replicas in place: the new
    generation loads beside the serving one and takes over once loaded (see
    :mod:`deployments.core.model_slot`).
    """

    def __init__(self, name: str, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        self.slot = ModelSlot(name)
        self.control = ReplicaControl(
            self.held_models, self.slot.metrics, ingress_address=lambda: self.direct_address
        )
        super().__init__(max_input_size)
        region_hops = ReplicaRegionHops()
        self._http = ModelHttpEndpoints(
            self.slot,
            self._statistics_here,
            controller_trace_setting,
            replica_regions(),
            region_hops,
        )
        self._forwarder: TritonGrpcServicer | None = None
        self._routed = RoutedCalls(region_hops)
        self._queue_signals = QueueSignals()

    def build(self, user_config: dict[str, Any]) -> Callable[[], ServedModel]:
        """How to build the model ``user_config`` describes."""
        raise NotImplementedError

    def held_models(self) -> list[str]:
        return [self.slot.name]

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        self.control.adopt_controller_settings()  # once: the first call starts the replica
        build = self.build(user_config)
        traffic = self.traffic(user_config)
        if traffic is not None:  # in place: a changed policy alone loads nothing
            self.slot.steer(traffic)
        await self.slot.load(
            spec_generation(user_config), build, self.measures_footprint(user_config)
        )

    def measures_footprint(self, user_config: dict[str, Any]) -> bool:
        """Whether the load ``user_config`` asks for measures the memory it adds."""
        return False

    def traffic(self, user_config: dict[str, Any]) -> TrafficPolicy | None:
        """The traffic policy ``user_config`` sets (None: the model has none)."""
        return None

    def _slot(self, model: str) -> ModelSlot:
        if model != self.slot.name:  # a caller's routing bug, answered as Triton would
            raise model_not_found(model)
        return self.slot

    # ------------------------------------------------------------------ HTTP and gRPC

    async def handle_http(self, request: HttpRequest) -> HttpReply:
        if request.path.startswith(sequence_calls.PATHS):  # from a replica of this model
            return await sequence_calls.answer(request, self.slot)
        if request.path == region_calls.GRPC_PATH:  # from a replica of this model
            return await region_calls.answer_grpc(request, self._infer_hopped_grpc)
        return await self._http.handle(request)

    async def _infer_hopped_grpc(self, request: pb.ModelInferRequest) -> bytes:
        """A ``ModelInfer`` another replica sent here, where the region it names is."""
        return await infer_message(self._slot(request.model_name).infer, request)

    async def infer_grpc_message(self, message: bytes) -> bytes:
        """A unary ``ModelInfer`` HAProxy sent here over HTTP/1.1 (grpc/over_http.py)."""
        return await self._routed.infer(self.slot.infer, parse_infer_request(message))

    async def ModelInfer(  # the RPC's name: Serve's gRPC ingress calls it
        self, request: pb.ModelInferRequest, grpc_context: Any = None
    ) -> SerializedMessage:
        """Triton's ``ModelInfer`` straight from Serve's gRPC ingress (HAProxy routed it here
        by its model name: see cluster/grpc_routing.py)."""
        return await answer_grpc(self._routed.infer(self.slot.infer, request), grpc_context)

    async def ModelStreamInfer(  # the RPC's name: Serve's gRPC ingress calls it
        self, request_stream: AsyncIterator[pb.ModelInferRequest], grpc_context: Any = None
    ) -> AsyncIterator[SerializedMessage]:
        """Triton's ``ModelStreamInfer`` straight from Serve's gRPC ingress (HAProxy routed
        the stream here by the model its first request names). A later request naming
        another model is answered by that model, through its deployment."""

        def local(model: str) -> ModelSlot | None:
            return self.slot if model == self.slot.name else None

        async for reply in self._routed.stream(
            request_stream, local, lambda: self._other_models().forward_stream
        ):
            yield reply

    def _other_models(self) -> TritonGrpcServicer:
        """How this replica reaches the other models, as the gRPC frontend does (made on
        first use: most streams name one model)."""
        if self._forwarder is None:
            self._forwarder = TritonGrpcServicer(cluster_server_core())
        return self._forwarder

    # ------------------------------------------------------------------ ModelReplicaApi

    async def infer(self, model: str, request: InferRequest) -> InferResponse:
        return await self._slot(model).infer(request)

    async def infer_stream(
        self, model: str, request: InferRequest
    ) -> AsyncIterator[StreamedResponse]:
        async for item in self._slot(model).infer_stream(request):
            yield item

    async def infer_wire(self, model: str, message: bytes) -> bytes:
        return await self._routed.infer_wire(model, self._slot(model).infer, message)

    async def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]:
        async for reply in self._routed.stream_wire(self._slot(model), message):
            yield reply

    async def infer_sequence(
        self, model: str, request: InferRequest, sequence_replica: str
    ) -> InferResponse:
        """A sequence's request another replica of this deployment forwarded to replica
        ``sequence_replica``, the one holding the sequence (see sequence_directory.py)."""
        return await self._slot(model).infer_forwarded(request, sequence_replica)

    async def infer_sequence_stream(
        self, model: str, request: InferRequest, sequence_replica: str
    ) -> AsyncIterator[StreamedResponse]:
        """As :meth:`infer_sequence`, for a decoupled sequence model's responses."""
        async for item in self._slot(model).stream_forwarded(request, sequence_replica):
            yield item

    async def drop_sequence(self, model: str, sequence: str, sequence_replica: str) -> None:
        """``sequence`` started again on another replica (see sequence_directory.py)."""
        self._slot(model).drop_sequence(sequence, sequence_replica)

    def metadata(self, model: str, version: str = "") -> ModelMetadata:
        return self._slot(model).metadata(version)

    def model_config(self, model: str, version: str = "") -> ConfigDocument:
        return self._slot(model).model_config(version)

    def is_ready(self, model: str, version: str = "") -> bool:
        return self._slot(model).is_ready(version)

    async def statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        self._slot(model)
        return await self._statistics_here(version)

    async def _statistics_here(self, version: str = "") -> list[ModelStatistics]:
        """The model's statistics summed over all its replicas, as Triton reports a model."""
        per_replica = await ask_own_replicas(
            ModelReplicaApi.local_statistics, self.slot.name, version
        )
        return merge_entries([entry for entries in per_replica for entry in entries])

    def local_statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        return self._slot(model).statistics(version)

    def slot_status(self, model: str) -> SlotStatus:
        return self._slot(model).status()

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's hook, called only where the model autoscales: Triton's queue signals for
        a policy on them (:mod:`cluster.queue_autoscaling`)."""
        return self._queue_signals.read(self.slot.metrics())

    async def __del__(self) -> None:
        await self.control.close()
        await self.slot.close()


def spec_to_user_config(spec: Any) -> dict[str, Any]:
    """A spec dataclass as Serve's ``user_config`` (JSON: the config travels as base64)."""
    data = asdict(spec)
    data["config_bytes"] = base64.b64encode(spec.config_bytes).decode()
    return data


def spec_generation(user_config: dict[str, Any]) -> str:
    """The generation a spec's ``user_config`` loads: the repository's fingerprint it carries,
    else a digest of its content (a spec built without the repository)."""
    generation = user_config.get("generation")
    if generation:
        return str(generation)
    # A changed traffic policy is applied in place, never as a new generation.
    content = {key: value for key, value in user_config.items() if key != "traffic"}
    text = json.dumps(content, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spec_from_user_config(cls: type, data: dict[str, Any]) -> Any:
    """The spec dataclass ``cls`` back from its ``user_config``."""
    data = dict(data)
    data["config_bytes"] = base64.b64decode(data["config_bytes"])
    return cls(**data)


@dataclass(frozen=True)
class InstanceOptions:
    """How replicas run their models' instances, as the server was started."""

    python_stubs: bool = False  # python instances run in stub processes of their own
    # Requests are admitted through ``@serve.batch`` (its batch metrics on the Ray dashboard)
    # before the batcher's queue; False: straight into the queue (cheaper per request).
    serve_batch: bool = False

    @classmethod
    def from_settings(cls, python_instances: str, batch_admission: str) -> InstanceOptions:
        """From ``--python-instances`` and ``--batch-admission``."""
        return cls(
            python_stubs=python_instances == "stub-process",
            serve_batch=batch_admission == "serve-batch",
        )


DEFAULT_INSTANCES = InstanceOptions()


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
    python_stubs: bool = False  # python instances run in stub processes of their own
    serve_batch: bool = False  # admission through @serve.batch (InstanceOptions)
    # A backend rayton does not have, as scanned: a C/C++ library or a python-based model.py
    backend_file: str = ""
    backend_config: dict[str, str] = field(default_factory=dict)  # that library's settings
    # The traffic policy the repository API set (TrafficPolicy.to_json); None: the config's
    traffic: dict[str, Any] | None = None
    # Measure the memory its load adds (for a memory budget; a declared footprint needs none)
    measure_footprint: bool = False

    @classmethod
    def from_repository_model(
        cls,
        model: RepositoryModel,
        instance_kind: str,
        group_name: str,
        generation: str = "",
        pinned_gpu: int | None = None,
        gpu_memory_fraction: float = 0.0,
        instances: InstanceOptions = DEFAULT_INSTANCES,
        traffic: TrafficPolicy | None = None,
        measure_footprint: bool = False,
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
            python_stubs=instances.python_stubs,
            serve_batch=instances.serve_batch,
            backend_file=str(model.backend_file or ""),
            backend_config=dict(model.backend_config),
            traffic=traffic.to_json() if traffic is not None else None,
            measure_footprint=measure_footprint,
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

    def traffic_policy(self) -> TrafficPolicy:
        """The traffic policy the replica follows: the repository API's, else the config's."""
        return policy_from_spec(self.traffic, self.config())

    def backend_file_path(self) -> Path | None:
        """The backend file the scan found (None: a backend of rayton's)."""
        return Path(self.backend_file) if self.backend_file else None


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
        own_process=spec.python_stubs,
    )


@serve.deployment
class TritonModel(ServedModelDeployment):
    """Serves one model (all its selected versions) from each replica."""

    def __init__(self, name: str, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        install_bls()  # before the backend loads: initialize() may make BLS calls already
        super().__init__(name, max_input_size)
        self.cache_store = NodeResponseStore(ControllerCaches())

    def build(self, user_config: dict[str, Any]) -> Callable[[], ServedModel]:
        spec = ModelSpec.from_user_config(user_config)
        instance = _instance(spec)
        config = spec.config()
        if routes_sequences(config) and self.slot.sequences is None:
            idle_s = config.sequence_batching.max_sequence_idle_microseconds / 1e6
            self.slot.sequences = replica_sequence_routing(
                spec.name, idle_s, lambda: self.direct_address
            )

        def load() -> ServedModel:
            return SingleModel(
                spec.config(),
                Path(spec.model_dir),
                spec.versions,
                spec.labels,
                instance,
                admission=serve_batch_admission if spec.serve_batch else None,
                backend_file=spec.backend_file_path(),
                backend_config=spec.backend_config,
                cache=model_cache(config, spec.generation, self.cache_store),
            )

        return load

    def traffic(self, user_config: dict[str, Any]) -> TrafficPolicy | None:
        return ModelSpec.from_user_config(user_config).traffic_policy()

    def measures_footprint(self, user_config: dict[str, Any]) -> bool:
        return ModelSpec.from_user_config(user_config).measure_footprint
