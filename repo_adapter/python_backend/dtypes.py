"""Triton data-type numbering and numpy conversions, as ``triton_python_backend_utils`` has them.

The integer data types are ``TRITONSERVER_DataType`` values (``TYPE_FP32`` = 11, BYTES = 13),
which is also the numbering of the model configuration's ``DataType`` enum. BYTES tensors are
numpy object arrays of ``bytes``; the wire encoding comes from :mod:`repo_adapter.datatypes`.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from repo_adapter import datatypes
from repo_adapter.errors import InferenceServerError
from repo_adapter.python_backend.triton_error import TritonModelException


class TritonDataType(enum.IntEnum):
    """``TRITONSERVER_DataType``: what :meth:`Tensor.triton_dtype` returns."""

    TYPE_INVALID = 0
    TYPE_BOOL = 1
    TYPE_UINT8 = 2
    TYPE_UINT16 = 3
    TYPE_UINT32 = 4
    TYPE_UINT64 = 5
    TYPE_INT8 = 6
    TYPE_INT16 = 7
    TYPE_INT32 = 8
    TYPE_INT64 = 9
    TYPE_FP16 = 10
    TYPE_FP32 = 11
    TYPE_FP64 = 12
    TYPE_STRING = 13
    TYPE_BYTES = 13  # alias: the C API calls it BYTES, the model config STRING
    TYPE_BF16 = 14


# Config type name -> numpy scalar type (``triton_string_to_numpy``). BF16 is only present when
# ml_dtypes provides a numpy dtype for it (the real module has no BF16 entry at all).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}
if datatypes.BF16_DTYPE is not None:
    TRITON_STRING_TO_NUMPY["TYPE_BF16"] = datatypes.BF16_DTYPE.type

_NUMPY_BY_ENUM: dict[int, Any] = {
    int(TritonDataType[name]): numpy_type for name, numpy_type in TRITON_STRING_TO_NUMPY.items()
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32``; ``"TYPE_STRING"`` -> ``np.object_``.

    Raises:
        KeyError: for a name that is not a Triton config data type.
    """
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """Numpy scalar type of a ``TRITONSERVER_DataType`` value; None when there is none."""
    return _NUMPY_BY_ENUM.get(int(data_type))


def numpy_to_triton_type(data_type: Any) -> int | None:
    """``TRITONSERVER_DataType`` of a numpy dtype or scalar type; None when unsupported.

    Object and ``np.bytes_`` arrays are BYTES (13). Unicode (``np.str_``) has no Triton type,
    as in the real module: such tensors must be converted to object arrays first.
    """
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.kind in ("O", "S"):
        return int(TritonDataType.TYPE_STRING)
    if dtype.kind == "U":
        return None
    try:
        return datatypes.protocol_to_config(datatypes.numpy_to_protocol(dtype))
    except InferenceServerError:
        return None


def protocol_to_enum(datatype: str) -> int:
    """Protocol name (``"FP32"``, ``"BYTES"``) -> ``TRITONSERVER_DataType`` value."""
    return datatypes.protocol_to_config(datatype)


def enum_to_protocol(data_type: int) -> str:
    """``TRITONSERVER_DataType`` value -> protocol name (``"FP32"``, ``"BYTES"``)."""
    return datatypes.config_to_protocol(int(data_type))


def to_bytes_objects(array: np.ndarray) -> np.ndarray:
    """A BYTES tensor in its in-memory form: an object array whose items are ``bytes``.

    Returns ``array`` itself when it already is one (no copy). ``str`` items are UTF-8 encoded
    and any other item is written as ``str(item)``, as the real ``serialize_byte_tensor`` does.
    """
    if array.dtype == np.object_ and all(type(item) is bytes for item in array.flat):
        return array
    items = []
    for item in array.flat:
        if isinstance(item, bytes):
            items.append(bytes(item))
        elif isinstance(item, str):
            items.append(item.encode("utf-8"))
        else:
            items.append(str(item).encode("utf-8"))
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result.reshape(array.shape)


def as_protocol_array(array: np.ndarray, datatype: str) -> np.ndarray:
    """``array`` in the numpy form that carries protocol ``datatype`` (casts only if needed)."""
    if datatype == "BYTES":
        return to_bytes_objects(array)
    dtype = datatypes.protocol_to_numpy(datatype)
    return array if array.dtype == dtype else array.astype(dtype)


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | None:
    """Length-prefixed encoding of a BYTES tensor (each item: 4-byte little-endian size, data).

    Returns:
        The encoded bytes, ``b""`` for an empty tensor, or None when the array is neither an
        object nor an ``np.bytes_`` array (the real module returns None there too).
    """
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    return datatypes.serialize_bytes_tensor(to_bytes_objects(input_tensor))


def deserialize_bytes_tensor(encoded_tensor: bytes | bytearray | memoryview | np.ndarray):
    """Inverse of :func:`serialize_byte_tensor`: a flat object array of ``bytes``.

    Raises:
        TritonModelException: when the buffer is truncated.
    """
    if isinstance(encoded_tensor, np.ndarray):
        encoded_tensor = np.ascontiguousarray(encoded_tensor).tobytes()
    try:
        return datatypes.deserialize_bytes_tensor(encoded_tensor)
    except InferenceServerError as err:
        raise TritonModelException(err.message) from None
