"""Triton/KServe-v2 HTTP inference bodies: decode requests, encode responses and errors.

Requests are decoded into :class:`~repo_adapter.inference.InferRequest` and responses encoded
from :class:`~repo_adapter.inference.InferResponse`; nothing else in the project sees JSON or
HTTP bodies. Behaviour and error messages follow Triton's ``http_server.cc``:

* The body is a JSON header optionally followed by binary tensor data (binary tensor
  extension). ``Inference-Header-Content-Length`` gives the JSON length; without it the whole
  body is JSON; ``0`` means the whole body is the raw data of the model's single input.
* Binary input data is not copied: fixed-size tensors are numpy views over the request body
  (over the inflated body when compressed; read-only when the body is ``bytes``).
* An output is returned binary when its requested output says ``binary_data: true``. Outputs
  the client did not list (possible only when it listed none) follow the request parameter
  ``binary_data_output``. A listed output without ``binary_data`` is JSON, as in Triton, even
  when ``binary_data_output`` is true.
* Error status codes follow Triton, except that client mistakes Triton reports as INTERNAL
  (malformed request JSON, a JSON ``data`` element count not matching ``shape``) are
  INVALID_ARG here (listed in ``tests/conformance/allowlist.py``).

JSON goes through ``orjson`` when it is installed and the standard library otherwise; both
produce the same documents (non-finite floats as ``NaN``/``Infinity`` like Triton's writer, and
BYTES that are not UTF-8 written back verbatim, as Triton does).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from deployments.http import compression
from repo_adapter.datatypes import (
    config_to_protocol,
    element_size,
    protocol_to_numpy,
    serialize_bytes_tensor,
    tensor_from_bytes,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference import InferRequest, InferResponse, InferTensor, RequestedOutput
from repo_adapter.request_validation import log_request

try:  # Optional accelerator: parses and writes JSON (numpy arrays included) several times faster.
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

INFERENCE_HEADER_CONTENT_LENGTH = "Inference-Header-Content-Length"
CONTENT_TYPE = "Content-Type"
CONTENT_ENCODING = "Content-Encoding"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"

# Request parameters Triton's frontend consumes itself rather than handing them to the model as
# parameters. They stay in InferRequest.parameters (priority, timeout, ... are read from there);
# whatever exposes parameters to model code should leave these out.
RESERVED_REQUEST_PARAMETERS = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output")
)
RESERVED_PARAMETER_PREFIX = "triton_"

# Input parameters that only describe where the data travels; models never see them.
_TRANSPORT_PARAMETERS = frozenset(
    ("binary_data_size", "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")
)
# Requested-output parameters that RequestedOutput carries as fields.
_OUTPUT_FIELD_PARAMETERS = frozenset(("binary_data", "classification"))

_INT64_MAX = 2**63 - 1
_UINT64_LIMIT = 2**64

# TritonJson's wording for type mismatches, so clients see the messages Triton sends.
_NOT_UINT = "attempt to access JSON non-unsigned-integer as unsigned-integer"
_NOT_INT = "attempt to access JSON non-signed-integer as signed-integer"
_NOT_NUMBER = "attempt to access JSON non-number as double"
_NOT_BOOL = "attempt to access JSON non-boolean as boolean"
_NOT_STRING = "attempt to access JSON non-string as string"
_NOT_ARRAY = "attempt to access JSON non-array as array"
_NOT_OBJECT = "attempt to access JSON non-object as object"

_SIGNED_TYPES = frozenset(("INT8", "INT16", "INT32", "INT64"))
_UNSIGNED_TYPES = frozenset(("UINT8", "UINT16", "UINT32", "UINT64"))
_INTEGER_TYPES = _SIGNED_TYPES | _UNSIGNED_TYPES
_NO_JSON_TYPES = frozenset(("FP16", "BF16"))


class SharedMemoryRegions(Protocol):
    """Registered shared-memory regions, for inputs and outputs that name one.

    Implementations raise :class:`InferenceServerError` for unknown regions or bad ranges.
    """

    def read(self, region: str, offset: int, byte_size: int) -> bytes | memoryview:
        """The ``byte_size`` bytes at ``offset`` of ``region``."""
        ...

    def write(self, region: str, offset: int, data: bytes | memoryview) -> None:
        """Copy ``data`` into ``region`` at ``offset``."""
        ...


@dataclass(frozen=True)
class RawInputSpec:
    """The model's single input: what a raw body (header length 0) decodes into.

    Attributes:
        name: input name.
        datatype: protocol datatype (``"FP32"``, ``"BYTES"``, ...).
        dims: the configured dims, without the batch dimension; at most one ``-1``.
        max_batch_size: the model's ``max_batch_size``; > 0 prepends a batch dimension of 1.
    """

    name: str
    datatype: str
    dims: tuple[int, ...]
    max_batch_size: int = 0

    @classmethod
    def from_model_config(cls, config: Any) -> RawInputSpec | None:
        """Spec from a ``model_config_pb2.ModelConfig``; None unless it has exactly one input."""
        if len(config.input) != 1:
            return None
        model_input = config.input[0]
        return cls(
            name=model_input.name,
            datatype=config_to_protocol(model_input.data_type),
            dims=tuple(model_input.dims),
            max_batch_size=config.max_batch_size,
        )


# --------------------------------------------------------------------------------------------
# JSON


def json_loads(buffer: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; accepts NaN/Infinity literals like Triton's parser."""
    if _orjson is not None:
        try:
            return _orjson.loads(buffer)
        except _orjson.JSONDecodeError:
            pass  # NaN/Infinity or >64-bit integers: the stdlib accepts them, or words the error.
    if isinstance(buffer, (bytearray, memoryview)):
        buffer = bytes(buffer)
    return json.loads(buffer)


def json_dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON; numpy arrays and scalars are written as JSON arrays and numbers."""
    if _orjson is not None:
        try:
            return _orjson.dumps(obj, option=_orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:
            pass  # e.g. surrogate-escaped BYTES or an exotic dtype: the stdlib path handles them
    return _stdlib_json_dumps(obj)


def _stdlib_json_dumps(obj: Any) -> bytes:
    # surrogateescape turns BYTES outputs decoded with it back into their original raw bytes.
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    return text.encode("utf-8", "surrogateescape")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def json_response_body(obj: Any) -> bytes:
    """Body of a JSON response (metadata, statistics, ...), written compactly like Triton."""
    return json_dumps(obj)


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
# Request decoding


def decode_infer_request(
    body: bytes | bytearray | memoryview,
    headers: Mapping[str, str],
    model_name: str,
    model_version: str = "",
    *,
    raw_input: RawInputSpec | Any | None = None,
    shared_memory: SharedMemoryRegions | None = None,
    max_decompressed_size: int | None = compression.DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> InferRequest:
    """Decode an HTTP ``/infer`` request body.

    Args:
        body: the request body as received (possibly compressed).
        headers: request headers; looked up case-insensitively.
        model_name: model named by the URL.
        model_version: version named by the URL, ``""`` for the policy default.
        raw_input: the model's single input, used only for a raw body
            (``Inference-Header-Content-Length: 0``): a :class:`RawInputSpec`, or the model's
            ``ModelConfig`` to derive it from. None, or a config without exactly one input,
            makes raw bodies an error.
        shared_memory: registered shared-memory regions, for inputs and outputs that name one;
            None makes such requests fail with NOT_FOUND.
        max_decompressed_size: cap on an inflated compressed body; None or 0 for no cap.

    Returns:
        The decoded request. Binary fixed-size inputs are zero-copy views over ``body``.
        ``parameters`` holds every request parameter, the reserved ones included (see
        :data:`RESERVED_REQUEST_PARAMETERS`); a raw body sets ``binary_data_output``.

    Raises:
        InferenceServerError: with Triton's code and message for any malformed request.
    """
    body = compression.decompress_body(
        body, _header(headers, CONTENT_ENCODING), max_decompressed_size
    )
    header_length = _inference_header_length(
        _header(headers, INFERENCE_HEADER_CONTENT_LENGTH), len(body)
    )
    if header_length == 0:
        return _decode_raw_request(body, model_name, model_version, _raw_input_spec(raw_input))
    if header_length is None or header_length == len(body):
        header = _parse_json_header(body)
        payload = memoryview(b"")
    else:
        header = _parse_json_header(body[:header_length])
        payload = memoryview(body)[header_length:]
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        id=_request_id(header),
        parameters=_request_parameters(header),
        inputs=_decode_inputs(header, payload, model_name, shared_memory),
        outputs=_requested_outputs(header, shared_memory),
    )


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup that also works on plain dicts."""
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        value = headers.get(lowered)
        if value is None:
            for key, candidate in headers.items():
                if key.lower() == lowered:
                    return candidate
    return value


def _inference_header_length(value: str | None, body_length: int) -> int | None:
    """Validated ``Inference-Header-Content-Length``; None when the header is absent."""
    if value is None:
        return None
    text = value.strip()
    if not text.lstrip("+-").isdigit():
        raise InferenceServerError(
            f"Unable to parse {INFERENCE_HEADER_CONTENT_LENGTH}, got: {value}"
        )
    length = int(text)
    if not 0 <= length <= body_length:
        raise InferenceServerError(
            f"inference header size should be in range (0, {body_length}), got: {value}"
        )
    return length


def _parse_json_header(buffer: bytes | bytearray | memoryview) -> dict[str, Any]:
    try:
        header = json_loads(buffer)
    except json.JSONDecodeError as err:
        raise InferenceServerError(
            f"failed to parse the request JSON buffer: {err.msg} at {err.pos}"
        ) from None
    except (ValueError, RecursionError) as err:  # invalid UTF-8, absurd nesting
        raise InferenceServerError(f"failed to parse the request JSON buffer: {err}") from None
    if not isinstance(header, dict):
        raise InferenceServerError(
            "failed to parse the request JSON buffer: the document root must be an object"
        )
    return header


def _request_id(header: dict[str, Any]) -> str:
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InferenceServerError(f"Unable to parse 'id': {_NOT_STRING}")
    return request_id


def _is_uint(value: Any) -> bool:
    # type() rather than isinstance(): JSON true/false arrive as bool, a subclass of int.
    return type(value) is int and 0 <= value < _UINT64_LIMIT


def _is_bool(value: Any) -> bool:
    return type(value) is bool


# Reserved parameter -> (accepts its value, TritonJson's complaint otherwise).
_RESERVED_PARAMETER_CHECKS = {
    "sequence_id": (lambda v: _is_uint(v) or isinstance(v, str), _NOT_STRING),
    "sequence_start": (_is_bool, _NOT_BOOL),
    "sequence_end": (_is_bool, _NOT_BOOL),
    "priority": (_is_uint, _NOT_UINT),
    "timeout": (_is_uint, _NOT_UINT),
    "binary_data_output": (_is_bool, _NOT_BOOL),
}


def _request_parameters(header: dict[str, Any]) -> dict[str, Any]:
    parameters = header.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InferenceServerError(
            "failed to get request params.: attempt to get members for non-object"
        )
    for key, value in parameters.items():
        check = _RESERVED_PARAMETER_CHECKS.get(key)
        if check is not None:
            accepts, complaint = check
            if not accepts(value):
                raise InferenceServerError(f"Unable to parse '{key}': {complaint}")
        elif key.startswith(RESERVED_PARAMETER_PREFIX):
            raise InferenceServerError(
                "parameter keys starting with 'triton_' are reserved for Triton usage and "
                "should not be specified."
            )
        elif not isinstance(value, (str, int, float)):
            raise InferenceServerError(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', "
                "or 'string'."
            )
    return parameters


def _member(entry: dict[str, Any], key: str, kind: type, complaint: str) -> Any:
    """``entry[key]`` checked against ``kind``, failing with Triton's 'Unable to parse' message."""
    if key not in entry:
        raise InferenceServerError(
            f"Unable to parse '{key}': attempt to access non-existing object member '{key}'"
        )
    value = entry[key]
    if not isinstance(value, kind):
        raise InferenceServerError(f"Unable to parse '{key}': {complaint}")
    return value


def _parameters_of(entry: dict[str, Any]) -> dict[str, Any]:
    parameters = entry.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InferenceServerError(f"Unable to parse 'parameters': {_NOT_OBJECT}")
    return parameters


def _decode_inputs(
    header: dict[str, Any],
    payload: memoryview,
    model_name: str,
    shared_memory: SharedMemoryRegions | None,
) -> list[InferTensor]:
    entries = _member(header, "inputs", list, _NOT_ARRAY)
    tensors: list[InferTensor] = []
    names: set[str] = set()
    offset = 0
    for entry in entries:
        tensor, offset = _decode_input(entry, payload, offset, model_name, shared_memory)
        if tensor.name in names:
            # Core's AddOriginalInput error, with its "[request id: ...] " prefix.
            raise InferenceServerError(
                f"{log_request(_request_id(header))}input '{tensor.name}' already exists in request"
            )
        names.add(tensor.name)
        tensors.append(tensor)
    if offset != len(payload):
        raise InferenceServerError(f"unexpected additional input data for model '{model_name}'")
    return tensors


def _decode_input(
    entry: Any,
    payload: memoryview,
    offset: int,
    model_name: str,
    shared_memory: SharedMemoryRegions | None,
) -> tuple[InferTensor, int]:
    """One input of the JSON header; returns it and the offset of the next binary input."""
    if not isinstance(entry, dict):
        raise InferenceServerError(f"Unable to parse 'inputs': {_NOT_OBJECT}")
    parameters = _parameters_of(entry)
    _check_input_content(entry, parameters)
    name = _member(entry, "name", str, _NOT_STRING)
    datatype = _member(entry, "datatype", str, _NOT_STRING)
    shape, count = _input_shape(entry, name)
    dtype = _input_dtype(datatype, name)

    if "binary_data_size" in parameters:
        size = parameters["binary_data_size"]
        if not _is_uint(size):
            raise InferenceServerError(f"Unable to parse 'binary_data_size': {_NOT_UINT}")
        end = offset + size
        if end > len(payload):
            raise InferenceServerError(
                f"unexpected size for input '{name}', expecting {end - len(payload)} "
                f"additional bytes for model '{model_name}'"
            )
        data = _array_from_buffer(payload[offset:end], datatype, dtype, shape, name, model_name)
        offset = end
    elif "shared_memory_region" in parameters:
        buffer = _read_shared_memory(parameters, shared_memory)
        data = _array_from_buffer(buffer, datatype, dtype, shape, name, model_name)
    else:
        data = _array_from_json(entry["data"], datatype, dtype, shape, count, name)

    tensor_parameters = {k: v for k, v in parameters.items() if k not in _TRANSPORT_PARAMETERS}
    return InferTensor(name, datatype, data, tensor_parameters), offset


def _check_input_content(entry: dict[str, Any], parameters: dict[str, Any]) -> None:
    """Exactly one of JSON data, binary data and shared memory (Triton's wording)."""
    present = [
        field
        for field, found in (
            ("'data'", "data" in entry),
            ("'binary_data_size'", "binary_data_size" in parameters),
            ("'shared_memory_region'", "shared_memory_region" in parameters),
        )
        if found
    ]
    if len(present) != 1:
        problem = " no field is set" if not present else " set " + " ".join(present)
        raise InferenceServerError(
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But" + problem
        )


def _input_shape(entry: dict[str, Any], name: str) -> tuple[tuple[int, ...], int]:
    """The validated shape and its element count."""
    shape = _member(entry, "shape", list, _NOT_ARRAY)
    if not all(_is_uint(dim) for dim in shape):
        raise InferenceServerError(f"Unable to parse 'shape': {_NOT_UINT}")
    count = math.prod(shape)
    if count > _INT64_MAX or any(dim > _INT64_MAX for dim in shape):
        raise InferenceServerError(
            f"invalid shape for input '{name}': shape {_shape_text(shape)} causes total element "
            f"count to exceed maximum size of {_INT64_MAX}"
        )
    return tuple(shape), count


def _shape_text(shape: Any) -> str:
    return "[" + ",".join(str(dim) for dim in shape) + "]"


def _input_dtype(datatype: str, name: str) -> np.dtype:
    try:
        return protocol_to_numpy(datatype)
    except InferenceServerError:
        raise InferenceServerError(f"invalid datatype '{datatype}' for input '{name}'") from None


def _array_from_buffer(
    buffer: bytes | memoryview,
    datatype: str,
    dtype: np.dtype,
    shape: tuple[int, ...],
    name: str,
    model_name: str,
) -> np.ndarray:
    """Wire bytes -> array; a view over ``buffer`` for fixed-size types."""
    if datatype != "BYTES":
        expected = math.prod(shape) * dtype.itemsize
        if len(buffer) != expected:
            raise InferenceServerError(
                f"input byte size mismatch for input '{name}' for model '{model_name}'. "
                f"Expected {expected}, got {len(buffer)}"
            )
    try:
        return tensor_from_bytes(buffer, datatype, shape)
    except InferenceServerError as err:
        raise InferenceServerError(
            f"{err.message} for input '{name}' for model '{model_name}'", err.code
        ) from None


def _read_shared_memory(
    parameters: dict[str, Any], shared_memory: SharedMemoryRegions | None
) -> bytes | memoryview:
    region, offset, byte_size = _shared_memory_location(parameters)
    if shared_memory is None:
        raise InferenceServerError(
            f"Unable to find shared memory region: '{region}'", StatusCode.NOT_FOUND
        )
    return shared_memory.read(region, offset, byte_size)


def _shared_memory_location(parameters: dict[str, Any]) -> tuple[str, int, int]:
    region = parameters["shared_memory_region"]
    if not isinstance(region, str):
        raise InferenceServerError(f"Unable to parse 'shared_memory_region': {_NOT_STRING}")
    offset = parameters.get("shared_memory_offset", 0)
    if not _is_uint(offset):
        raise InferenceServerError(f"Unable to parse 'shared_memory_offset': {_NOT_UINT}")
    byte_size = parameters.get("shared_memory_byte_size", 0)
    if not _is_uint(byte_size):
        raise InferenceServerError(f"Unable to parse 'shared_memory_byte_size': {_NOT_UINT}")
    return region, offset, byte_size


def _array_from_json(
    data: Any,
    datatype: str,
    dtype: np.dtype,
    shape: tuple[int, ...],
    count: int,
    name: str,
) -> np.ndarray:
    """JSON ``data`` (flat or nested, row-major) -> array of ``shape``."""
    if count == 0:
        return np.empty(shape, dtype=dtype)  # Triton does not read 'data' of empty tensors
    if datatype in _NO_JSON_TYPES:
        raise InferenceServerError(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data "
            f"format for input {name}"
        )
    if not isinstance(data, list):
        raise InferenceServerError(f"Unable to parse 'data': {_NOT_ARRAY}")
    if datatype == "BYTES":
        array = _bytes_from_json(data, name)
    else:
        array = _numbers_from_json(data, datatype, dtype, name)
    if array.size != count:
        raise InferenceServerError(
            f"Unable to parse 'data' for input '{name}': shape {_shape_text(shape)} has "
            f"{count} elements but 'data' has {array.size}"
        )
    return array.reshape(shape)


def _numbers_from_json(data: list, datatype: str, dtype: np.dtype, name: str) -> np.ndarray:
    try:
        values = np.asarray(data)
    except ValueError:  # ragged nesting: Triton only counts the leaves
        values = np.asarray(_flatten(data))
    # Object: ragged on older numpy, or nulls. Float for an integer type: real floats, or
    # integers spanning the int64 and uint64 ranges, which numpy turns into lossy float64.
    if values.dtype.kind == "O" or (values.dtype.kind == "f" and datatype in _INTEGER_TYPES):
        values = _leaves_array(_flatten(data))
    if values.size:
        complaint = _json_number_complaint(values, datatype)
        if complaint:
            raise InferenceServerError(f"Unable to parse 'data' for input '{name}': {complaint}")
    # astype wraps out-of-range integers like the C casts Triton uses.
    return values.reshape(-1).astype(dtype, copy=False)


def _leaves_array(leaves: list) -> np.ndarray:
    """Array of flat JSON leaves, exact for integers up to the uint64 range."""
    if leaves and all(type(leaf) is int for leaf in leaves):
        if min(leaves) >= 0 and max(leaves) < _UINT64_LIMIT:
            return np.array(leaves, dtype=np.uint64)
    return np.asarray(leaves)


def _json_number_complaint(values: np.ndarray, datatype: str) -> str | None:
    """Why JSON values cannot be ``datatype`` (TritonJson's wording), or None if they can."""
    kind = values.dtype.kind
    if datatype == "BOOL":
        return None if kind == "b" else _NOT_BOOL
    if datatype in _SIGNED_TYPES:
        return None if kind == "i" else _NOT_INT
    if datatype in _UNSIGNED_TYPES:
        if kind == "u" or (kind == "i" and values.min() >= 0):
            return None
        return _NOT_UINT
    return None if kind in "iuf" else _NOT_NUMBER


def _bytes_from_json(data: list, name: str) -> np.ndarray:
    flat = _flatten(data)
    try:
        encoded = [item.encode("utf-8") for item in flat]
    except AttributeError:
        raise InferenceServerError(
            f"Unable to parse 'data' for input '{name}': {_NOT_STRING}"
        ) from None
    except UnicodeEncodeError as err:  # lone surrogates from \ud800-style escapes
        raise InferenceServerError(
            f"Unable to parse 'data' for input '{name}': invalid string: {err}"
        ) from None
    array = np.empty(len(encoded), dtype=np.object_)
    array[:] = encoded
    return array


def _flatten(nested: list) -> list:
    """Leaves of nested lists in row-major order (iterative: no recursion limit)."""
    flat: list = []
    stack = [iter(nested)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _requested_outputs(
    header: dict[str, Any], shared_memory: SharedMemoryRegions | None
) -> list[RequestedOutput]:
    if header.get("outputs") is None:
        return []
    entries = _member(header, "outputs", list, _NOT_ARRAY)
    outputs: list[RequestedOutput] = []
    names: set[str] = set()
    for entry in entries:
        output = _requested_output(entry, shared_memory)
        if output.name not in names:  # Triton keeps requested outputs in a set
            names.add(output.name)
            outputs.append(output)
    return outputs


def _requested_output(entry: Any, shared_memory: SharedMemoryRegions | None) -> RequestedOutput:
    if not isinstance(entry, dict):
        raise InferenceServerError(f"Unable to parse 'outputs': {_NOT_OBJECT}")
    parameters = _parameters_of(entry)
    name = _member(entry, "name", str, _NOT_STRING)
    binary_data = parameters.get("binary_data")
    if binary_data is not None and not _is_bool(binary_data):
        raise InferenceServerError(f"Unable to parse 'binary_data': {_NOT_BOOL}")
    class_count = parameters.get("classification", 0)
    if not _is_uint(class_count):
        raise InferenceServerError(f"Unable to set 'classification': {_NOT_UINT}")
    if "shared_memory_region" in parameters:
        _check_shared_memory_output(parameters, shared_memory)
    return RequestedOutput(
        name=name,
        binary_data=binary_data,
        class_count=class_count,
        parameters={k: v for k, v in parameters.items() if k not in _OUTPUT_FIELD_PARAMETERS},
    )


def _check_shared_memory_output(
    parameters: dict[str, Any], shared_memory: SharedMemoryRegions | None
) -> None:
    # Classification results are computed after the output exists, so they can't go to shm.
    if "classification" in parameters:
        raise InferenceServerError(
            "Output can't set both 'shared_memory_region' and 'classification'"
        )
    if parameters.get("binary_data") is True:
        raise InferenceServerError("Output can't set both 'shared_memory_region' and 'binary_data'")
    region, _, _ = _shared_memory_location(parameters)
    if shared_memory is None:
        raise InferenceServerError(
            f"Unable to find shared memory region: '{region}'", StatusCode.NOT_FOUND
        )


def _raw_input_spec(raw_input: RawInputSpec | Any | None) -> RawInputSpec | None:
    if raw_input is None or isinstance(raw_input, RawInputSpec):
        return raw_input
    if hasattr(raw_input, "input") and hasattr(raw_input, "max_batch_size"):
        return RawInputSpec.from_model_config(raw_input)
    # A bare ModelInput lacks max_batch_size, so the batch dimension could not be deduced.
    raise TypeError(f"raw_input must be a RawInputSpec or a ModelConfig, not {type(raw_input)}")


def _decode_raw_request(
    body: bytes | bytearray | memoryview,
    model_name: str,
    model_version: str,
    spec: RawInputSpec | None,
) -> InferRequest:
    """A body that is nothing but the data of the model's only input (core ``Normalize``)."""
    if spec is None:
        raise InferenceServerError(
            "Raw request must only have 1 input (found 1) to be deduced but model "
            f"'{model_name}' does not have exactly 1 input in its configuration"
        )
    shape = _raw_input_shape(spec, len(body))
    if spec.datatype == "BYTES":
        # The body is the one string itself, without the 4-byte length prefix.
        data = np.empty(1, dtype=np.object_)
        data[0] = bytes(body)
        data = data.reshape(shape)
    else:
        dtype = _input_dtype(spec.datatype, spec.name)
        data = _array_from_buffer(
            memoryview(body), spec.datatype, dtype, shape, spec.name, model_name
        )
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=[InferTensor(spec.name, spec.datatype, data)],
        # Raw requests get every output back in binary form.
        parameters={"binary_data_output": True},
    )


def _raw_input_shape(spec: RawInputSpec, byte_size: int) -> tuple[int, ...]:
    shape = [1] if spec.max_batch_size != 0 else []
    dynamic_axis = None
    element_count = 1
    for dim in spec.dims:
        if dim == -1:
            if dynamic_axis is not None:
                raise InferenceServerError(
                    f"The shape of the raw input '{spec.name}' can not be deduced because there "
                    "are more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            element_count *= dim
        shape.append(dim)
    if spec.datatype == "BYTES":
        if dynamic_axis is not None or element_count != 1:
            raise InferenceServerError(
                f"For BYTE datatype raw input '{spec.name}', the model must have input shape [1]"
            )
    elif dynamic_axis is not None:
        per_slice = element_count * element_size(spec.datatype)
        shape[dynamic_axis] = byte_size // per_slice if per_slice else 0
    return tuple(shape)


# --------------------------------------------------------------------------------------------
# Response encoding


def encode_infer_response(
    response: InferResponse,
    request: InferRequest,
    accept_encoding: str | None = None,
    *,
    shared_memory: SharedMemoryRegions | None = None,
    compression_level: int = -1,
) -> tuple[bytes, dict[str, str]]:
    """Encode an inference response as Triton's HTTP frontend does.

    Classification must already have been applied
    (:func:`deployments.classification.apply_classification`): outputs are encoded as given.

    Args:
        response: the outputs, in the order they are returned.
        request: the decoded request (id, requested outputs, ``binary_data_output``).
        accept_encoding: the request's ``Accept-Encoding`` header, or None.
        shared_memory: regions for outputs the request placed in shared memory.
        compression_level: zlib level when the response is compressed.

    Returns:
        ``(body, headers)``: ``Content-Type`` always; ``Inference-Header-Content-Length``
        when binary data follows the JSON header (as Triton, only if at least one binary
        output is non-empty); ``Content-Encoding`` when compressed.

    Raises:
        InferenceServerError: INVALID_ARG for FP16/BF16 outputs requested as JSON; INTERNAL
            when a shared-memory output does not fit its region.
    """
    requested = {output.name: output for output in request.outputs}
    default_binary = request.parameters.get("binary_data_output") is True
    outputs: list[dict[str, Any]] = []
    buffers: list[bytes | memoryview] = []
    all_finite = True
    for tensor in response.outputs:
        entry, buffer, finite = _encode_output(
            tensor, requested.get(tensor.name), default_binary, shared_memory
        )
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
    header_bytes = json_dumps(header) if all_finite else _stdlib_json_dumps(header)

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
    shared_memory: SharedMemoryRegions | None,
) -> tuple[dict[str, Any], bytes | memoryview | None, bool]:
    """One output's JSON entry, its binary data (if any) and whether its JSON data is finite."""
    entry: dict[str, Any] = {
        "name": tensor.name,
        "datatype": tensor.datatype,
        "shape": list(tensor.shape),
    }
    parameters = dict(tensor.parameters)

    if requested is not None and "shared_memory_region" in requested.parameters:
        _write_shared_memory(tensor, requested, shared_memory)
        return entry, None, True  # Triton sends neither data nor binary size for shm outputs

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
    if datatype in _NO_JSON_TYPES:
        raise InferenceServerError(
            f"sending {datatype} data via JSON is not supported. Please use the binary data "
            "format for output"
        )
    if datatype == "BYTES":
        return [_json_text(item) for item in np.asarray(tensor.data).reshape(-1).tolist()], True
    array = np.ascontiguousarray(tensor.data, dtype=protocol_to_numpy(datatype)).reshape(-1)
    finite = array.dtype.kind != "f" or bool(np.isfinite(array).all())
    return array, finite


def _json_text(item: Any) -> str:
    """A BYTES element as a JSON string; non-UTF-8 bytes survive via surrogateescape."""
    if isinstance(item, bytes):
        return item.decode("utf-8", "surrogateescape")
    if isinstance(item, str):
        return item
    return str(item)


def _write_shared_memory(
    tensor: InferTensor,
    requested: RequestedOutput,
    shared_memory: SharedMemoryRegions | None,
) -> None:
    region, offset, byte_size = _shared_memory_location(requested.parameters)
    if shared_memory is None:
        raise InferenceServerError(
            f"Unable to find shared memory region: '{region}'", StatusCode.NOT_FOUND
        )
    buffer = _wire_buffer(tensor)
    if len(buffer) > byte_size:
        raise InferenceServerError(
            f"shared memory size specified with the request for output '{tensor.name}' "
            f"({byte_size} bytes) should be at least {len(buffer)} bytes to hold the results",
            StatusCode.INTERNAL,
        )
    shared_memory.write(region, offset, buffer)
