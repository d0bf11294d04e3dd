"""Triton data types: protocol names, config enums, numpy dtypes and the BYTES wire encoding."""

from __future__ import annotations

import math
import struct

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.errors import InferenceServerError, StatusCode

try:  # BF16 has no numpy dtype; ml_dtypes (a tritonclient/ray dependency) provides one.
    from ml_dtypes import bfloat16 as _bfloat16

    BF16_DTYPE: np.dtype | None = np.dtype(_bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes ships with our dependencies
    BF16_DTYPE = None

# Protocol datatype name -> numpy dtype. BYTES arrays are numpy object arrays of ``bytes``.
_PROTOCOL_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
if BF16_DTYPE is not None:
    _PROTOCOL_TO_NUMPY["BF16"] = BF16_DTYPE

PROTOCOL_DATATYPES: tuple[str, ...] = (*_PROTOCOL_TO_NUMPY, "BF16")


def protocol_to_config(datatype: str) -> int:
    """``"FP32"`` -> ``TYPE_FP32``; ``"BYTES"`` -> ``TYPE_STRING``."""
    name = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    try:
        return mc.DataType.Value(name)
    except ValueError:
        raise InferenceServerError(f"invalid datatype '{datatype}'") from None


def config_to_protocol(data_type: int) -> str:
    """``TYPE_FP32`` -> ``"FP32"``; ``TYPE_STRING`` -> ``"BYTES"``."""
    name = mc.DataType.Name(data_type)
    if name == "TYPE_STRING":
        return "BYTES"
    return name.removeprefix("TYPE_")


def protocol_to_numpy(datatype: str) -> np.dtype:
    """Numpy dtype that holds tensors of a protocol datatype."""
    try:
        return _PROTOCOL_TO_NUMPY[datatype]
    except KeyError:
        raise InferenceServerError(
            f"invalid datatype '{datatype}'", StatusCode.INVALID_ARG
        ) from None


def numpy_to_protocol(dtype: np.dtype) -> str:
    """Protocol datatype of a numpy dtype (str/bytes/object arrays are BYTES)."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if BF16_DTYPE is not None and dtype == BF16_DTYPE:
        return "BF16"
    for name, candidate in _PROTOCOL_TO_NUMPY.items():
        if candidate == dtype:
            return name
    raise InferenceServerError(f"unsupported numpy dtype {dtype}", StatusCode.INTERNAL)


def element_size(datatype: str) -> int:
    """Bytes per element on the wire; 0 for BYTES (variable length)."""
    if datatype == "BYTES":
        return 0
    return protocol_to_numpy(datatype).itemsize


def serialize_bytes_tensor(array: np.ndarray) -> bytes:
    """Row-major elements, each a 4-byte little-endian length then its bytes."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return b"".join(parts)


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int | None = None) -> np.ndarray:
    """Inverse of :func:`serialize_bytes_tensor`: a flat object array of ``bytes``.

    Raises INVALID_ARG when the buffer is truncated or ``count`` elements are not present.
    """
    view = memoryview(buffer)
    items: list[bytes] = []
    offset = 0
    end = len(view)
    while offset < end:
        if offset + 4 > end:
            raise InferenceServerError("unexpected end of BYTES tensor data")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > end:
            raise InferenceServerError("unexpected end of BYTES tensor data")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    if count is not None and len(items) != count:
        raise InferenceServerError(
            f"expected {count} string elements, got {len(items)} in BYTES tensor data"
        )
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result


def tensor_to_bytes(array: np.ndarray, datatype: str) -> bytes:
    """Raw little-endian wire bytes of a tensor (BYTES length-prefixed)."""
    if datatype == "BYTES":
        return serialize_bytes_tensor(array)
    dtype = protocol_to_numpy(datatype)
    return np.ascontiguousarray(array, dtype=dtype).tobytes()  # hosts are little-endian


def tensor_from_bytes(
    buffer: bytes | memoryview, datatype: str, shape: tuple[int, ...]
) -> np.ndarray:
    """Numpy view of raw wire bytes (zero-copy for fixed-size types); validates the size."""
    count = math.prod(shape)  # Python ints: a product past int64 cannot wrap around
    if datatype == "BYTES":
        return deserialize_bytes_tensor(buffer, count).reshape(shape)
    dtype = protocol_to_numpy(datatype)
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise InferenceServerError(
            f"unexpected total byte size {len(buffer)} for input, expecting {expected}"
        )
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def input_from_bytes(
    buffer: bytes | memoryview, datatype: str, shape: tuple[int, ...], name: str, model: str
) -> np.ndarray:
    """An input tensor from its raw wire bytes, with Triton's size error naming input and model.

    Fixed-size types come back as a read-only view over ``buffer`` (no copy).
    """
    if datatype != "BYTES":
        expected = math.prod(shape) * protocol_to_numpy(datatype).itemsize
        if len(buffer) != expected:
            raise InferenceServerError(
                f"input byte size mismatch for input '{name}' for model '{model}'. "
                f"Expected {expected}, got {len(buffer)}"
            )
    try:
        return tensor_from_bytes(buffer, datatype, shape)
    except InferenceServerError as err:
        raise InferenceServerError(
            f"{err.message} for input '{name}' for model '{model}'", err.code
        ) from None


def flatten_nested(nested: list) -> list:
    """Leaves of JSON tensor data (nested lists) in row-major order; iterative, so deep nesting
    cannot hit the recursion limit."""
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
