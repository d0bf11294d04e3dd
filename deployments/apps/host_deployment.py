"""The shared model host: one Serve application whose replicas each serve many CPU models.

Route ``/v2/models``: the proxy sends it every model path no dedicated model application
(``/v2/models/<name>``, the longer prefix) claims, so a hosted model's requests reach the
replica that runs it in one hop, as a dedicated model's do. Paths of models it does not host
(``/v2/models/stats``, unknown or unavailable models) get the server's answers
(:class:`ServerHttpEndpoints`). Other deployments reach a hosted model through the same
:class:`~deployments.apps.replica_api.ModelReplicaApi` as a dedicated one
(:class:`deployments.apps.handles.ModelHandles` routes there).

The hosted set is the repository controller's (:class:`HostedSet`): a starting replica asks
for it and loads it before it takes requests, and the controller sends each change to every
running replica (``SharedHostApi.host_models``), which applies it in place
(:class:`ModelHost`). The host's Serve config does not change with the models: a Serve deploy
per change would reload HAProxy and update every handle's router in the cluster each time
(BENCHMARKS.md, issue 32). Each hosted model runs its instance group's ``count`` instances in
every host replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from ray import serve
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb

from deployments.apps.batch_admission import serve_batch_admission
from deployments.apps.bls import install_bls
from deployments.apps.ensemble_deployment import EnsembleSpec
from deployments.apps.handles import (
    HOST_APP_NAME,
    HOST_DEPLOYMENT_NAME,
    ModelHandles,
    ask_own_replicas,
)
from deployments.apps.http_ingress import HttpIngress
from deployments.apps.model_deployment import ModelSpec, spec_generation
from deployments.apps.node_response_cache import NodeResponseStore, model_cache
from deployments.apps.region_hops import ReplicaRegionHops
from deployments.apps.replica_api import ModelReplicaApi
from deployments.apps.replica_control import ControlledReplica, ReplicaControl
from deployments.apps.repository_access import (
    ControllerCaches,
    ControllerHosting,
    cluster_server_core,
)
from deployments.apps.shared_memory_access import replica_regions
from deployments.apps.trace_control import controller_trace_setting
from deployments.core.ensemble_model import EnsembleModel
from deployments.core.model_host import HostedSet, ModelHost
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
from deployments.grpc.routing import InferRoute
from deployments.grpc.servicer import TritonGrpcServicer
from deployments.http import region_calls
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.model_routes import ModelHttpEndpoints
from deployments.http.server_routes import ServerHttpEndpoints
from deployments.observability.statistics import ModelStatistics, merge_entries
from repo_adapter.backends import InstanceSpec
from repo_adapter.config import ConfigDocument
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.request_validation import model_not_found
from repo_adapter.response_stream import StreamedResponse

HOST_ROUTE_PREFIX = "/v2/models"
# How often a host replica checks it has the controller's latest hosted set
CATCH_UP_INTERVAL_S = 2.0
STARTUP_READS = 3  # tries of the first read of the hosted set
logger = logging.getLogger(__name__)
__all__ = ["HOST_APP_NAME", "HOST_DEPLOYMENT_NAME", "TritonModelHost", "hosted_entry"]


def hosted_entry(spec: ModelSpec | EnsembleSpec) -> dict[str, Any]:
    """One model of the host's ``user_config``."""
    kind = "ensemble" if isinstance(spec, EnsembleSpec) else "model"
    return {"kind": kind, "spec": spec.to_user_config()}


def instance_count(config: mc.ModelConfig) -> int:
    """Instances Triton runs for a CPU model: the sum of its groups' counts (at least one)."""
    return max(sum(max(group.count, 1) for group in config.instance_group), 1)


@serve.deployment
class TritonModelHost(HttpIngress, ControlledReplica):
    """Serves the hosted models over HTTP, gRPC and to other deployments."""

    def __init__(self, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        super().__init__(max_input_size)
        self.host = ModelHost()
        self.control = ReplicaControl(
            lambda: sorted(self.host.slots),
            self.host.metrics,
            ingress_address=lambda: self.direct_address,
        )
        # Hosted python models make BLS calls like dedicated ones; to a co-hosted model, here.
        install_bls(local_model=self._ready_slot)
        self._members = ModelHandles()
        self._endpoints: dict[str, ModelHttpEndpoints] = {}
        core = cluster_server_core()
        self._server = ServerHttpEndpoints(core, self._members.http)
        self._grpc = TritonGrpcServicer(core)
        self._region_hops = ReplicaRegionHops()
        self._routed = RoutedCalls(self._region_hops)
        self._cache_store = NodeResponseStore(ControllerCaches())
        self._started = False
        self._hosting = ControllerHosting()
        self._revision = -1  # of the hosted set applied last
        self._applying = asyncio.Lock()  # one hosted set at a time

    # ------------------------------------------------------------------ the hosted set

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Serve calls this as the replica starts: it loads the controller's hosted set
        before taking requests."""
        self.control.adopt_controller_settings()  # once: the first call starts the replica
        if not self._started:
            await self._apply(await self._first_hosted_set())
            self._started = True
            self._catching_up = asyncio.get_running_loop().create_task(self._catch_up())

    async def _first_hosted_set(self) -> HostedSet:
        """The controller's hosted set as this replica starts; a read that timed out is tried
        again on a new handle (a handle whose router stopped hearing from Serve never
        answers) before the replica gives up."""
        for _ in range(STARTUP_READS - 1):
            try:
                return await self._hosting.hosted_set()
            except InferenceServerError:
                logger.warning("the controller did not answer with the hosted set; again")
        return await self._hosting.hosted_set()

    async def _catch_up(self) -> None:
        """Take a change sent while this replica was starting (Serve's broadcast reaches
        running replicas only): compare revisions with the controller now and then."""
        while True:
            await asyncio.sleep(CATCH_UP_INTERVAL_S)
            try:
                if await self._hosting.hosted_revision() > self._revision:
                    await self._apply(await self._hosting.hosted_set())
            except Exception as err:  # the controller busy or restarting: next time
                logger.debug("hosted set not checked: %r", err)

    async def host_models(self, hosted: HostedSet) -> None:
        """The controller's new hosted set: load, reload and remove in place (loads run in
        the background; the models already hosted keep serving meanwhile)."""
        await self._apply(hosted)

    async def _apply(self, hosted: HostedSet) -> None:
        async with self._applying:
            if hosted.revision <= self._revision:
                return  # an older set than the one applied (sent before it, arrived after)
            self._revision = hosted.revision
            models = hosted.models
            wanted = {name: self._builder(name, entry) for name, entry in models.items()}
            measured = {
                name
                for name, entry in models.items()
                if entry["kind"] != "ensemble"
                and ModelSpec.from_user_config(entry["spec"]).measure_footprint
            }
            # Endpoints after: a model still on its first load is left to the server's routes.
            await self.host.apply(wanted, wait=not self._started, measured=measured)
            self._follow(models)

    def _follow(self, models: dict[str, dict[str, Any]]) -> None:
        """Each hosted model's traffic policy (in place), and the HTTP routes of all."""
        for name, entry in models.items():
            if entry["kind"] != "ensemble":  # in place: a changed policy alone loads nothing
                self.host.slot(name).steer(
                    ModelSpec.from_user_config(entry["spec"]).traffic_policy()
                )
        self._endpoints = {
            name: ModelHttpEndpoints(
                self.host.slot(name),
                self._statistics_of(name),
                controller_trace_setting,
                replica_regions(),
                self._region_hops,
            )
            for name in models
        }

    def _builder(self, name: str, entry: dict[str, Any]) -> tuple[str, Callable[[], ServedModel]]:
        if entry["kind"] == "ensemble":
            ensemble = EnsembleSpec.from_user_config(entry["spec"])
            config = mc.ModelConfig()
            config.ParseFromString(ensemble.config_bytes)

            def load_ensemble() -> ServedModel:
                return EnsembleModel(
                    config,
                    ensemble.versions,
                    ensemble.labels,
                    self._call_member,
                    self._stream_member,
                    model_cache(config, ensemble.generation, self._cache_store),
                )

            return spec_generation(entry["spec"]), load_ensemble
        spec = ModelSpec.from_user_config(entry["spec"])

        def load_model() -> ServedModel:
            config = spec.config()
            instances = [
                InstanceSpec(
                    name=f"{spec.group_name}_{i}",
                    kind="CPU",
                    device_id=0,
                    own_process=spec.python_stubs,
                )
                for i in range(instance_count(config))
            ]
            return SingleModel(
                config,
                Path(spec.model_dir),
                spec.versions,
                spec.labels,
                instances,
                admission=serve_batch_admission if spec.serve_batch else None,
                backend_file=spec.backend_file_path(),
                backend_config=spec.backend_config,
                cache=model_cache(config, spec.generation, self._cache_store),
            )

        return spec_generation(entry["spec"]), load_model

    def _ready_slot(self, model: str) -> Any | None:
        """``model``'s slot where this replica hosts it and it is ready, else None."""
        slot = self.host.slots.get(model)
        return slot if slot is not None and slot.is_ready() else None

    async def _call_member(self, request: InferRequest) -> InferResponse:
        slot = self._ready_slot(request.model_name)
        if slot is not None:
            return await slot.infer(request)  # a member in this process: no hop
        return await self._members.infer(request.model_name, request)

    def _stream_member(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        slot = self._ready_slot(request.model_name)
        if slot is not None:
            return slot.infer_stream(request)
        return self._members.infer_stream(request.model_name, request)

    # ------------------------------------------------------------------ HTTP

    def _serving_slot(self, model: str) -> ModelSlot | None:
        """``model``'s slot once it serves here: a model still on its first load is left to
        the server's routes, which wait for it where it loads on demand."""
        slot = self.host.slots.get(model)
        return slot if slot is not None and slot.serving is not None else None

    async def handle_http(self, request: HttpRequest) -> HttpReply:
        if request.path == region_calls.GRPC_PATH:  # from another replica of the host
            return await region_calls.answer_grpc(request, self._infer_hopped_grpc)
        parts = request.path.split("/", 4)  # "", "v2", "models", name, rest
        name = parts[3] if len(parts) > 3 else ""
        endpoints = self._endpoints.get(name) if self._serving_slot(name) else None
        if endpoints is None:
            return await self._server.handle(request)
        return await endpoints.handle(request)

    async def _infer_hopped_grpc(self, request: pb.ModelInferRequest) -> bytes:
        """A ``ModelInfer`` another host replica sent here, where the region it names is."""
        slot = self._serving_slot(request.model_name)
        if slot is None:
            raise model_not_found(request.model_name)
        return await infer_message(slot.infer, request)

    # ------------------------------------------------------------------ gRPC

    async def ModelInfer(  # the RPC's name: Serve's gRPC ingress calls it
        self, request: pb.ModelInferRequest, grpc_context: Any = None
    ) -> SerializedMessage:
        """Triton's ``ModelInfer`` from Serve's gRPC ingress: HAProxy sends here each model
        without an application of its own (cluster/grpc_routing.py)."""
        return await answer_grpc(self._infer_grpc(request), grpc_context)

    async def infer_grpc_message(self, message: bytes) -> bytes:
        """A unary ``ModelInfer`` HAProxy sent here over HTTP/1.1 (grpc/over_http.py)."""
        return await self._infer_grpc(parse_infer_request(message), message)

    async def _infer_grpc(self, request: pb.ModelInferRequest, message: bytes = b"") -> bytes:
        slot = self._serving_slot(request.model_name)
        if slot is not None:
            return await self._routed.infer(slot.infer, request)
        # Not hosted: unknown, unavailable, or just deployed on its own (HAProxy's routes lag
        # behind Serve's): answered as the gRPC frontend answers it.
        route = InferRoute(request.model_name, request.model_version, request.id)
        return await self._grpc.forward_infer(route, message or request.SerializeToString())

    async def ModelStreamInfer(  # the RPC's name: Serve's gRPC ingress calls it
        self, request_stream: AsyncIterator[pb.ModelInferRequest], grpc_context: Any = None
    ) -> AsyncIterator[SerializedMessage]:
        """Triton's ``ModelStreamInfer`` from Serve's gRPC ingress: HAProxy sends here a
        stream whose first request names a model without an application of its own. Each
        request is answered by the model it names: here, or where that model is deployed."""

        async for reply in self._routed.stream(
            request_stream, self._serving_slot, lambda: self._grpc.forward_stream
        ):
            yield reply

    # ------------------------------------------------------------------ ModelReplicaApi

    async def infer(self, model: str, request: InferRequest) -> InferResponse:
        return await self.host.slot(model).infer(request)

    async def infer_stream(
        self, model: str, request: InferRequest
    ) -> AsyncIterator[StreamedResponse]:
        async for item in self.host.slot(model).infer_stream(request):
            yield item

    async def infer_wire(self, model: str, message: bytes) -> bytes:
        return await self._routed.infer_wire(model, self.host.slot(model).infer, message)

    async def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]:
        async for reply in self._routed.stream_wire(self.host.slot(model), message):
            yield reply

    def metadata(self, model: str, version: str = "") -> ModelMetadata:
        return self.host.slot(model).metadata(version)

    def model_config(self, model: str, version: str = "") -> ConfigDocument:
        return self.host.slot(model).model_config(version)

    def is_ready(self, model: str, version: str = "") -> bool:
        return self.host.slot(model).is_ready(version)

    async def statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        """The model's statistics summed over every host replica."""
        self.host.slot(model)
        per_replica = await ask_own_replicas(ModelReplicaApi.local_statistics, model, version)
        return merge_entries([entry for entries in per_replica for entry in entries])

    def local_statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        return self.host.slot(model).statistics(version)

    def slot_status(self, model: str) -> SlotStatus:
        return self.host.slot(model).status()

    def hosted_statuses(self) -> dict[str, SlotStatus]:
        """Every hosted model's slot status in this replica (for the controller)."""
        return self.host.statuses()

    def _statistics_of(self, model: str) -> Callable[[str], Awaitable[list[ModelStatistics]]]:
        async def statistics(version: str = "") -> list[ModelStatistics]:
            return await self.statistics(model, version)

        return statistics

    async def __del__(self) -> None:
        catching_up = getattr(self, "_catching_up", None)
        if catching_up is not None:
            catching_up.cancel()
        await self.control.close()
        await self.host.close()
