"""HTTP endpoints under ``/v2/models/{model}``, answered by the model's own replicas.

The proxy routes ``/v2/models/<name>`` straight to the model's Serve application, so
metadata, readiness, config, statistics and inference need no extra hop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from deployments.core.served_model import ServedModel, StreamingModel
from deployments.core.shared_memory import (
    MappedRegions,
    RegionElsewhereError,
    RegionNotKnownError,
    unknown_region,
)
from deployments.http.generate import generate_reply, generate_request, generate_stream_reply
from deployments.http.messages import HttpReply, HttpRequest
from deployments.http.region_calls import HttpRegionHop, hopped
from deployments.http.request_decoding import decode_infer_request, parse_json_object
from deployments.http.response_encoding import encode_infer_response
from deployments.http.responses import (
    METHOD_NOT_ALLOWED,
    NOT_FOUND,
    empty_response,
    error_response,
    json_response,
)
from deployments.http.wire import RawInputSpec
from deployments.observability.statistics import ModelStatistics
from deployments.observability.trace_settings import TraceSettingsDocument
from deployments.observability.tracing import TRACER
from repo_adapter.errors import DecoupledModelError, InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, JsonObject
from repo_adapter.request_trace import RequestTrace
from repo_adapter.response_stream import StreamedResponse

logger = logging.getLogger(__name__)

# Clients such as aiohttp ask for gzip on every response; level 1 costs a fraction of the
# default level's CPU on the hot path, and tensors compress little better at higher levels.
RESPONSE_COMPRESSION_LEVEL = 1


TRACE_SETTING = "trace/setting"
# (model, changes or None for a read) -> Triton's trace settings of the model
TraceSettingFn = Callable[[str, "JsonObject | None"], Awaitable[TraceSettingsDocument]]


_DECOUPLED_INFER = "HTTP end point doesn't support models with decoupled transaction policy"

# What may follow /v2/models/<m>[/versions/<v>] ("": the model's metadata).
MODEL_ACTIONS = frozenset(("", "infer", "ready", "config", "stats", "generate", "generate_stream"))


def has_empty_segment(path: str) -> bool:
    """A trailing or doubled slash: Triton's routes match none of those paths."""
    return path != "/" and (path.endswith("/") or "//" in path)


def split_model_path(path: str, model: str) -> tuple[str, str] | None:
    """``/v2/models/m/versions/2/infer`` -> ``("2", "infer")``; None if not a model route."""
    prefix = f"/v2/models/{model}"
    if path != prefix and not path.startswith(prefix + "/"):
        return None
    if has_empty_segment(path):
        return None
    parts = [p for p in path[len(prefix) :].split("/") if p]
    version = ""
    if parts and parts[0] == "versions":
        if len(parts) < 2 or not parts[1].isdigit():
            return None
        version, parts = parts[1], parts[2:]
    if parts == ["trace", "setting"] and not version:  # no versioned form, as in Triton
        return "", TRACE_SETTING
    if len(parts) > 1:
        return None
    return version, (parts[0] if parts else "")


class ModelHttpEndpoints:
    """Dispatches one HTTP request for a model to its :class:`ServedModel`."""

    def __init__(
        self,
        served: ServedModel,
        statistics: Callable[[str], Awaitable[list[ModelStatistics]]],
        trace_setting: TraceSettingFn,
        regions: MappedRegions | None = None,
        region_hop: HttpRegionHop | None = None,
    ) -> None:
        """``regions``: the system shared-memory regions requests may name (None: none);
        ``region_hop``: how a request naming a region of another node reaches a replica
        there (None: it is answered UNAVAILABLE)."""
        self.served = served
        self._statistics = statistics  # the model's totals over all its replicas
        self._trace_setting = trace_setting  # the controller owns the trace settings
        self._regions = regions
        self._region_hop = region_hop
        self._raw_input_for: tuple[Any, RawInputSpec | None] = (None, None)

    def _raw_input(self) -> RawInputSpec | None:
        """How a body with Inference-Header-Content-Length 0 (raw bytes of the only input)
        decodes under the config serving now (it changes when the model reloads)."""
        config = self.served.config
        cached_config, spec = self._raw_input_for
        if cached_config is not config:
            spec = RawInputSpec.from_model_config(config)
            self._raw_input_for = (config, spec)
        return spec

    async def handle(self, request: HttpRequest) -> HttpReply:
        route = split_model_path(request.path, self.served.name)
        if route is None:
            return json_response(NOT_FOUND, 404)
        version, action = route
        if action not in MODEL_ACTIONS and action != TRACE_SETTING:
            return json_response(NOT_FOUND, 404)  # no such route, whatever the method
        try:
            if action == "infer":
                if request.method != "POST":
                    return json_response(METHOD_NOT_ALLOWED, 405)
                return await self._infer(request, version)
            if action in ("generate", "generate_stream"):
                if request.method != "POST":
                    return json_response(METHOD_NOT_ALLOWED, 405)
                return await self._generate(request, version, action == "generate_stream")
            if action == TRACE_SETTING:
                return await self._trace(request)
            if request.method != "GET":
                return json_response(METHOD_NOT_ALLOWED, 405)
            if action == "":
                return json_response(self.served.metadata(version))
            if action == "ready":
                if self.served.is_ready(version):
                    return empty_response(200)
                # As Triton 2.73 (core GetModel): an unknown version is NOT_FOUND and an
                # unavailable one UNAVAILABLE; metadata() raises exactly those errors.
                self.served.metadata(version)
                return json_response({"error": "Model version not ready"}, 400)
            if action == "config":
                return json_response(self.served.model_config(version))
            if action == "stats":
                return json_response({"model_stats": await self._statistics(version)})
        except InferenceServerError as err:
            return error_response(err)
        except Exception as err:  # a bug must still answer in Triton's error format
            logger.exception("model '%s': unhandled error on %s", self.served.name, request.path)
            return error_response(
                InferenceServerError(f"{type(err).__name__}: {err}", StatusCode.INTERNAL)
            )
        return json_response(NOT_FOUND, 404)

    async def _generate(self, request: HttpRequest, version: str, stream: bool) -> HttpReply:
        """Triton's generate extension (:mod:`deployments.http.generate`): the request's own
        errors answer as ``/infer``'s do; the model's answer builds the reply."""
        served = self.served
        if not isinstance(served, StreamingModel):
            raise InferenceServerError(
                f"model '{served.name}' does not serve the generate extension",
                StatusCode.UNSUPPORTED,
            )
        infer_request = generate_request(request.body, served.config, version)
        trace = _start_trace(served.name, request, infer_request)
        responses = served.infer_stream(infer_request)
        try:
            first = await anext(responses)  # the request's own errors raise here
        except BaseException:
            await responses.aclose()
            if trace is not None:
                TRACER.finish(trace)
            raise
        rest = _prepended(first, responses)
        if trace is not None:
            rest = _traced_sends(rest, trace)
        if stream:
            return await generate_stream_reply(rest)
        return await generate_reply(rest)

    async def _trace(self, request: HttpRequest) -> HttpReply:
        if request.method == "GET":
            return json_response(await self._trace_setting(self.served.name, None))
        if request.method != "POST":
            return json_response(METHOD_NOT_ALLOWED, 405)
        changes = parse_json_object(request.body)
        return json_response(await self._trace_setting(self.served.name, changes))

    async def _infer(self, request: HttpRequest, version: str) -> HttpReply:
        trace = None
        try:
            infer_request = await self._decode(request, version)
            trace = _start_trace(self.served.name, request, infer_request)
            response = await self.served.infer(infer_request)
            if trace is not None:
                trace.stamp("HTTP_SEND_START")
            payload, headers = encode_infer_response(
                response,
                infer_request,
                request.headers.get("accept-encoding"),
                compression_level=RESPONSE_COMPRESSION_LEVEL,
                regions=self._regions,
            )
        except DecoupledModelError:
            return error_response(InferenceServerError(_DECOUPLED_INFER, StatusCode.UNSUPPORTED))
        except RegionElsewhereError as elsewhere:  # raised while decoding: nothing ran here
            if self._region_hop is None or hopped(request):
                return error_response(elsewhere)
            return await self._region_hop.forward_http(elsewhere, self.served.name, request)
        except InferenceServerError as err:
            return error_response(err)
        finally:
            if trace is not None:
                # The replica's side of the send: encoding; Serve writes the bytes afterwards.
                trace.stamp("HTTP_SEND_END")
                TRACER.finish(trace)
        return HttpReply(200, payload, headers)

    async def _decode(self, request: HttpRequest, version: str) -> InferRequest:
        """The request, its shared-memory inputs read; a region this process has not heard
        of yet is asked of the table's owner once."""

        def decode() -> InferRequest:
            return decode_infer_request(
                request.body,
                request.headers,
                model_name=self.served.name,
                model_version=version,
                raw_input=self._raw_input(),
                regions=self._regions,
            )

        try:
            return decode()
        except RegionNotKnownError:
            assert self._regions is not None
            await self._regions.refresh()
        try:
            return decode()
        except RegionNotKnownError as err:
            raise unknown_region(err.name) from None


def _start_trace(
    model: str, request: HttpRequest, infer_request: InferRequest
) -> RequestTrace | None:
    """Sample ``infer_request`` for tracing; a traced one gets its HTTP receive stamps."""
    trace = infer_request.trace = TRACER.start(model, infer_request.id)
    if trace is not None:
        trace.stamp("HTTP_RECV_START", request.received_ns or time.monotonic_ns())
        trace.stamp("HTTP_RECV_END", request.read_ns or time.monotonic_ns())
    return trace


async def _traced_sends(
    responses: AsyncGenerator[StreamedResponse, None], trace: RequestTrace
) -> AsyncIterator[StreamedResponse]:
    """``responses``, with the trace's sends stamped around them and the trace finished once
    the last one went (or the client left)."""
    trace.stamp("HTTP_SEND_START")
    try:
        async for item in responses:
            yield item
            if item.final:
                break
    finally:
        await responses.aclose()  # the model's side ends (REQUEST_END) before the send's
        trace.stamp("HTTP_SEND_END")
        TRACER.finish(trace)


async def _prepended(
    first: StreamedResponse, rest: AsyncIterator[StreamedResponse]
) -> AsyncGenerator[StreamedResponse, None]:
    """``first``, then ``rest`` (closed with this iterator)."""
    try:
        yield first
        if first.final:
            return
        async for item in rest:
            yield item
    finally:
        await rest.aclose()
