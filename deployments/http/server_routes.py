"""HTTP routes of the server as a whole (route ``/``), answered from :class:`ServerCore`.

Everything under ``/v2/models/<name>`` for a deployed model goes straight to that model's
application (:mod:`deployments.http.model_routes`); these routes answer the server-wide paths
and every model path the proxy could not route (unknown models, models that failed to scan),
with Triton's errors.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace

from deployments.core.server_core import ServerCore
from deployments.core.shared_memory import MemoryKind, check_region_name
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.model_routes import MODEL_ACTIONS, has_empty_segment
from deployments.http.request_decoding import parse_json_object
from deployments.http.responses import (
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    empty_json_response,
    empty_response,
    error_response,
    get_only,
    json_response,
)
from deployments.http.wire import json_loads
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import JsonObject
from repo_adapter.version_traffic import TrafficPolicy

SYSTEM_SHARED_MEMORY = "/v2/systemsharedmemory/"
CUDA_SHARED_MEMORY = "/v2/cudasharedmemory/"
_SHARED_MEMORY_ROUTE = re.compile(
    r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)
# rayton's own route (not Triton's): what `rayton status --url` reads.
STATUS_PATH = "/v2/rayton/status"
# Marks a request these routes sent on to a model's replicas: never sent on twice.
FORWARDED_HEADER = "x-rayton-forwarded"
# (model, request) -> the reply of a replica serving the model
ModelHttpForward = Callable[[str, HttpRequest], Awaitable[HttpReply]]


class ServerHttpEndpoints:
    """Dispatches one server-wide HTTP request to :class:`ServerCore`."""

    def __init__(self, core: ServerCore, forward: ModelHttpForward | None = None) -> None:
        """``forward`` sends a model's request on to its replicas: one that arrived before
        the proxy routed the model (loaded on demand, or just loaded). None: answered with
        Triton's error for a model that is not deployed."""
        self.core = core
        self._forward = forward

    async def handle(self, request: HttpRequest) -> HttpReply:
        path = request.path
        if has_empty_segment(path):  # "/v2/", "/v2/models/m/": no route of Triton's
            return json_response(NOT_FOUND, 404)
        method = request.method
        core = self.core
        try:
            if path == "/v2":
                return get_only(method) or json_response(await core.server_metadata())
            # The Open Inference Protocol's bodies (KServe's SDK reads them); Triton's status
            # codes (tritonclient reads only those) and Triton 2.51 sends no body.
            if path == "/v2/health/live":
                return get_only(method) or json_response({"live": True})
            if path == "/v2/health/ready":
                ready = await core.server_ready()
                return get_only(method) or json_response({"ready": ready}, 200 if ready else 400)
            if path == "/v2/models/stats":
                return get_only(method) or json_response(
                    {"model_stats": await core.all_statistics()}
                )
            if path == "/v2/logging":
                return await self._logging(method, request)
            if path == "/v2/trace/setting":
                return await self._trace(None, method, request)
            if path == STATUS_PATH:
                return get_only(method) or json_response(await core.status())
            if path.startswith("/v2/repository/"):
                return await self._repository(path, method, request)
            if path.startswith((SYSTEM_SHARED_MEMORY, CUDA_SHARED_MEMORY)):
                return await self._shared_memory(path, method, request)
            if path.startswith("/v2/models/"):
                return await self._unrouted_model(path, method, request)
        except InferenceServerError as err:
            return error_response(err)
        return json_response(NOT_FOUND, 404)

    async def _repository(self, path: str, method: str, request: HttpRequest) -> HttpReply:
        parts = path.split("/")
        if len(parts) == 6 and parts[3] == "models" and parts[5] == "traffic":
            return await self._traffic(parts[4], method, request)
        if method != "POST":
            return json_response(METHOD_NOT_ALLOWED, 405)
        if path == "/v2/repository/index" or (path.endswith("/index") and path.count("/") == 4):
            body = request.body
            ready_only = False
            if body:
                try:
                    ready_only = bool(json_loads(body).get("ready", False))
                except (ValueError, AttributeError):
                    raise InferenceServerError("failed to parse the request JSON buffer") from None
            return json_response(await self.core.repository_index(ready_only))
        if len(parts) == 6 and parts[3] == "models" and parts[5] in ("load", "unload"):
            parameters = _parameters(request.body)
            if parts[5] == "load":
                config, files = load_parameters(parameters)
                await self.core.load(parts[4], config, files)
            else:
                await self.core.unload(parts[4], unload_dependents(parameters))
            return empty_response(200)
        return json_response(NOT_FOUND, 404)

    async def _traffic(self, model: str, method: str, request: HttpRequest) -> HttpReply:
        """rayton's ``traffic`` extension of the repository API:
        ``GET|POST /v2/repository/models/<model>/traffic`` (repo_adapter/version_traffic.py)."""
        if method == "GET":
            return json_response((await self.core.version_traffic(model)).to_json())
        if method != "POST":
            return json_response(METHOD_NOT_ALLOWED, 405)
        try:
            document = json_loads(request.body or b"{}")
        except ValueError:
            raise InferenceServerError("failed to parse the request JSON buffer") from None
        policy = await self.core.set_version_traffic(model, TrafficPolicy.from_json(document))
        return json_response(policy.to_json())

    async def _shared_memory(self, path: str, method: str, request: HttpRequest) -> HttpReply:
        """Triton's system and CUDA shared-memory extensions:
        ``/v2/{system,cuda}sharedmemory[/region/<name>]/{status,register,unregister}``."""
        route = _SHARED_MEMORY_ROUTE.fullmatch(path)
        if route is None:
            return json_response(NOT_FOUND, 404)
        kind = MemoryKind(route.group(1))
        name, action = route.group(2) or "", route.group(3)
        if (action == "status") != (method == "GET") or method not in ("GET", "POST"):
            return json_response(METHOD_NOT_ALLOWED, 405)
        core = self.core
        if action == "status":
            regions = await core.shared_memory_status(kind, name)
            return json_response([region.status() for region in regions])
        if action == "unregister":
            await core.unregister_shared_memory(kind, name)
            return empty_json_response(200)
        if kind is MemoryKind.CUDA:
            raw_handle, device_id, byte_size = cuda_register_parameters(name, request.body)
            await core.register_cuda_shared_memory(name, raw_handle, device_id, byte_size)
            return empty_json_response(200)
        key, offset, byte_size = register_parameters(name, request.body)
        await core.register_system_shared_memory(name, key, offset, byte_size)
        return empty_json_response(200)

    async def _logging(self, method: str, request: HttpRequest) -> HttpReply:
        if method == "GET":
            return json_response(await self.core.log_settings())
        if method != "POST":
            return json_response(METHOD_NOT_ALLOWED, 405)
        changes = parse_json_object(request.body)
        return json_response(await self.core.update_log_settings(changes))

    async def _trace(self, model: str | None, method: str, request: HttpRequest) -> HttpReply:
        if method == "GET":
            return json_response(await self.core.trace_settings(model, None))
        if method != "POST":
            return json_response(METHOD_NOT_ALLOWED, 405)
        changes = parse_json_object(request.body)
        return json_response(await self.core.trace_settings(model, changes))

    async def _unrouted_model(self, path: str, method: str, request: HttpRequest) -> HttpReply:
        parts = [p for p in path.split("/") if p]
        model = parts[2] if len(parts) > 2 else ""
        if len(parts) == 5 and parts[3:] == ["trace", "setting"]:
            return await self._trace(model, method, request)  # the controller: unknown model
        version = parts[4] if len(parts) > 4 and parts[3] == "versions" else ""
        action = parts[-1] if len(parts) in (4, 6) else ""
        if action not in MODEL_ACTIONS:
            return json_response(NOT_FOUND, 404)  # no route, whatever the model
        if self._forward is not None and FORWARDED_HEADER not in request.headers:
            if await self.core.serves_now(model, action):
                return await self._forward_to(model, action, request)
        if action == "ready" and await self.core.is_unavailable(model):
            return json_response({"error": "Model version not ready"}, 400)
        return error_response(await self.core.undeployed_model_error(model, version, action))

    async def _forward_to(self, model: str, action: str, request: HttpRequest) -> HttpReply:
        assert self._forward is not None
        if action == "generate_stream":  # a streamed body does not travel between replicas
            raise InferenceServerError(
                f"model '{model}' was not loaded when this stream began; it is now: send the "
                "request again",
                StatusCode.UNAVAILABLE,
            )
        headers = {**request.headers, FORWARDED_HEADER: "1"}
        return await self._forward(model, replace(request, headers=headers))


def register_parameters(name: str, body: bytes) -> tuple[str, int, int]:
    """A system shared-memory register request's key, offset and byte size, checked as
    Triton checks them."""
    check_region_name(name, MemoryKind.SYSTEM)
    request = parse_json_object(body) if body else {}
    if "key" not in request:
        raise InferenceServerError("Shared memory register request has no 'key' field")
    key = request["key"]
    if not isinstance(key, str):
        raise InferenceServerError(
            "Unable to parse 'key': attempt to access JSON non-string as string"
        )
    offset = _unsigned(request, "offset", default=0)
    return key, offset, _unsigned(request, "byte_size")


def cuda_register_parameters(name: str, body: bytes) -> tuple[bytes, int, int]:
    """A CUDA shared-memory register request's IPC handle (``{"b64": ...}``), device id and
    byte size, checked as Triton checks them (a handle that is not 64 bytes of base64 is the
    registry's to refuse)."""
    check_region_name(name, MemoryKind.CUDA)
    request = parse_json_object(body) if body else {}
    if "raw_handle" not in request:
        raise InferenceServerError("Shared memory register request has no 'raw_handle' field")
    handle = request["raw_handle"]
    encoded = handle.get("b64") if isinstance(handle, dict) else None
    if not isinstance(encoded, str):
        raise InferenceServerError("attempt to access non-existing object member 'b64'")
    try:
        raw_handle = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InferenceServerError(
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
        ) from None
    return raw_handle, _unsigned(request, "device_id"), _unsigned(request, "byte_size")


def _unsigned(request: JsonObject, field: str, default: int | None = None) -> int:
    """A register request's unsigned integer ``field`` (required when ``default`` is None)."""
    if field not in request and default is None:
        raise InferenceServerError(f"Shared memory register request has no '{field}' field")
    value = request.get(field, default)
    if type(value) is not int or value < 0:
        raise InferenceServerError(
            f"Unable to parse '{field}': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer"
        )
    return value


def _parameters(body: bytes) -> JsonObject:
    """The ``parameters`` object of a load / unload body (absent or empty body: none)."""
    if not body:
        return {}
    try:
        document = json_loads(body)
    except ValueError:
        raise InferenceServerError("failed to parse the request JSON buffer") from None
    if not isinstance(document, dict):
        raise InferenceServerError("failed to parse the request JSON buffer")
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InferenceServerError("Unable to parse 'parameters'")
    return parameters


def load_parameters(parameters: JsonObject) -> tuple[str | None, dict[str, bytes]]:
    """``(config JSON or None, {"file:<path>": contents})`` of an HTTP load request."""
    config = None
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if key == "config":
            if not isinstance(value, str):
                raise InferenceServerError(
                    f"invalid value type for load parameter '{key}', expected string_param."
                )
            config = value
        elif key.startswith("file:"):
            if not isinstance(value, str):
                raise InferenceServerError(
                    f"invalid value type for load parameter '{key}', expected bytes_param."
                )
            try:  # HTTP carries file contents as base64 strings
                files[key] = base64.b64decode(value, validate=True)
            except binascii.Error:
                raise InferenceServerError(f"load parameter '{key}' is not valid base64") from None
        else:
            raise InferenceServerError(f"unrecognized load parameter '{key}'.")
    return config, files


def unload_dependents(parameters: JsonObject) -> bool:
    value = parameters.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise InferenceServerError(
            "invalid value type for 'unload_dependents' parameter, expected bool_param."
        )
    return value
