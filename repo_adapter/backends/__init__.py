"""Model backends behind one interface, looked up by the config's ``backend`` name.

Modules are imported lazily so that a repository without TorchScript models never imports
torch, and one without TensorRT never needs the TensorRT runtime.
"""

from __future__ import annotations

import importlib

from repo_adapter.backends.base import Backend, InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.errors import ModelConfigError

__all__ = ["Backend", "InstanceSpec", "ModelVersion", "TensorBackend", "backend_class"]

# config ``backend`` -> "module:class"
_BACKENDS = {
    "onnxruntime": "repo_adapter.backends.onnxruntime:OnnxRuntimeBackend",
    "pytorch": "repo_adapter.backends.pytorch:PyTorchBackend",
    "python": "repo_adapter.backends.python:PythonBackend",
    "tensorrt": "repo_adapter.backends.tensorrt:TensorRTBackend",
}

SUPPORTED_BACKENDS = tuple(_BACKENDS)


def backend_class(backend: str) -> type[Backend]:
    """The class implementing ``backend``; UNAVAILABLE-style error for unknown names."""
    try:
        target = _BACKENDS[backend]
    except KeyError:
        raise ModelConfigError(
            f"unsupported backend '{backend}' (supported: {', '.join(SUPPORTED_BACKENDS)})"
        ) from None
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:  # e.g. torch or tensorrt not installed on this node
        raise ModelConfigError(
            f"backend '{backend}' cannot be used here: {type(err).__name__}: {err}"
        ) from None
    return getattr(module, class_name)
