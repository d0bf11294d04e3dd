"""Where a serialized ``ModelInferRequest`` goes, read without parsing its tensors.

The gRPC frontend forwards inference requests as their wire bytes; to route one it needs only
``model_name`` (field 1), ``model_version`` (field 2), for stream errors ``id`` (field 3) and,
to keep a stream's requests of one sequence in order and send them to the replica holding the
sequence, the ``sequence_id``, ``sequence_start`` and ``sequence_end`` parameters (field 4,
before the tensors).
Parsing the whole message would decode every tensor only to throw them away (the model's
replica parses it again). This reads the top-level fields of the protobuf wire format and skips
the others by their length: no copy, cost independent of the tensor bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from repo_adapter.errors import InferenceServerError, StatusCode

_MODEL_NAME, _MODEL_VERSION, _ID, _PARAMETERS = 1, 2, 3, 4
# InferParameter's fields
_BOOL, _INT64, _STRING, _DOUBLE, _UINT64 = 1, 2, 3, 4, 5
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")


@dataclass(frozen=True)
class InferRoute:
    """The routing fields of one ``ModelInferRequest`` (the version string as sent)."""

    model_name: str = ""
    model_version: str = ""
    id: str = ""
    sequence_id: int | str = 0  # the request's correlation ID (0: none)
    sequence_start: bool = False
    sequence_end: bool = False


def _malformed(detail: str) -> InferenceServerError:
    return InferenceServerError(
        f"failed to parse ModelInferRequest: {detail}", StatusCode.INVALID_ARG
    )


def _varint(message: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(message):
            raise _malformed("truncated varint")
        byte = message[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift >= 64:
            raise _malformed("varint too long")


def _text(data: memoryview) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError:
        raise _malformed("a string field is not valid UTF-8") from None


def read_infer_route(message: bytes) -> InferRoute:
    """The model name, version and id of a serialized ``ModelInferRequest``.

    Raises INVALID_ARG when the bytes are not a well-formed protobuf message (as parsing the
    whole message would). As protobuf does, the last occurrence of a field wins.
    """
    view = memoryview(message)
    fields: dict[int, str] = {}
    sequence: dict[str, int | str | bool] = {}
    position, end = 0, len(view)
    while position < end:
        key, position = _varint(view, position)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise _malformed("field number 0")
        if wire_type == _VARINT:
            _, position = _varint(view, position)
        elif wire_type == _FIXED64:
            position += 8
        elif wire_type == _FIXED32:
            position += 4
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _varint(view, position)
            if number in (_MODEL_NAME, _MODEL_VERSION, _ID) and position + length <= end:
                fields[number] = _text(view[position : position + length])
            elif number == _PARAMETERS and position + length <= end:
                key, value = _parameter(view[position : position + length])
                if key in _SEQUENCE_PARAMETERS:
                    sequence[key] = value
            position += length
        else:  # groups (3, 4) and unknown wire types do not occur in this message
            raise _malformed(f"unexpected wire type {wire_type}")
        if position > end:
            raise _malformed("truncated message")
    sequence_id = sequence.get("sequence_id", 0)
    return InferRoute(
        fields.get(_MODEL_NAME, ""),
        fields.get(_MODEL_VERSION, ""),
        fields.get(_ID, ""),
        0 if isinstance(sequence_id, bool) else sequence_id,
        sequence.get("sequence_start") is True,
        sequence.get("sequence_end") is True,
    )


def _fields(message: memoryview) -> dict[int, tuple[int, int | memoryview]]:
    """The fields of a small message: number -> (wire type, varint value or bytes)."""
    found: dict[int, tuple[int, int | memoryview]] = {}
    position, end = 0, len(message)
    while position < end:
        key, position = _varint(message, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, position = _varint(message, position)
            found[number] = (wire_type, value)
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _varint(message, position)
            found[number] = (wire_type, message[position : position + length])
            position += length
        elif wire_type in (_FIXED64, _FIXED32):
            position += 8 if wire_type == _FIXED64 else 4
        else:
            raise _malformed(f"unexpected wire type {wire_type}")
    return found


def _parameter(entry: memoryview) -> tuple[str, int | str | bool]:
    """One entry of the ``parameters`` map: its key, and its value when a boolean, an integer
    or a string (0 otherwise)."""
    fields = _fields(entry)
    key = fields.get(1, (0, b""))[1]
    name = _text(key) if isinstance(key, memoryview) else ""
    value = fields.get(2, (0, b""))[1]
    if not isinstance(value, memoryview):
        return name, 0
    parameter = _fields(value)
    if _BOOL in parameter and isinstance(parameter[_BOOL][1], int):
        return name, bool(parameter[_BOOL][1])
    if _STRING in parameter and isinstance(parameter[_STRING][1], memoryview):
        return name, _text(parameter[_STRING][1])
    for number in (_INT64, _UINT64):
        if number in parameter and isinstance(parameter[number][1], int):
            number_value = parameter[number][1]
            if number == _INT64 and number_value >= 1 << 63:
                number_value -= 1 << 64
            return name, number_value
    return name, 0
