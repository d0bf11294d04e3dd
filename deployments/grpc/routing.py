"""Where a serialized ``ModelInferRequest`` goes, read without parsing its tensors.

The gRPC frontend forwards inference requests as their wire bytes; to route one it needs only
``model_name`` (field 1), ``model_version`` (field 2) and, for stream errors, ``id`` (field 3).
Parsing the whole message would decode every tensor only to throw them away (the model's
replica parses it again). This reads the top-level fields of the protobuf wire format and skips
the others by their length: no copy, cost independent of the tensor bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from repo_adapter.errors import InferenceServerError, StatusCode

_MODEL_NAME, _MODEL_VERSION, _ID = 1, 2, 3
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class InferRoute:
    """The routing fields of one ``ModelInferRequest`` (the version string as sent)."""

    model_name: str = ""
    model_version: str = ""
    id: str = ""


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
            position += length
        else:  # groups (3, 4) and unknown wire types do not occur in this message
            raise _malformed(f"unexpected wire type {wire_type}")
        if position > end:
            raise _malformed("truncated message")
    return InferRoute(
        fields.get(_MODEL_NAME, ""), fields.get(_MODEL_VERSION, ""), fields.get(_ID, "")
    )
