"""``inference.GRPCInferenceService``: Triton's gRPC API answered from rayton's deployments.

Model RPCs go to each model's deployment through its handle (``infer_grpc``, ``metadata``,
``model_config``, ``is_ready``, ``statistics``); server-wide RPCs (health, metadata, repository
index, load/unload, statistics of all models) share :class:`~deployments.core.server_core.
ServerCore` with the HTTP server routes, so both protocols answer alike. Inference requests
stay wire bytes here: :mod:`deployments.grpc.routing` reads only the model name and version.
Errors are :class:`InferenceServerError` mapped to gRPC status codes as Triton maps them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from deployments.core.server_core import ServerCore
from deployments.core.shared_memory import CudaRegion, MemoryKind, check_region_name
from deployments.grpc import codec
from deployments.grpc.routing import InferRoute, read_infer_route
from deployments.grpc.streams import (
    SequenceTurns,
    error_reply,
    replies_or_error,
    stream_replies,
)
from repo_adapter.errors import InferenceServerError, StatusCode

logger = logging.getLogger(__name__)

_REPOSITORY_NAME = "'repository_name' specification is not supported"


def _rpc(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Answer errors with their gRPC status instead of letting grpc report UNKNOWN."""

    @functools.wraps(method)
    async def wrapper(self: TritonGrpcServicer, request: Any, context: Any) -> Any:
        try:
            return await method(self, request, context)
        except InferenceServerError as err:
            error: BaseException = err
        except Exception as err:
            logger.exception("gRPC %s failed", method.__name__)
            error = err
        code, details = codec.grpc_status(error)
        await context.abort(code, details)

    return wrapper


def _single_repository(request: Any) -> None:
    """Repository RPCs name no repository: rayton serves one (Triton's answer otherwise)."""
    if request.repository_name:
        raise InferenceServerError(_REPOSITORY_NAME, StatusCode.UNSUPPORTED)


class TritonGrpcServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Every RPC of ``inference.GRPCInferenceService``, on a ``grpc.aio`` server."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core

    # ------------------------------------------------------------------ model calls

    async def _require_deployed(self, model: str, version: str, action: str) -> None:
        if await self.core.serves_now(model, action):
            return
        raise await self.core.undeployed_model_error(model, version, action)

    async def forward_infer(self, route: InferRoute, message: bytes) -> bytes:
        """Send a request's wire bytes to its model's replicas; returns theirs."""
        # Triton's order: version string, then the model; the replica checks the contents.
        version = codec.parse_model_version(route.model_version)
        await self._require_deployed(route.model_name, version, "infer")
        return await self.core.infer_wire(route.model_name, message)

    async def forward_stream(self, route: InferRoute, message: bytes) -> AsyncIterator[bytes]:
        """Send a stream request's wire bytes to its model's replicas; yields their replies."""
        version = codec.parse_model_version(route.model_version)
        await self._require_deployed(route.model_name, version, "infer")
        async for reply in self.core.infer_wire_stream(route.model_name, message):
            yield reply

    async def _model_call(
        self,
        model: str,
        version: str,
        call: Callable[[str, str], Awaitable[Any]],
        action: str,
    ) -> Any:
        """``call(model, version)`` (a :class:`ServerCore` model method) for a deployed model;
        ``action`` names the request kind for Triton's error when it is not deployed."""
        version = codec.parse_model_version(version)
        await self._require_deployed(model, version, action)
        return await call(model, version)

    # ------------------------------------------------------------------ health and metadata

    @_rpc
    async def ServerLive(self, request: pb.ServerLiveRequest, context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    @_rpc
    async def ServerReady(self, request: pb.ServerReadyRequest, context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self.core.server_ready())

    @_rpc
    async def ModelReady(self, request: pb.ModelReadyRequest, context) -> pb.ModelReadyResponse:
        # Core's TRITONSERVER_ServerModelIsReady: an unknown, unavailable or unloaded model or
        # version is "not ready", not an error (2.51, and again since core#508 in 26.07).
        version = codec.parse_model_version(request.version)
        if not await self.core.is_deployed(request.name):
            return pb.ModelReadyResponse(ready=False)
        ready = await self.core.model_ready(request.name, version)
        return pb.ModelReadyResponse(ready=bool(ready))

    @_rpc
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context
    ) -> pb.ServerMetadataResponse:
        return codec.server_metadata_response(await self.core.server_metadata())

    @_rpc
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context
    ) -> pb.ModelMetadataResponse:
        metadata = await self._model_call(
            request.name, request.version, self.core.model_metadata, ""
        )
        return codec.model_metadata_response(metadata)

    @_rpc
    async def ModelConfig(self, request: pb.ModelConfigRequest, context) -> pb.ModelConfigResponse:
        config = await self._model_call(
            request.name, request.version, self.core.model_config, "config"
        )
        return codec.model_config_response(config)

    @_rpc
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context
    ) -> pb.ModelStatisticsResponse:
        if not request.name:
            codec.parse_model_version(request.version)
            return codec.statistics_response(await self.core.all_statistics())
        entries = await self._model_call(
            request.name, request.version, self.core.model_statistics, "stats"
        )
        return codec.statistics_response(entries)

    # ------------------------------------------------------------------ inference

    @_rpc
    async def ModelInfer(self, message: bytes, context) -> bytes:
        return await self.forward_infer(read_infer_route(message), message)

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[bytes], context
    ) -> AsyncIterator[bytes]:
        """Each request's response messages (a decoupled model's several), in request
        order; errors don't end the stream (:mod:`deployments.grpc.streams`)."""
        turns = SequenceTurns()
        async for reply in stream_replies(
            request_iterator, lambda message: self._stream_one(message, turns)
        ):
            yield reply

    async def _stream_one(self, message: bytes, turns: SequenceTurns) -> AsyncIterator[bytes]:
        try:
            route = read_infer_route(message)
        except Exception as err:
            yield error_reply(err, "")
            return
        replies = self.forward_stream(route, message)
        key = (route.model_name, route.sequence_id)
        async for reply in replies_or_error(turns.in_turn(key, replies), route.id):
            yield reply

    # ------------------------------------------------------------------ model repository

    @_rpc
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context
    ) -> pb.RepositoryIndexResponse:
        _single_repository(request)
        return codec.repository_index_response(await self.core.repository_index(request.ready))

    @_rpc
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context
    ) -> pb.RepositoryModelLoadResponse:
        _single_repository(request)
        for key, value in request.parameters.items():
            kind = value.WhichOneof("parameter_choice")
            if key == "config" and kind != "string_param":
                expected = "string_param"
            elif key.startswith("file:") and kind != "bytes_param":
                expected = "bytes_param"
            elif key != "config" and not key.startswith("file:"):
                raise InferenceServerError(f"unrecognized load parameter '{key}'.")
            else:
                continue
            raise InferenceServerError(
                f"invalid value type for load parameter '{key}', expected {expected}."
            )
        config = None
        if "config" in request.parameters:
            config = request.parameters["config"].string_param
        files = {
            key: value.bytes_param
            for key, value in request.parameters.items()
            if key.startswith("file:")
        }
        await self.core.load(request.model_name, config, files)
        return pb.RepositoryModelLoadResponse()

    @_rpc
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context
    ) -> pb.RepositoryModelUnloadResponse:
        _single_repository(request)
        dependents = request.parameters.get("unload_dependents")
        if dependents is not None and dependents.WhichOneof("parameter_choice") != "bool_param":
            raise InferenceServerError(
                "invalid value type for 'unload_dependents' parameter, expected bool_param."
            )
        await self.core.unload(request.model_name, bool(dependents and dependents.bool_param))
        return pb.RepositoryModelUnloadResponse()

    @_rpc
    async def LogSettings(self, request: pb.LogSettingsRequest, context) -> pb.LogSettingsResponse:
        changes = {
            key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
            for key, value in request.settings.items()
        }
        if changes:
            settings = await self.core.update_log_settings(changes)
        else:
            settings = await self.core.log_settings()
        response = pb.LogSettingsResponse()
        for key, value in settings.items():
            entry = response.settings[key]
            if isinstance(value, bool):
                entry.bool_param = value
            elif isinstance(value, int):
                entry.uint32_param = value
            else:
                entry.string_param = value
        return response

    @_rpc
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context
    ) -> pb.TraceSettingResponse:
        changes: dict[str, Any] = {}
        for key, setting in request.settings.items():
            values = list(setting.value)
            if key == "trace_level":
                changes[key] = values or None
            elif len(values) > 1:
                raise InferenceServerError(f"expect only 1 value for '{key}'")
            else:
                changes[key] = values[0] if values else None
        settings = await self.core.trace_settings(request.model_name or None, changes or None)
        response = pb.TraceSettingResponse()
        for key, value in settings.items():
            response.settings[key].value.extend(value if isinstance(value, list) else [value])
        return response

    # ------------------------------------------------------------------ system shared memory

    @_rpc
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context
    ) -> pb.SystemSharedMemoryStatusResponse:
        response = pb.SystemSharedMemoryStatusResponse()
        for region in await self.core.shared_memory_status(MemoryKind.SYSTEM, request.name):
            status = response.regions[region.name]
            status.name, status.key = region.name, region.key
            status.offset, status.byte_size = region.offset, region.byte_size
        return response

    @_rpc
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context
    ) -> pb.SystemSharedMemoryRegisterResponse:
        check_region_name(request.name, MemoryKind.SYSTEM)
        await self.core.register_system_shared_memory(
            request.name, request.key, request.offset, request.byte_size
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_rpc
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self.core.unregister_shared_memory(MemoryKind.SYSTEM, request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # ------------------------------------------------------------------ CUDA shared memory

    @_rpc
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context
    ) -> pb.CudaSharedMemoryStatusResponse:
        response = pb.CudaSharedMemoryStatusResponse()
        for region in await self.core.shared_memory_status(MemoryKind.CUDA, request.name):
            assert isinstance(region, CudaRegion)
            status = response.regions[region.name]
            status.name, status.device_id = region.name, region.device_id
            status.byte_size = region.byte_size
        return response

    @_rpc
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context
    ) -> pb.CudaSharedMemoryRegisterResponse:
        check_region_name(request.name, MemoryKind.CUDA)
        if request.device_id < 0:
            raise InferenceServerError(
                "failed to register shared memory region: invalid args: "
                f"device id {request.device_id}"
            )
        await self.core.register_cuda_shared_memory(
            request.name, request.raw_handle, request.device_id, request.byte_size
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @_rpc
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self.core.unregister_shared_memory(MemoryKind.CUDA, request.name)
        return pb.CudaSharedMemoryUnregisterResponse()


_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
# Inference RPCs stay wire bytes in the frontend: it reads the model name to route them and
# the model's replica decodes them (deployments.grpc.model_infer).
_WIRE_BYTES_METHODS = frozenset({"ModelInfer", "ModelStreamInfer"})


def add_servicer_to_server(servicer: TritonGrpcServicer, server: grpc.aio.Server) -> None:
    """Register every RPC of the service, as the generated ``add_..._to_server`` does, except
    that the inference RPCs receive and return serialized messages."""
    handlers = {}
    for method in _SERVICE.methods:
        wire_bytes = method.name in _WIRE_BYTES_METHODS
        request_type = getattr(pb, method.input_type.name)
        response_type = getattr(pb, method.output_type.name)
        if method.client_streaming and method.server_streaming:
            make_handler = grpc.stream_stream_rpc_method_handler
        elif not (method.client_streaming or method.server_streaming):
            make_handler = grpc.unary_unary_rpc_method_handler
        else:  # the service has none; fail loudly should a newer schema add one
            raise NotImplementedError(f"half-streaming RPC {method.full_name}")
        handlers[method.name] = make_handler(
            getattr(servicer, method.name),
            request_deserializer=None if wire_bytes else request_type.FromString,
            response_serializer=None if wire_bytes else response_type.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),)
    )


# ---------------------------------------------------------------------------------------------
# grpc.health.v1.Health/Check, as Triton serves it (SERVING when the server is ready)

_HEALTH_SERVICE = "grpc.health.v1.Health"
_SERVING, _NOT_SERVING = 1, 2  # HealthCheckResponse.ServingStatus


def health_handler(core: ServerCore) -> grpc.GenericRpcHandler:
    """``grpc.health.v1.Health/Check`` without the grpcio-health-checking package.

    ``HealthCheckResponse`` is one enum field (number 1), so the reply is written by hand;
    the request's ``service`` name is ignored, as Triton ignores it.
    """

    async def check(request: bytes, context) -> bytes:
        status = _SERVING if await core.server_ready() else _NOT_SERVING
        return bytes((0x08, status))  # field 1, varint

    return grpc.method_handlers_generic_handler(
        _HEALTH_SERVICE,
        {
            "Check": grpc.unary_unary_rpc_method_handler(
                check, request_deserializer=None, response_serializer=None
            )
        },
    )
