"""The ``triton_python_backend_utils`` module that Triton Python models import.

``import triton_python_backend_utils as pb_utils`` resolves to this module once
:mod:`repo_adapter.python_backend` is imported. It offers the documented surface of Triton's
module (which combines ``triton_python_backend_utils.py`` with the stub's C++ bindings):
tensors, requests and responses, BLS, errors, logging, custom metrics, the auto-complete
``ModelConfig``, the config/tensor lookup helpers, dtype conversions and the constants.

Differences from Triton are documented where they are defined: tensors live in this process
(no shared memory; ``as_numpy()`` of an input is the request's own array), BLS and model control
go through hooks the serving layer installs (see :mod:`repo_adapter.python_backend.runtime`),
and decoupled models are refused at load.
"""

from __future__ import annotations

from typing import Any

from repo_adapter.python_backend import runtime
from repo_adapter.python_backend.dtypes import (
    TRITON_STRING_TO_NUMPY,
    TritonDataType,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from repo_adapter.python_backend.inference import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    MemoryType,
    PreferredMemory,
    ResponseIterator,
)
from repo_adapter.python_backend.logs import Logger, LogLevel
from repo_adapter.python_backend.metrics import Metric, MetricFamily, MetricKind
from repo_adapter.python_backend.model_config import ModelConfig
from repo_adapter.python_backend.model_control import is_model_ready, load_model, unload_model
from repo_adapter.python_backend.tensor import Tensor
from repo_adapter.python_backend.triton_error import (
    TritonError,
    TritonErrorCode,
    TritonModelException,
)

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "TYPE_BF16",
    "TYPE_BOOL",
    "TYPE_BYTES",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_INVALID",
    "TYPE_STRING",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "Tensor",
    "TritonDataType",
    "TritonError",
    "TritonErrorCode",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU
TRITONSERVER_MEMORY_CPU_PINNED = MemoryType.TRITONSERVER_MEMORY_CPU_PINNED
TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU

TYPE_INVALID = TritonDataType.TYPE_INVALID
TYPE_BOOL = TritonDataType.TYPE_BOOL
TYPE_UINT8 = TritonDataType.TYPE_UINT8
TYPE_UINT16 = TritonDataType.TYPE_UINT16
TYPE_UINT32 = TritonDataType.TYPE_UINT32
TYPE_UINT64 = TritonDataType.TYPE_UINT64
TYPE_INT8 = TritonDataType.TYPE_INT8
TYPE_INT16 = TritonDataType.TYPE_INT16
TYPE_INT32 = TritonDataType.TYPE_INT32
TYPE_INT64 = TritonDataType.TYPE_INT64
TYPE_FP16 = TritonDataType.TYPE_FP16
TYPE_FP32 = TritonDataType.TYPE_FP32
TYPE_FP64 = TritonDataType.TYPE_FP64
TYPE_STRING = TritonDataType.TYPE_STRING
TYPE_BYTES = TritonDataType.TYPE_BYTES
TYPE_BF16 = TritonDataType.TYPE_BF16


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input tensor ``name`` of a request, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The output tensor ``name`` of a response, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of input ``name`` in a config dict, or None.

    The dict is ``json.loads(args["model_config"])`` in ``initialize``.
    """
    for entry in model_config.get("input", []):
        if entry.get("name") == name:
            return entry
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config entry of output ``name`` in a config dict, or None."""
    for entry in model_config.get("output", []):
        if entry.get("name") == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether a config dict sets ``model_transaction_policy { decoupled: true }``."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def get_model_dir() -> str:
    """The version directory of the model whose method is running (where model.py is).

    Raises:
        TritonModelException: outside ``auto_complete_config``/``initialize``/``execute``/
            ``finalize``.
    """
    call = runtime.current_call()
    if call is None or call.version_dir is None:
        raise TritonModelException("get_model_dir() is only available while a model method runs")
    return str(call.version_dir)
