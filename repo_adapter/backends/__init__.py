"""Model backends behind one interface, found by the config's ``backend`` name.

Each backend describes itself on its class (:class:`~repo_adapter.backends.base.Backend`:
platform names, default model file, place in the auto-detection order, default CPU instance
count), so a new backend is one module. rayton's own are listed here; another package adds
one without editing rayton through the ``rayton.backends`` entry point group::

    [project.entry-points."rayton.backends"]
    mybackend = "my_package.backend:MyBackend"

Modules are imported when a backend is first asked for, and import their runtime only when a
model loads: a repository without TorchScript models never imports torch, and one without
TensorRT never needs the TensorRT runtime.
"""

from __future__ import annotations

import functools
import importlib
import logging
from importlib.metadata import entry_points

from repo_adapter.backends.base import Backend, InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.errors import ModelConfigError

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "InstanceSpec",
    "ModelVersion",
    "TensorBackend",
    "backend_class",
    "backend_classes",
    "backend_for_platform",
    "is_registered",
    "model_backend_class",
    "probe_order",
    "supported_backends",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rayton.backends"
# config ``backend`` -> "module:class"
_BUILTIN = {
    "onnxruntime": "repo_adapter.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "repo_adapter.backends.openvino:OpenVinoBackend",
    "pytorch": "repo_adapter.backends.pytorch:PyTorchBackend",
    "python": "repo_adapter.backends.python:PythonBackend",
    "tensorrt": "repo_adapter.backends.tensorrt:TensorRTBackend",
    "tensorflow": "repo_adapter.backends.tensorflow:TensorFlowBackend",
}


@functools.cache
def _registered() -> dict[str, str]:
    """rayton's backends, then those other packages declare (a built-in name stays rayton's)."""
    found = dict(_BUILTIN)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in found:
            logger.warning("backend '%s' of %s ignored: rayton has one", entry.name, entry.value)
            continue
        found[entry.name] = entry.value
    return found


def supported_backends() -> tuple[str, ...]:
    return tuple(_registered())


def is_registered(backend: str) -> bool:
    """Whether ``backend`` names one of rayton's (or a plugin's) Python backends; any other
    name is a Triton C/C++ backend library's (:mod:`repo_adapter.backends.native`) or a
    python-based backend's (:mod:`repo_adapter.backends.backend_files`)."""
    return backend in _registered()


def model_backend_class(model: ModelVersion) -> type[Backend]:
    """The class serving ``model``: the python backend for a python-based backend's model, its
    C/C++ library's when the scan found one, else the registered backend its config names."""
    if model.python_based_backend:
        return backend_class("python")
    if model.backend_file is not None:
        from repo_adapter.backends.native.backend import native_backend_class

        return native_backend_class(model.config.backend, model.backend_file)
    return backend_class(model.config.backend)


@functools.cache
def _load(target: str) -> type[Backend]:
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def backend_class(backend: str) -> type[Backend]:
    """The class implementing ``backend``; UNAVAILABLE-style error for unknown names."""
    target = _registered().get(backend)
    if target is None:
        raise ModelConfigError(
            f"unsupported backend '{backend}' (supported: {', '.join(supported_backends())})"
        )
    try:
        return _load(target)
    except ImportError as err:  # a runtime the module needs at import, missing on this node
        raise ModelConfigError(
            f"backend '{backend}' cannot be used here: {type(err).__name__}: {err}"
        ) from None


def backend_classes() -> list[type[Backend]]:
    """Every backend that can be imported here, in registration order."""
    classes = []
    for name in _registered():
        try:
            classes.append(backend_class(name))
        except ModelConfigError as err:
            logger.debug("%s", err)
    return classes


def backend_for_platform(platform: str) -> str | None:
    """The backend core maps ``platform`` to (``onnxruntime_onnx`` -> ``onnxruntime``)."""
    for cls in backend_classes():
        if platform in cls.platforms:
            return cls.name
    return None


def probe_order() -> list[type[Backend]]:
    """The backends core's auto-detection tries, in its order (by default model file)."""
    probed = [cls for cls in backend_classes() if cls.probe_priority is not None]
    return sorted(probed, key=lambda cls: cls.probe_priority)
