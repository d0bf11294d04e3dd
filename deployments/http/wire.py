"""Definitions shared by HTTP request decoding and response encoding.

Header names, reserved parameters, TritonJson's error wording, the shared-memory and raw-input
specs, and JSON reading/writing (orjson when installed, the standard library otherwise).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError

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


def _is_uint(value: Any) -> bool:
    # type() rather than isinstance(): JSON true/false arrive as bool, a subclass of int.
    return type(value) is int and 0 <= value < _UINT64_LIMIT


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
