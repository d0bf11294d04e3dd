"""Exports traces as OpenTelemetry spans over OTLP/HTTP (Triton's ``mode=opentelemetry``).

Triton's span layout per traced request: a top-level ``InferRequest`` span (the transport's
receive and send events), a span named after the model (``REQUEST_START``, ``QUEUE_START``,
``REQUEST_END``) as its child, and a ``compute`` span under that (the ``COMPUTE_*`` events). A
request made for a traced one (an ensemble step, a BLS call) gets its model span under its
parent's model span, in the parent's trace. Span and event times are wall-clock nanoseconds:
each trace record carries its replica's offset from the monotonic clock the stamps use.
The request body is an ``ExportTraceServiceRequest`` (protobuf) POSTed to the collector's URL,
as OTLP/HTTP exporters send it. Ray-free.
"""

from __future__ import annotations

import logging
import os
import urllib.request
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from deployments.observability.trace_file import forget_oldest
from repo_adapter.request_trace import TraceRecord

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://localhost:4318/v1/traces"
_TRANSPORT_PREFIXES = ("HTTP_", "GRPC_")
_COMPUTE_PREFIX = "COMPUTE_"
_TIMEOUT_S = 10.0


def _attribute(key: str, value: Any) -> common_pb2.KeyValue:
    if isinstance(value, bool):
        any_value = common_pb2.AnyValue(bool_value=value)
    elif isinstance(value, int):
        any_value = common_pb2.AnyValue(int_value=value)
    else:
        any_value = common_pb2.AnyValue(string_value=str(value))
    return common_pb2.KeyValue(key=key, value=any_value)


class OtlpTraceExporter:
    """Turns trace records into spans and sends them to one OTLP/HTTP endpoint."""

    def __init__(self, url: str = DEFAULT_URL, resource: dict[str, str] | None = None) -> None:
        self.url = url
        self.resource = {"service.name": "triton-inference-server", **(resource or {})}
        self._trace_ids: dict[str, bytes] = {}  # trace key -> OTel trace id (the root's)
        self._model_spans: dict[str, bytes] = {}  # trace key -> its model span's id

    def _model_span_id(self, key: str) -> bytes:
        found = self._model_spans.get(key)
        if found is None:
            found = self._model_spans[key] = os.urandom(8)
            forget_oldest(self._model_spans)
        return found

    def _trace_id(self, key: str, parent: str) -> bytes:
        """The trace ``key`` belongs to: its parent's (made now if the parent, which
        finishes after its children, has not arrived yet), or a new one."""
        found = self._trace_ids.get(key)
        if found is None:
            found = self._trace_id(parent, "") if parent else os.urandom(16)
            self._trace_ids[key] = found
            forget_oldest(self._trace_ids)
        return found

    def spans(self, record: TraceRecord) -> list[trace_pb2.Span]:
        """Triton's spans of one trace record."""
        key, parent = record["key"], record.get("parent_key") or ""
        offset = record.get("epoch_offset_ns", 0)
        stamps = [(name, ns + offset) for name, ns in record["stamps"]]
        if not stamps:
            return []
        trace_id = self._trace_id(key, parent)
        model_id = self._model_span_id(key)
        transport = [s for s in stamps if s[0].startswith(_TRANSPORT_PREFIXES)]
        compute = [s for s in stamps if s[0].startswith(_COMPUTE_PREFIX)]
        model = [s for s in stamps if s not in transport and s not in compute]
        attributes = [
            _attribute("triton.model_name", record["model_name"]),
            _attribute("triton.model_version", record["model_version"]),
            _attribute("triton.trace_id", key),
        ]
        if record.get("request_id"):
            attributes.append(_attribute("triton.request_id", record["request_id"]))
        if parent:
            attributes.append(_attribute("triton.trace_parent_id", parent))
        spans = []
        model_parent = self._model_span_id(parent) if parent else b""
        if not parent:
            root_id = os.urandom(8)
            model_parent = root_id
            spans.append(_span(trace_id, root_id, b"", "InferRequest", stamps, transport, []))
        spans.append(
            _span(trace_id, model_id, model_parent, record["model_name"], stamps, model, attributes)
        )
        if compute:
            spans.append(_span(trace_id, os.urandom(8), model_id, "compute", compute, compute, []))
        return spans

    def request(self, records: list[TraceRecord]) -> trace_service_pb2.ExportTraceServiceRequest:
        spans = [span for record in records for span in self.spans(record)]
        export = trace_service_pb2.ExportTraceServiceRequest()
        resource_spans = export.resource_spans.add()
        resource_spans.resource.attributes.extend(
            _attribute(k, v) for k, v in self.resource.items()
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "rayton"
        scope_spans.spans.extend(spans)
        return export

    def export(self, records: list[TraceRecord]) -> None:
        """POST the records' spans (blocking: run it off the event loop)."""
        body = self.request(records).SerializeToString()
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/x-protobuf"}
        )
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                response.read()
        except OSError as err:  # a collector that is away must not fail the controller
            logger.warning("could not export %d traces to %s: %s", len(records), self.url, err)


def _span(
    trace_id: bytes,
    span_id: bytes,
    parent_id: bytes,
    name: str,
    extent: list[tuple[str, int]],
    events: list[tuple[str, int]],
    attributes: list[common_pb2.KeyValue],
) -> trace_pb2.Span:
    times = [ns for _, ns in extent]
    span = trace_pb2.Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_id,
        name=name,
        kind=trace_pb2.Span.SPAN_KIND_SERVER,
        start_time_unix_nano=min(times),
        end_time_unix_nano=max(times),
    )
    span.attributes.extend(attributes)
    span.events.extend(trace_pb2.Span.Event(name=n, time_unix_nano=ns) for n, ns in events)
    return span
