"""Encode an ``InferResponse`` (or an error) as a KServe v2 / Triton HTTP response body."""

from __future__ import annotations

from typing import Any

import numpy as np

from deployments.core.shared_memory import MappedRegions
from deployments.http import compression
from deployments.http.wire import (
    BINARY_CONTENT_TYPE,
    CONTENT_ENCODING,
    CONTENT_TYPE,
    INFERENCE_HEADER_CONTENT_LENGTH,
    JSON_CONTENT_TYPE,
    NO_JSON_DATATYPES,
    json_dumps,
)
from repo_adapter.datatypes import (
    protocol_to_numpy,
    serialize_bytes_tensor,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import (
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
    SharedMemoryTarget,
)


def encode_error(
    error: InferenceServerError | BaseException | str,
    code: StatusCode = StatusCode.INVALID_ARG,
) -> tuple[int, bytes, dict[str, str]]:
    """Triton's error response: ``{"error": message}`` as ``application/json``.

    Args:
        error: an :class:`InferenceServerError` (its code decides the status), a message
            (reported with ``code``), or any other exception (reported as INTERNAL).
        code: the code for a plain message.

    Returns:
        ``(http_status, body, headers)``; headers include any the error asks for (e.g.
        ``Accept-Encoding`` for an unsupported request ``Content-Encoding``).
    """
    headers = {CONTENT_TYPE: JSON_CONTENT_TYPE}
    if isinstance(error, InferenceServerError):
        message, code = error.message, error.code
        headers.update(getattr(error, "headers", None) or {})
    elif isinstance(error, str):
        message = error
    else:
        message, code = str(error) or type(error).__name__, StatusCode.INTERNAL
    return code.http_status, json_dumps({"error": message}), headers


# --------------------------------------------------------------------------------------------
# Response encoding


def encode_infer_response(
    response: InferResponse,
    request: InferRequest,
    accept_encoding: str | None = None,
    *,
    compression_level: int = -1,
    regions: MappedRegions | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Encode an inference response as Triton's HTTP frontend does.

    Classification must already have been applied
    (:func:`deployments.core.classification.apply_classification`): outputs are encoded as given.

    Args:
        response: the outputs, in the order they are returned.
        request: the decoded request (id, requested outputs, ``binary_data_output``).
        accept_encoding: the request's ``Accept-Encoding`` header, or None.
        compression_level: zlib level when the response is compressed.
        regions: where outputs the request asked into shared memory are written (the
            regions its decoding read).

    Returns:
        ``(body, headers)``: ``Content-Type`` always; ``Inference-Header-Content-Length``
        when binary data follows the JSON header (as Triton, only if at least one binary
        output is non-empty); ``Content-Encoding`` when compressed.

    Raises:
        InferenceServerError: INVALID_ARG for FP16/BF16 outputs requested as JSON.
    """
    requested = {output.name: output for output in request.outputs}
    default_binary = request.parameters.get("binary_data_output") is True
    outputs: list[dict[str, Any]] = []
    buffers: list[bytes | memoryview] = []
    all_finite = True
    for tensor in response.outputs:
        wanted = requested.get(tensor.name)
        if wanted is not None and wanted.shared_memory is not None and regions is not None:
            outputs.append(write_shared_memory_output(tensor, wanted.shared_memory, regions))
            continue
        entry, buffer, finite = _encode_output(tensor, wanted, default_binary)
        outputs.append(entry)
        all_finite = all_finite and finite
        if buffer is not None and len(buffer):
            buffers.append(buffer)

    header: dict[str, Any] = {}
    response_id = response.id or request.id
    if response_id:
        header["id"] = response_id
    header["model_name"] = response.model_name
    header["model_version"] = response.model_version
    if response.parameters:
        header["parameters"] = response.parameters
    header["outputs"] = outputs
    # orjson writes NaN/Infinity as null, so non-finite JSON data goes through the stdlib.
    header_bytes = json_dumps(header, finite=all_finite)

    if buffers:
        body = b"".join([header_bytes, *buffers])
        headers = {
            CONTENT_TYPE: BINARY_CONTENT_TYPE,
            INFERENCE_HEADER_CONTENT_LENGTH: str(len(header_bytes)),
        }
    else:
        body = header_bytes
        headers = {CONTENT_TYPE: JSON_CONTENT_TYPE}
    return _compress_response(body, headers, accept_encoding, compression_level)


def write_shared_memory_output(
    tensor: InferTensor, target: SharedMemoryTarget, regions: MappedRegions
) -> dict[str, Any]:
    """Write an output into the region the request named; its entry in the response (no
    data, as Triton's)."""
    regions.write_output(tensor.name, target, _wire_buffer(tensor))
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


def _compress_response(
    body: bytes, headers: dict[str, str], accept_encoding: str | None, level: int
) -> tuple[bytes, dict[str, str]]:
    coding = compression.response_coding(accept_encoding)
    if coding != compression.IDENTITY:
        body = compression.compress_body(body, coding, level)
        headers[CONTENT_ENCODING] = coding
    return body, headers


def _encode_output(
    tensor: InferTensor,
    requested: RequestedOutput | None,
    default_binary: bool,
) -> tuple[dict[str, Any], bytes | memoryview | None, bool]:
    """One output's JSON entry, its binary data (if any) and whether its JSON data is finite."""
    entry: dict[str, Any] = {
        "name": tensor.name,
        "datatype": tensor.datatype,
        "shape": list(tensor.shape),
    }
    parameters = dict(tensor.parameters)

    if requested is None:
        binary = default_binary
    else:
        binary = bool(requested.binary_data)  # a listed output without binary_data is JSON

    if binary:
        buffer = _wire_buffer(tensor)
        parameters["binary_data_size"] = len(buffer)
        entry["parameters"] = parameters
        return entry, buffer, True

    if parameters:
        entry["parameters"] = parameters
    data, finite = _json_data(tensor)
    entry["data"] = data
    return entry, None, finite


def _wire_buffer(tensor: InferTensor) -> bytes | memoryview:
    """The tensor's binary wire form; a view (no copy) of contiguous fixed-size data."""
    if tensor.datatype == "BYTES":
        return serialize_bytes_tensor(np.asarray(tensor.data, dtype=np.object_))
    array = np.ascontiguousarray(tensor.data, dtype=protocol_to_numpy(tensor.datatype))
    # Viewed as bytes: memoryview cannot export dtypes such as bfloat16 directly.
    return memoryview(array.reshape(-1).view(np.uint8))


def _json_data(tensor: InferTensor) -> tuple[Any, bool]:
    """Flat, row-major JSON data for an output, and whether it is free of NaN/Infinity."""
    datatype = tensor.datatype
    if datatype in NO_JSON_DATATYPES:
        raise InferenceServerError(
            f"sending {datatype} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    if datatype == "BYTES":
        return [_json_text(item) for item in np.asarray(tensor.data).reshape(-1).tolist()], True
    array = np.ascontiguousarray(tensor.data, dtype=protocol_to_numpy(datatype)).reshape(-1)
    finite = array.dtype.kind != "f" or bool(np.isfinite(array).all())
    if array.dtype == np.float32:
        # Triton writes an FP32 value as the double it widens to (3.0000000054977558e+38);
        # orjson would write float32's shortest form (3e+38), the standard library the double.
        array = array.astype(np.float64)
    return array, finite


def _json_text(item: Any) -> str:
    """A BYTES element as a JSON string; non-UTF-8 bytes survive via surrogateescape."""
    if isinstance(item, bytes):
        return item.decode("utf-8", "surrogateescape")
    if isinstance(item, str):
        return item
    return str(item)
