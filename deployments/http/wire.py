"""Definitions shared by HTTP request decoding and response encoding.

Header names, reserved parameters, TritonJson's error wording, the shared-memory and raw-input
specs, and JSON reading/writing (orjson when installed, the standard library otherwise).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from repo_adapter.datatypes import config_to_protocol

try:  # Optional accelerator: parses and writes JSON (numpy arrays included) several times faster.
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

INFERENCE_HEADER_CONTENT_LENGTH = "Inference-Header-Content-Length"
CONTENT_TYPE = "Content-Type"
CONTENT_ENCODING = "Content-Encoding"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"

RESERVED_PARAMETER_PREFIX = "triton_"

# FP16 and BF16 tensors have no JSON form (binary data only), as in Triton.
NO_JSON_DATATYPES = frozenset(("FP16", "BF16"))


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
    document = json.loads(buffer)
    if _SURROGATE_ESCAPE.search(
        buffer if isinstance(buffer, bytes) else buffer.encode("utf-8", "surrogatepass")
    ):
        _reject_lone_surrogates(document)
    return document


# A \uD800-\uDFFF escape. Paired ones decode to one character; a lone one would leave a
# string that cannot be written as UTF-8 (orjson refuses it, the stdlib lets it through).
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def _reject_lone_surrogates(value: Any) -> None:
    """ValueError, in rapidjson's words (Triton's parser), for any string with a lone surrogate."""
    if isinstance(value, str):
        if any("\ud800" <= char <= "\udfff" for char in value):
            raise ValueError("The surrogate pair in string is invalid.")
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_lone_surrogates(key)
            _reject_lone_surrogates(item)
    elif isinstance(value, list):
        for item in value:
            _reject_lone_surrogates(item)


def json_dumps(obj: Any, finite: bool = True) -> bytes:
    """Compact UTF-8 JSON; numpy arrays and scalars are written as JSON arrays and numbers.

    ``finite=False``: the document may hold NaN or infinities, which are written as Triton's
    writer does (``NaN``, ``Infinity``); orjson would write them as ``null``.
    """
    if _orjson is not None and finite:
        try:
            return _orjson.dumps(obj, option=_orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:
            pass  # e.g. surrogate-escaped BYTES or an exotic dtype: the stdlib path handles them
    return _stdlib_json_dumps(obj)


def _stdlib_json_dumps(obj: Any) -> bytes:
    # surrogateescape turns BYTES outputs decoded with it back into their original raw bytes.
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte: write it as \uXXXX
        return json.dumps(
            obj, ensure_ascii=True, separators=(",", ":"), default=_json_default
        ).encode("ascii")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
