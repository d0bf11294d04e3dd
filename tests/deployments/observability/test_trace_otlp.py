"""Traces as OpenTelemetry spans, sent to a real OTLP/HTTP receiver: Triton's span layout, a
child under its parent's model span, wall-clock times."""

from __future__ import annotations

import time

from deployments.observability.trace_otlp import OtlpTraceExporter
from tests.support.otlp_receiver import OtlpReceiver


def record(key: str, model: str, parent: str = "", offset: int = 0) -> dict:
    stamps = [
        "HTTP_RECV_START",
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
        "HTTP_SEND_END",
    ]
    if parent:
        stamps = [s for s in stamps if not s.startswith("HTTP_")]
    return {
        "key": key,
        "parent_key": parent,
        "model_name": model,
        "model_version": 1,
        "request_id": "r-1" if not parent else "",
        "stamps": [(name, time.monotonic_ns() + i) for i, name in enumerate(stamps)],
        "tensors": [],
        "epoch_offset_ns": offset,
    }


def test_spans_reach_the_collector_in_tritons_layout():
    offset = time.time_ns() - time.monotonic_ns()
    with OtlpReceiver() as receiver:
        exporter = OtlpTraceExporter(receiver.url, {"deployment": "test"})
        # The ensemble step finishes (and ships) before the ensemble itself.
        exporter.export([record("step", "member", parent="outer", offset=offset)])
        exporter.export([record("outer", "pipeline", offset=offset)])
        spans = receiver.wait_for(5)
        assert receiver.resources[0] == {
            "service.name": "triton-inference-server",
            "deployment": "test",
        }
    by_name = {span.name: span for span in spans}
    assert sorted(by_name) == ["InferRequest", "compute", "member", "pipeline"]
    assert len(spans) == 5  # a compute span for each model
    root, pipeline, member = by_name["InferRequest"], by_name["pipeline"], by_name["member"]
    assert len({span.trace_id for span in spans}) == 1  # one trace, the child included
    assert pipeline.parent_span_id == root.span_id
    assert member.parent_span_id == pipeline.span_id
    assert [e.name for e in root.events] == ["HTTP_RECV_START", "HTTP_SEND_END"]
    assert [e.name for e in pipeline.events] == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    computes = [span for span in spans if span.name == "compute"]
    assert {c.parent_span_id for c in computes} == {pipeline.span_id, member.span_id}
    attributes = {a.key: a.value for a in pipeline.attributes}
    assert attributes["triton.model_name"].string_value == "pipeline"
    assert attributes["triton.model_version"].int_value == 1
    assert attributes["triton.request_id"].string_value == "r-1"
    assert abs(root.start_time_unix_nano - time.time_ns()) < 60 * 10**9  # wall clock


def test_a_collector_that_is_away_loses_the_traces_not_the_server():
    OtlpTraceExporter("http://127.0.0.1:9/v1/traces").export([record("k", "m")])
