"""Decode a KServe v2 / Triton HTTP inference request body into an ``InferRequest``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from deployments.core.shared_memory import MappedRegions, unknown_region
from deployments.http import compression
from deployments.http.wire import (
    CONTENT_ENCODING,
    INFERENCE_HEADER_CONTENT_LENGTH,
    NO_JSON_DATATYPES,
    RESERVED_PARAMETER_PREFIX,
    RawInputSpec,
    json_loads,
)
from repo_adapter.datatypes import (
    element_size,
    flatten_nested,
    input_from_bytes,
    protocol_to_numpy,
)
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import (
    InferRequest,
    InferTensor,
    JsonObject,
    RequestedOutput,
    SharedMemoryTarget,
)
from repo_adapter.request_validation import log_request

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


def _is_uint(value: Any) -> bool:
    # type() rather than isinstance(): JSON true/false arrive as bool, a subclass of int.
    return type(value) is int and 0 <= value < _UINT64_LIMIT


def _shared_memory_location(parameters: JsonObject) -> tuple[str, int, int]:
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


# --------------------------------------------------------------------------------------------
# Request decoding


def decode_infer_request(
    body: bytes | bytearray | memoryview,
    headers: Mapping[str, str],
    model_name: str,
    model_version: str = "",
    *,
    raw_input: RawInputSpec | Any | None = None,
    max_decompressed_size: int | None = compression.DEFAULT_MAX_DECOMPRESSED_SIZE,
    regions: MappedRegions | None = None,
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
        max_decompressed_size: cap on an inflated compressed body; None or 0 for no cap.
        regions: the shared-memory regions this process knows (None: none is registered).

    Returns:
        The decoded request. Binary fixed-size inputs are zero-copy views over ``body``.
        ``parameters`` holds every request parameter, the reserved ones included (see
        :data:`RESERVED_REQUEST_PARAMETERS`); a raw body sets ``binary_data_output``.

    Raises:
        InferenceServerError: with Triton's code and message for any malformed request.
        RegionNotKnownError: it names a region ``regions`` was not told about.
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
        header = parse_json_object(body)
        payload = memoryview(b"")
    else:
        header = parse_json_object(body[:header_length])
        payload = memoryview(body)[header_length:]
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        id=_request_id(header),
        parameters=_request_parameters(header),
        inputs=_decode_inputs(header, payload, model_name, regions),
        outputs=_requested_outputs(header, regions),
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


def parse_json_object(buffer: bytes | bytearray | memoryview) -> JsonObject:
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


def _request_id(header: JsonObject) -> str:
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise InferenceServerError(f"Unable to parse 'id': {_NOT_STRING}")
    return request_id


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


def _request_parameters(header: JsonObject) -> JsonObject:
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


def _member(entry: JsonObject, key: str, kind: type, complaint: str) -> Any:
    """``entry[key]`` checked against ``kind``, failing with Triton's 'Unable to parse' message."""
    if key not in entry:
        raise InferenceServerError(
            f"Unable to parse '{key}': attempt to access non-existing object member '{key}'"
        )
    value = entry[key]
    if not isinstance(value, kind):
        raise InferenceServerError(f"Unable to parse '{key}': {complaint}")
    return value


def _parameters_of(entry: JsonObject) -> JsonObject:
    parameters = entry.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise InferenceServerError(f"Unable to parse 'parameters': {_NOT_OBJECT}")
    return parameters


def _decode_inputs(
    header: JsonObject,
    payload: memoryview,
    model_name: str,
    regions: MappedRegions | None,
) -> list[InferTensor]:
    entries = _member(header, "inputs", list, _NOT_ARRAY)
    tensors: list[InferTensor] = []
    names: set[str] = set()
    offset = 0
    for entry in entries:
        tensor, offset = _decode_input(
            entry, payload, offset, model_name, regions, _request_id(header)
        )
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
    regions: MappedRegions | None,
    request_id: str,
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
        data = input_from_bytes(payload[offset:end], datatype, shape, name, model_name)
        offset = end
    elif "shared_memory_region" in parameters:
        location = _shared_memory_location(parameters)
        if regions is None:
            raise unknown_region(location[0])
        data = regions.read_input(location, datatype, shape, name, model_name, request_id)
    else:
        data = array_from_json(entry["data"], datatype, dtype, shape, count, name)

    tensor_parameters = {k: v for k, v in parameters.items() if k not in _TRANSPORT_PARAMETERS}
    return InferTensor(name, datatype, data, tensor_parameters), offset


def _check_input_content(entry: JsonObject, parameters: JsonObject) -> None:
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


def _input_shape(entry: JsonObject, name: str) -> tuple[tuple[int, ...], int]:
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


def array_from_json(
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
    if datatype in NO_JSON_DATATYPES:
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
        values = np.asarray(flatten_nested(data))
    # Object: ragged on older numpy, or nulls. Float for an integer type: real floats, or
    # integers spanning the int64 and uint64 ranges, which numpy turns into lossy float64.
    if values.dtype.kind == "O" or (values.dtype.kind == "f" and datatype in _INTEGER_TYPES):
        values = _leaves_array(flatten_nested(data))
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
    flat = flatten_nested(data)
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


def _requested_outputs(header: JsonObject, regions: MappedRegions | None) -> list[RequestedOutput]:
    if header.get("outputs") is None:
        return []
    entries = _member(header, "outputs", list, _NOT_ARRAY)
    outputs: list[RequestedOutput] = []
    names: set[str] = set()
    for entry in entries:
        output = _requested_output(entry, regions)
        if output.name not in names:  # Triton keeps requested outputs in a set
            names.add(output.name)
            outputs.append(output)
    return outputs


def _requested_output(entry: Any, regions: MappedRegions | None) -> RequestedOutput:
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
    target = None
    if "shared_memory_region" in parameters:
        target = _shared_memory_output(parameters, regions)
    return RequestedOutput(
        name=name,
        binary_data=binary_data,
        class_count=class_count,
        parameters={
            k: v
            for k, v in parameters.items()
            if k not in _OUTPUT_FIELD_PARAMETERS and k not in _TRANSPORT_PARAMETERS
        },
        shared_memory=target,
    )


def _shared_memory_output(
    parameters: JsonObject, regions: MappedRegions | None
) -> SharedMemoryTarget:
    # Classification results are computed after the output exists, so they can't go to shm.
    if "classification" in parameters:
        raise InferenceServerError(
            "Output can't set both 'shared_memory_region' and 'classification'"
        )
    if parameters.get("binary_data") is True:
        raise InferenceServerError("Output can't set both 'shared_memory_region' and 'binary_data'")
    region, offset, byte_size = _shared_memory_location(parameters)
    if regions is None:
        raise unknown_region(region)
    regions.check(region, offset, byte_size)
    return SharedMemoryTarget(region, offset, byte_size)


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
        _input_dtype(spec.datatype, spec.name)  # an unknown datatype is a 400 here
        data = input_from_bytes(memoryview(body), spec.datatype, shape, spec.name, model_name)
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
