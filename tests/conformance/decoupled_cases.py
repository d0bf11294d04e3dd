"""The requests both servers receive for decoupled models: the python test model
``tests/repo_adapter/backends/python_models/decoupled`` (INPUT0 = n: n responses from a thread
of its own, then the final flag alone) and the C test backend ``scale.c`` built decoupled (three
responses per request from its response factory). Streams run in the gRPC pass only."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, Target, TensorSpec
from tests.conformance.sessions import GrpcSession, StreamRequest
from tests.support.native_backends import SCALE_CONFIG

DECOUPLED_REGISTRY = CaseRegistry()
case = DECOUPLED_REGISTRY.case

PYTHON_MODEL = "decoupled"
NATIVE_MODEL = "scale_stream"
NATIVE_CONFIG = SCALE_CONFIG + "model_transaction_policy { decoupled: true }\n"
GRPC_ONLY = "streams are gRPC's"


def count(value: float) -> list[TensorSpec]:
    return [TensorSpec("INPUT0", np.array([value], np.float32), "FP32", True)]


def streamed(t: Target, model: str, requests: list[StreamRequest], replies: int) -> Any:
    if not isinstance(t.session, GrpcSession):
        return GRPC_ONLY
    return t.session.stream(model, requests, replies)


@case("decoupled_config", "decoupled", "/config of a decoupled python model")
def _(t: Target) -> Any:
    return t.client.model_config(PYTHON_MODEL)


@case("decoupled_infer", "decoupled", "infer (HTTP) / ModelInfer (gRPC): Triton's refusal")
def _(t: Target) -> Any:
    return t.client.infer(PYTHON_MODEL, count(1))


@case("decoupled_infer_raw", "decoupled", "HTTP infer as JSON: status and body", raw=True)
def _(t: Target) -> Any:
    body = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "FP32", "data": [1]}]}
    return t.raw("POST", f"/v2/models/{PYTHON_MODEL}/infer", body)


@case("decoupled_stream_three", "decoupled", "three responses, the final flag alone not sent")
def _(t: Target) -> Any:
    return streamed(t, PYTHON_MODEL, [StreamRequest(count(3), "three")], 3)


@case("decoupled_stream_empty_final", "decoupled", "three responses and the empty final one")
def _(t: Target) -> Any:
    return streamed(t, PYTHON_MODEL, [StreamRequest(count(3), "asked", True)], 4)


@case("decoupled_stream_zero", "decoupled", "zero responses: nothing, or the empty final")
def _(t: Target) -> Any:
    requests = [StreamRequest(count(0), "silent"), StreamRequest(count(0), "final", True)]
    return streamed(t, PYTHON_MODEL, requests, 1)


@case("decoupled_stream_errors", "decoupled", "an error response, a failing execute, a list")
def _(t: Target) -> Any:
    requests = [
        StreamRequest(count(-1), "negative", True),
        StreamRequest(count(999), "raises", True),
        StreamRequest(count(998), "returns_a_list", True),
        StreamRequest(count(1), "after", True),
    ]
    return streamed(t, PYTHON_MODEL, requests, 5)


@case("decoupled_stream_several", "decoupled", "four requests on one stream, all answered")
def _(t: Target) -> Any:
    requests = [StreamRequest(count(n), f"r{n}", True) for n in (4, 1, 0, 2)]
    return streamed(t, PYTHON_MODEL, requests, 11)


@case("decoupled_native_stream", "decoupled", "a C backend's response factory: three and final")
def _(t: Target) -> Any:
    value = [TensorSpec("IN", np.array([[10.0]], np.float32), "FP32", True)]
    return streamed(t, NATIVE_MODEL, [StreamRequest(value, "c", True)], 4)


@case("decoupled_stats", "decoupled", "statistics of the decoupled python model")
def _(t: Target) -> Any:
    return t.client.statistics(PYTHON_MODEL)
