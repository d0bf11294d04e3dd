"""The requests both servers receive for decoupled models and the generate extension: the
python test model ``tests/repo_adapter/backends/python_models/decoupled`` (INPUT0 = n: n
responses from a thread of its own, then the final flag alone), the C test backend ``scale.c``
built decoupled (three responses per request from its response factory) and
:data:`ECHO_MODEL_PY`, a plain python model with text, optional and variable inputs. gRPC
streams run in the gRPC pass, the generate endpoints (raw HTTP) in the HTTP pass."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tests.conformance.driver import CaseRegistry, Target, TensorSpec
from tests.conformance.normalise import normalise_message
from tests.conformance.sessions import GrpcSession, StreamRequest, http_request
from tests.support.native_backends import SCALE_CONFIG

DECOUPLED_REGISTRY = CaseRegistry()
case = DECOUPLED_REGISTRY.case

PYTHON_MODEL = "decoupled"
NATIVE_MODEL = "scale_stream"
NATIVE_CONFIG = SCALE_CONFIG + "model_transaction_policy { decoupled: true }\n"
GRPC_ONLY = "streams are gRPC's"
ECHO_MODEL = "echo_text"
ECHO_CONFIG = """\
name: "echo_text"
backend: "python"
max_batch_size: 0
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "flag" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "vec" data_type: TYPE_FP32 dims: [ -1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "count" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "vec_out" data_type: TYPE_FP32 dims: [ -1 ] }
]
"""
# What the model saw, as its text output: the request's parameters, its text's shape and its
# max_tokens; vec_out is vec, or [1.5, 2.5] without it.
ECHO_MODEL_PY = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            tokens = pb_utils.get_input_tensor_by_name(request, "max_tokens")
            vec = pb_utils.get_input_tensor_by_name(request, "vec")
            seen = {
                "parameters": json.loads(request.parameters()),
                "text_shape": list(text.shape),
                "max_tokens": None if tokens is None else tokens.as_numpy().tolist(),
            }
            vec_out = vec.as_numpy() if vec is not None else np.array([1.5, 2.5], np.float32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("text_output", np.array([json.dumps(seen).encode()], np.object_)),
                pb_utils.Tensor("count", np.array([7], np.int32)),
                pb_utils.Tensor("vec_out", vec_out),
            ]))
        return responses
"""


# An ensemble over the decoupled python model: each of its responses, doubled.
ENSEMBLE_MODEL = "decoupled_pipeline"
DOUBLE_MODEL = "double_it"
DOUBLE_CONFIG = """\
name: "double_it"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
DOUBLE_MODEL_PY = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]
            )
            for r in requests
        ]
"""
ENSEMBLE_CONFIG = """\
name: "decoupled_pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "N", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "decoupled" model_version: -1
      input_map { key: "INPUT0" value: "N" } output_map { key: "OUTPUT0" value: "MID" } },
    { model_name: "double_it" model_version: -1
      input_map { key: "X" value: "MID" } output_map { key: "Y" value: "OUT" } }
  ]
}
"""


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


def ensemble_count(value: float) -> list[TensorSpec]:
    return [TensorSpec("N", np.array([value], np.float32), "FP32", True)]


@case("ensemble_decoupled_config", "decoupled", "an ensemble over a decoupled model: /config")
def _(t: Target) -> Any:
    return t.client.model_config(ENSEMBLE_MODEL)


@case("ensemble_decoupled_infer", "decoupled", "that ensemble: infer / ModelInfer refused")
def _(t: Target) -> Any:
    return t.client.infer(ENSEMBLE_MODEL, ensemble_count(1))


@case("ensemble_decoupled_stream", "decoupled", "that ensemble streamed: a response per response")
def _(t: Target) -> Any:
    requests = [
        StreamRequest(ensemble_count(3), "three"),
        StreamRequest(ensemble_count(2), "two_asked", True),
        StreamRequest(ensemble_count(0), "zero_asked", True),
        StreamRequest(ensemble_count(-1), "negative"),
    ]
    return streamed(t, ENSEMBLE_MODEL, requests, 7)


@case("ensemble_decoupled_stats", "decoupled", "that ensemble's statistics")
def _(t: Target) -> Any:
    return t.client.statistics(ENSEMBLE_MODEL)


def generate(t: Target, model: str, body: Any, stream: bool = False, path: str = "") -> Any:
    """A raw generate request (HTTP pass only): status, content type and the body (JSON, or
    a stream's events, each parsed)."""
    if isinstance(t.session, GrpcSession):
        return "generate is HTTP's"
    action = "generate_stream" if stream else "generate"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    reply = http_request(t.server, "POST", path or f"/v2/models/{model}/{action}", data, headers)
    observed: dict[str, Any] = {
        "status": reply.status,
        "content_type": reply.headers.get("content-type"),
    }
    text = reply.body.decode()
    if not stream or observed["content_type"] == "application/json":
        observed["body"] = _errors_normalised(json.loads(text)) if text else None
        return observed
    chunks = text.split("\n\n")
    observed["ends_with_blank_line"] = text == "" or chunks[-1] == ""
    observed["events"] = [
        _errors_normalised(json.loads(chunk.removeprefix("data: ")))
        if chunk.startswith("data: ")
        else {"not an event": chunk}
        for chunk in chunks
        if chunk
    ]
    return observed


def _errors_normalised(document: Any) -> Any:
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return dict(document, error=normalise_message(document["error"]))
    return document


@case("generate_text", "generate", "generate: a text input and an optional one, every output")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, {"text_input": "hi", "max_tokens": 3})


@case("generate_parameters", "generate", "generate: parameters, and a key naming no input")
def _(t: Target) -> Any:
    parameters = {"temperature": 0.5, "k": 2, "name": "x", "greedy": True}
    return generate(t, ECHO_MODEL, {"text_input": "hi", "parameters": parameters, "other": 1})


@case("generate_variable_input", "generate", "generate: a bool and a variable-length input")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, {"text_input": "hi", "flag": True, "vec": [1, 2, 3]})


@case("generate_versioned", "generate", "generate on /versions/1/, and on a version not served")
def _(t: Target) -> Any:
    paths = [f"/v2/models/{ECHO_MODEL}/versions/{v}/generate" for v in (1, 2)]
    return [generate(t, ECHO_MODEL, {"text_input": "hi"}, path=path) for path in paths]


@case("generate_shape_error", "generate", "generate: more values than the input's dims hold")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, {"text_input": ["a", "b"]})


@case("generate_model_error", "generate", "generate: the model fails (a required input absent)")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, {"max_tokens": 1})


@case("generate_missing_input", "generate", "generate_stream: a required input missing")
def _(t: Target) -> Any:
    return generate(t, NATIVE_MODEL, {"parameters": {"a": 1}}, stream=True)


@case("generate_type_error", "generate", "generate: a string for an INT32 input")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, {"text_input": "hi", "max_tokens": "x"})


@case("generate_bad_json", "generate", "generate: a body that is not JSON")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, b"{not json")


@case("generate_decoupled_one", "generate", "generate on a decoupled model sending one response")
def _(t: Target) -> Any:
    return generate(t, PYTHON_MODEL, {"INPUT0": 1})


@case("generate_decoupled_many", "generate", "generate on a decoupled model sending three")
def _(t: Target) -> Any:
    return generate(t, PYTHON_MODEL, {"INPUT0": 3})


@case("generate_stream_decoupled", "generate", "generate_stream: three events")
def _(t: Target) -> Any:
    return generate(t, PYTHON_MODEL, {"INPUT0": 3}, stream=True)


@case("generate_stream_zero", "generate", "generate_stream: no response, an empty stream")
def _(t: Target) -> Any:
    return generate(t, PYTHON_MODEL, {"INPUT0": 0}, stream=True)


@case("generate_stream_error", "generate", "generate_stream: the model's error as the first")
def _(t: Target) -> Any:
    return generate(t, PYTHON_MODEL, {"INPUT0": -1}, stream=True)


@case("generate_stream_plain", "generate", "generate_stream on a model that is not decoupled")
def _(t: Target) -> Any:
    return generate(t, ECHO_MODEL, {"text_input": "hi"}, stream=True)


@case("generate_stream_batching", "generate", "generate_stream: a batching C backend's factory")
def _(t: Target) -> Any:
    return generate(t, NATIVE_MODEL, {"IN": 10}, stream=True)
