"""Triton's generate extension: ``POST /v2/models/<m>[/versions/<v>]/generate`` and
``/generate_stream``, answered by the model's replica.

A generate request is one JSON object. A key that names a model input is that input: a JSON
scalar or a flat list, shaped by the input's config dims (one variable dim takes what the
values leave; a batching model gets a batch of 1); ``parameters`` holds request parameters,
and any other key is one too. Each response is one JSON object: ``model_name``,
``model_version`` and each output by name (its one element, or a flat list), keys sorted as
Triton writes them. ``/generate`` needs exactly one response; ``/generate_stream`` sends each
response as a server-sent event (``data: {...}``) as the model sends it, a decoupled model's
several. Errors of the request itself answer as ``/infer`` does; an error of the model is
400 (or an event of the stream), as Triton 2.51 answers them.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from deployments.http.messages import HttpReply
from deployments.http.request_decoding import array_from_json, parse_json_object
from repo_adapter.datatypes import config_to_protocol, protocol_to_numpy
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor
from repo_adapter.response_stream import StreamedResponse

JSON_TYPE = {"Content-Type": "application/json"}
EVENT_STREAM_TYPE = {"Content-Type": "text/event-stream; charset=utf-8"}
NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)


def generate_request(body: bytes, config: mc.ModelConfig, version: str) -> InferRequest:
    """The inference request a generate body describes, for the model ``config`` describes.

    Raises:
        InferenceServerError: a body that is not a JSON object, a value that does not fit its
            input's dims or datatype, a parameter that is not a JSON scalar.
    """
    document = parse_json_object(body)
    inputs = {spec.name: spec for spec in config.input}
    parameters: dict[str, Any] = {}
    tensors: list[InferTensor] = []
    for key, value in document.items():
        if key == "parameters" and isinstance(value, dict):
            for name, parameter in value.items():
                parameters[name] = _parameter(name, parameter)
        elif key in inputs:
            tensors.append(_input_tensor(inputs[key], value, config.max_batch_size > 0))
        else:
            parameters[key] = _parameter(key, value)
    return InferRequest(config.name, tensors, version, parameters=parameters)


def _parameter(name: str, value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    raise InferenceServerError(
        f"parameter '{name}' of a generate request must be a bool, number or string"
    )


def _input_tensor(spec: mc.ModelInput, value: Any, batching: bool) -> InferTensor:
    values = value if isinstance(value, list) else [value]
    dims = [int(d) for d in spec.dims]
    variable = [i for i, d in enumerate(dims) if d < 0]
    fixed = math.prod(d for d in dims if d >= 0)
    count = len(values)
    fits = fixed == count if not variable else len(variable) == 1 and fixed and count % fixed == 0
    if not fits:
        raise InferenceServerError(
            f"The schema can not convert input '{spec.name}' to tensor with proper shape"
        )
    if variable:
        dims[variable[0]] = count // fixed
    shape = tuple(([1] if batching else []) + dims)
    datatype = config_to_protocol(spec.data_type)
    array = array_from_json(values, datatype, _dtype(datatype), shape, count, spec.name)
    return InferTensor(spec.name, datatype, array)


def _dtype(datatype: str) -> np.dtype:
    return np.dtype(np.object_) if datatype == "BYTES" else np.dtype(protocol_to_numpy(datatype))


def response_document(response: InferResponse) -> bytes:
    """One response as the generate extension writes it."""
    document: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
    }
    for tensor in response.outputs:
        values = [_json_value(v) for v in np.asarray(tensor.data).reshape(-1).tolist()]
        document[tensor.name] = values[0] if len(values) == 1 else values
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _error_document(error: InferenceServerError) -> bytes:
    return json.dumps({"error": error.message}, separators=(",", ":")).encode()


async def generate_reply(responses: AsyncIterator[StreamedResponse]) -> HttpReply:
    """``/generate``: the model's one response (its error: 400), or Triton's error when it
    gave another number of them. ``responses`` has been started (its first response is due)."""
    answers: list[InferResponse] = []
    async for item in responses:
        if isinstance(item.result, InferenceServerError):
            await responses.aclose()
            return HttpReply(400, _error_document(item.result), JSON_TYPE)
        if item.result is not None:
            answers.append(item.result)
    if len(answers) != 1:
        error = InferenceServerError(NOT_ONE_RESPONSE, StatusCode.INVALID_ARG)
        return HttpReply(200, _error_document(error), JSON_TYPE)  # 2.51's status for it
    return HttpReply(200, response_document(answers[0]), JSON_TYPE)


async def generate_stream_reply(responses: AsyncIterator[StreamedResponse]) -> HttpReply:
    """``/generate_stream``: each response as an event as the model sends it; the status is
    the first response's (400 when it is an error), sent before the rest is known."""
    first: StreamedResponse | None = None
    async for item in responses:
        if item.result is not None:
            first = item
            break
    if first is None:  # no response at all: an empty stream
        return HttpReply(200, b"", EVENT_STREAM_TYPE)
    status = 400 if isinstance(first.result, InferenceServerError) else 200
    return HttpReply(status, b"", EVENT_STREAM_TYPE, stream=_events(first, responses))


async def _events(
    first: StreamedResponse, rest: AsyncIterator[StreamedResponse]
) -> AsyncIterator[bytes]:
    try:
        item: StreamedResponse | None = first
        while item is not None:
            if isinstance(item.result, InferenceServerError):
                yield b"data: " + _error_document(item.result) + b"\n\n"
            elif item.result is not None:
                yield b"data: " + response_document(item.result) + b"\n\n"
            if item.final:
                return
            item = await anext(rest, None)
    finally:
        await rest.aclose()  # a client gone mid-stream cancels the request
