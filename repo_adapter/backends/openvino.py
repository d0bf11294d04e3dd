"""Triton's ``openvino`` backend on OpenVINO's runtime: IR (``model.xml`` + ``model.bin``) or
ONNX files, compiled for the instance's device.

Follows Triton's openvino backend: its parameters (``NUM_STREAMS``, ``INFERENCE_NUM_THREADS``,
``COMPILATION_NUM_THREADS``, ``PERFORMANCE_HINT``, ``ENABLE_BATCH_PADDING``,
``SKIP_OV_DYNAMIC_BATCHSIZE``, ``RESHAPE_IO_LAYERS``, and the older ``CPU_THREADS_NUM`` /
``CPU_THROUGHPUT_STREAMS``), a dynamic batch dimension for a batching model (unless the config
skips it), and inputs and outputs auto-completed from the model. A ``KIND_GPU`` instance
compiles for OpenVINO's ``GPU`` device (Intel GPUs) where the runtime has one, otherwise it
reports the model UNAVAILABLE; ``KIND_CPU`` runs on ``CPU``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.backends.model_io import (
    TensorInfo,
    autocomplete_file,
    check_tensors,
    complete_config,
)
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode

logger = logging.getLogger(__name__)

# OpenVINO element type names -> Triton's
_OV_TYPES = {
    "f16": mc.TYPE_FP16,
    "f32": mc.TYPE_FP32,
    "f64": mc.TYPE_FP64,
    "bf16": mc.TYPE_BF16,
    "i8": mc.TYPE_INT8,
    "i16": mc.TYPE_INT16,
    "i32": mc.TYPE_INT32,
    "i64": mc.TYPE_INT64,
    "u8": mc.TYPE_UINT8,
    "u16": mc.TYPE_UINT16,
    "u32": mc.TYPE_UINT32,
    "u64": mc.TYPE_UINT64,
    "boolean": mc.TYPE_BOOL,
    "string": mc.TYPE_STRING,
}
_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
_PRECISIONS = ("f32", "bf16", "f16")
# Triton parameter -> OpenVINO property, for those that take a count
_COUNTS = {
    "INFERENCE_NUM_THREADS": "INFERENCE_NUM_THREADS",
    "CPU_THREADS_NUM": "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS": "COMPILATION_NUM_THREADS",
}
_STREAMS = ("NUM_STREAMS", "CPU_THROUGHPUT_STREAMS")


class OpenVinoBackend(TensorBackend):
    """A Triton ``openvino`` model instance: one compiled model and its infer request."""

    name = "openvino"
    default_model_filename = "model.xml"

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._request = None
        self._outputs: dict[str, object] = {}
        self._pad_to = 0

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, model_dir: Path) -> None:
        """Inputs, outputs and ``max_batch_size`` from the model, as Triton's openvino backend
        completes them; skipped when the config declares inputs and outputs."""
        if config.input and config.output:
            return
        path = autocomplete_file(config, model_dir, cls.default_model_filename)
        if path is None or not path.is_file():
            return  # the repository scan reports the missing version or file
        model = _read(_ov().Core(), path, config)
        inputs = _infos(config, model.inputs)
        outputs = _infos(config, model.outputs)
        complete_config(config, inputs, outputs)

    def load(self) -> None:
        ov = _ov()
        path = self.model.model_path
        if not path.is_file():
            raise InferenceServerError(
                f"unable to find '{path}' for model instance '{self.instance.name}'",
                StatusCode.UNAVAILABLE,
            )
        core = ov.Core()
        device = _device(core, self.config, self.instance)
        model = _read(core, path, self.config)
        _reshape(ov, model, self.config)
        # A model that keeps a fixed batch (SKIP_OV_DYNAMIC_BATCHSIZE) is checked as batching.
        fixed = self.config.max_batch_size > 0 and _flag(self.config, "SKIP_OV_DYNAMIC_BATCHSIZE")
        inputs = _infos(self.config, model.inputs, fixed)
        outputs = _infos(self.config, model.outputs, fixed)
        check_tensors(self.config, "input", self.config.input, inputs)
        check_tensors(self.config, "output", self.config.output, outputs)
        try:
            compiled = core.compile_model(model, device, compile_properties(self.config))
        except Exception as err:  # OpenVINO raises RuntimeError subclasses of its own
            raise InferenceServerError(
                f"failed to load model '{self.config.name}': OpenVINO cannot compile it for "
                f"{device}: {err}",
                StatusCode.UNAVAILABLE,
            ) from None
        self._outputs = {name: compiled.output(name) for name in outputs}
        self._request = compiled.create_infer_request()
        if _flag(self.config, "ENABLE_BATCH_PADDING") and self.config.max_batch_size > 0:
            self._pad_to = self.config.max_batch_size

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = next(iter(inputs.values())).shape[0] if inputs else 0
        feed = inputs
        if self._pad_to and 0 < rows < self._pad_to:  # a fixed-batch model: pad, then trim
            feed = {name: _padded(array, self._pad_to) for name, array in inputs.items()}
        try:
            results = self._request.infer(feed)
        except Exception as err:
            raise InferenceServerError(f"OpenVINO error: {err}", StatusCode.INTERNAL) from None
        outputs = {}
        for name, port in self._outputs.items():
            array = np.asarray(results[port])
            if feed is not inputs:
                array = array[:rows]
            outputs[name] = array.copy()  # the request's buffers are reused by the next run
        return outputs

    def unload(self) -> None:
        self._request = None
        self._outputs = {}
        super().unload()


def _ov():
    try:
        import openvino
    except ImportError as err:
        raise InferenceServerError(
            f"OpenVINO is not installed (pip install 'rayton[openvino]'): {err}",
            StatusCode.UNAVAILABLE,
        ) from None
    return openvino


def _read(core, path: Path, config: mc.ModelConfig):
    try:
        return core.read_model(str(path))
    except Exception as err:  # a missing .bin, a corrupt file: the model cannot be read
        raise InferenceServerError(
            f"failed to load model '{config.name}': OpenVINO cannot read '{path}': {err}",
            StatusCode.UNAVAILABLE,
        ) from None


def _device(core, config: mc.ModelConfig, instance: InstanceSpec) -> str:
    if instance.kind != "GPU":
        return "CPU"
    if "GPU" not in core.available_devices:
        raise InferenceServerError(
            f"model '{config.name}' instance '{instance.name}' is KIND_GPU, but OpenVINO sees "
            f"no GPU device here (devices: {', '.join(core.available_devices)})",
            StatusCode.UNAVAILABLE,
        )
    return "GPU"


def compile_properties(config: mc.ModelConfig) -> dict[str, str]:
    """OpenVINO's compile properties from the config's parameters (Triton's names), checked."""
    properties: dict[str, str] = {}
    for key, prop in _COUNTS.items():
        value = _param(config, key)
        if value is None:
            continue
        if not value.isdigit():
            raise ModelConfigError(
                f"model '{config.name}': parameter '{key}' must be a non-negative integer, "
                f"got '{value}'"
            )
        properties[prop] = value
    for key in _STREAMS:
        value = _param(config, key)
        if value is None:
            continue
        if value.upper() == "AUTO":
            properties["NUM_STREAMS"] = "AUTO"
        elif value.isdigit():
            properties["NUM_STREAMS"] = value
        else:
            raise ModelConfigError(
                f"model '{config.name}': parameter '{key}' must be a number of streams or "
                f"'auto', got '{value}'"
            )
    hint = _param(config, "PERFORMANCE_HINT")
    if hint is not None:
        if hint.upper() not in _HINTS:
            raise ModelConfigError(
                f"model '{config.name}': parameter 'PERFORMANCE_HINT' must be one of "
                f"{', '.join(_HINTS)}, got '{hint}'"
            )
        properties["PERFORMANCE_HINT"] = hint.upper()
    if _flag(config, "ENFORCE_BF16") or _flag(config, "HINT_BF16"):
        properties["INFERENCE_PRECISION_HINT"] = "bf16"
    # OpenVINO's own property: on CPUs with bfloat16 units it computes in bf16 by default,
    # "f32" keeps a model's FP32 results.
    precision = _param(config, "INFERENCE_PRECISION_HINT")
    if precision is not None:
        if precision.lower() not in _PRECISIONS:
            raise ModelConfigError(
                f"model '{config.name}': parameter 'INFERENCE_PRECISION_HINT' must be one of "
                f"{', '.join(_PRECISIONS)}, got '{precision}'"
            )
        properties["INFERENCE_PRECISION_HINT"] = precision.lower()
    return properties


def _reshape(ov, model, config: mc.ModelConfig) -> None:
    """A batching model gets a dynamic first dimension (``SKIP_OV_DYNAMIC_BATCHSIZE=YES``
    keeps the model's); ``RESHAPE_IO_LAYERS=YES`` takes every input's shape from the config."""
    batching = config.max_batch_size > 0
    from_config = _flag(config, "RESHAPE_IO_LAYERS")
    if not (from_config or (batching and not _flag(config, "SKIP_OV_DYNAMIC_BATCHSIZE"))):
        return
    configs = {t.name: t for t in config.input}
    shapes = {}
    for port in model.inputs:
        name = port.get_any_name()
        if from_config and name in configs:
            dims = [int(d) for d in configs[name].dims]
            shape = ([-1] if batching else []) + dims
        else:
            shape = [_dim(d) for d in port.get_partial_shape()]
            if batching and shape:
                shape[0] = -1
        shapes[name] = ov.PartialShape(shape)
    try:
        model.reshape(shapes)
    except Exception as err:
        raise InferenceServerError(
            f"failed to load model '{config.name}': OpenVINO cannot reshape its inputs to "
            f"{ {k: str(v) for k, v in shapes.items()} }: {err} (set SKIP_OV_DYNAMIC_BATCHSIZE "
            "to YES for a model with a fixed batch, with ENABLE_BATCH_PADDING for smaller "
            "batches)",
            StatusCode.UNAVAILABLE,
        ) from None


def _dim(dimension) -> int:
    return -1 if dimension.is_dynamic else int(dimension.get_length())


def _infos(config: mc.ModelConfig, ports, batch_as_dynamic: bool = False) -> dict[str, TensorInfo]:
    """The ports as tensors (``batch_as_dynamic``: a fixed first dimension read as -1)."""
    infos = {}
    for port in ports:
        name = port.get_any_name()
        element = port.get_element_type().get_type_name()
        if element not in _OV_TYPES:
            raise InferenceServerError(
                f"model '{config.name}': unsupported OpenVINO type '{element}' for I/O '{name}'",
                StatusCode.UNSUPPORTED,
            )
        shape = port.get_partial_shape()
        dims = (-1,) if shape.rank.is_dynamic else tuple(_dim(d) for d in shape)
        if batch_as_dynamic and dims:
            dims = (-1, *dims[1:])
        infos[name] = TensorInfo(name, _OV_TYPES[element], dims)
    return infos


def _param(config: mc.ModelConfig, key: str) -> str | None:
    if key not in config.parameters:
        return None
    return config.parameters[key].string_value.strip()


def _flag(config: mc.ModelConfig, key: str) -> bool:
    return (_param(config, key) or "").upper() in ("YES", "TRUE", "1")


def _padded(array: np.ndarray, rows: int) -> np.ndarray:
    pad = np.zeros((rows - array.shape[0], *array.shape[1:]), dtype=array.dtype)
    return np.concatenate([array, pad], axis=0)
