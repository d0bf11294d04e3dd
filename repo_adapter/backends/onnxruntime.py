"""ONNX Runtime backend: Triton's ``onnxruntime`` backend on the ``onnxruntime`` Python API.

Session options, execution providers, auto-complete and the config/model checks follow
Triton's onnxruntime_backend (``src/onnxruntime.cc``), including its messages. ORT's Python
API carries strings as ``str``, so BYTES tensors travel as UTF-8 text.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.backends.gpu_memory import capped, device_total_bytes, memory_cap_bytes
from repo_adapter.backends.model_io import (
    TensorInfo,
    autocomplete_file,
    check_tensors,
    complete_config,
)
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.implicit_state import backend_inputs, backend_outputs

logger = logging.getLogger(__name__)

INTRA_OP_THREADS_ENV = "RAYTON_ORT_INTRA_OP_THREADS"

# BF16 is missing: ORT's Python API cannot hand bfloat16 tensors to numpy.
_ORT_TYPES = {
    f"tensor({onnx_name})": data_type
    for onnx_name, data_type in (
        ("bool", mc.TYPE_BOOL),
        ("uint8", mc.TYPE_UINT8),
        ("uint16", mc.TYPE_UINT16),
        ("uint32", mc.TYPE_UINT32),
        ("uint64", mc.TYPE_UINT64),
        ("int8", mc.TYPE_INT8),
        ("int16", mc.TYPE_INT16),
        ("int32", mc.TYPE_INT32),
        ("int64", mc.TYPE_INT64),
        ("float16", mc.TYPE_FP16),
        ("float", mc.TYPE_FP32),
        ("double", mc.TYPE_FP64),
        ("string", mc.TYPE_STRING),
    )
}
_GRAPH_LEVELS = {-1: "ORT_ENABLE_BASIC", 1: "ORT_ENABLE_EXTENDED", 2: "ORT_DISABLE_ALL"}
_CUDA_CHOICES = {  # Triton's integer parameters -> CUDA EP option values
    "cudnn_conv_algo_search": ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"),
    "arena_extend_strategy": ("kNextPowerOfTwo", "kSameAsRequested"),
}
_TRT_PRECISIONS = {"FP16": "trt_fp16_enable", "BF16": "trt_bf16_enable", "INT8": "trt_int8_enable"}


class OnnxRuntimeBackend(TensorBackend):
    """A Triton ``onnxruntime`` model instance: one ``InferenceSession``."""

    name = "onnxruntime"
    platforms = ("onnxruntime_onnx",)
    default_model_filename = "model.onnx"
    probe_priority = 20
    default_cpu_instance_count = 2

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._session = None
        self._run_options = None
        self._scalar_inputs: set[str] = set()
        self._outputs = list(self._output_configs)
        self._text_in = {t.name for t in self.config.input if t.data_type == mc.TYPE_STRING}
        self._text_out = {t.name for t in self.config.output if t.data_type == mc.TYPE_STRING}

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, model_dir: Path) -> None:
        """Triton's ORT auto-complete: I/O and max_batch_size from the model file.

        Skipped when the config declares inputs and outputs. Reads the newest version the
        version policy serves (the version Triton's default policy loads and completes).
        """
        if (config.input or config.batch_input) and config.output:
            return
        found = autocomplete_file(config, model_dir, cls.default_model_filename)
        path = _model_file(found) if found is not None else None
        if path is None or not path.is_file():
            return  # the repository scan reports the missing version or file
        ort = _ort()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = _open_session(options, path, ["CPUExecutionProvider"], config)
        inputs = _infos(config, session.get_inputs())
        outputs = _infos(config, session.get_outputs())
        complete_config(config, inputs, outputs)

    def load(self) -> None:
        ort = _ort()
        path = _model_file(self.model.model_path)
        if not path.is_file():
            raise InferenceServerError(
                f"unable to find '{path}' for model instance '{self.instance.name}'",
                StatusCode.UNAVAILABLE,
            )
        providers = _providers(ort, self.config, self.instance)
        session = _open_session(_session_options(ort, self.config), path, providers, self.config)
        _validate(self.config, session)
        # Scalar model inputs are declared as dims [1]; Triton feeds them with rank 0.
        self._scalar_inputs = {arg.name for arg in session.get_inputs() if not arg.shape}
        self._run_options = ort.RunOptions()
        key = "memory.enable_memory_arena_shrinkage"
        if key in self.config.parameters:
            self._run_options.add_run_config_entry(key, _param(self.config, key))
        self._session = session

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {}
        for name, array in inputs.items():
            if name in self._scalar_inputs:
                array = array.reshape(())
            feed[name] = _to_text(name, array) if name in self._text_in else array
        try:
            results = self._session.run(self._outputs, feed, self._run_options)
        except Exception as err:  # ORT raises its own exception types for run failures
            raise InferenceServerError(f"onnx runtime error: {err}", StatusCode.INTERNAL) from err
        outputs = {}
        for name, array in zip(self._outputs, results, strict=True):
            if name in self._text_out:
                array = _to_bytes(array)
            if array.ndim == 0:  # a scalar output takes its config dims, as in Triton
                array = array.reshape(tuple(self._output_configs[name].dims))
            outputs[name] = array
        return outputs

    def unload(self) -> None:
        self._session = None
        super().unload()


def _ort():
    try:
        import onnxruntime
    except ImportError as err:
        raise InferenceServerError(
            f"ONNX Runtime is not installed: {err}", StatusCode.UNAVAILABLE
        ) from None
    return onnxruntime


def _model_file(path: Path) -> Path:
    # A directory ``model.onnx/`` holds ``model.onnx`` next to its external data files.
    return path / "model.onnx" if path.is_dir() else path


def _open_session(options, path: Path, providers: list, config: mc.ModelConfig):
    try:
        return _ort().InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as err:  # protobuf, ORT and OS errors all mean "cannot load"
        raise InferenceServerError(
            f"failed to load model '{config.name}': unable to load ONNX file '{path}': {err}",
            StatusCode.UNAVAILABLE,
        ) from None


def _param(config: mc.ModelConfig, key: str, kind: type = str, default=None):
    """A ``parameters`` entry parsed as Triton's backends parse it (str, int or bool)."""
    if key not in config.parameters:
        return default
    value = config.parameters[key].string_value
    if kind is str:
        return value
    if kind is bool and value.lower() in ("true", "on", "1", "false", "off", "0"):
        return value.lower() in ("true", "on", "1")
    if kind is int and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ModelConfigError(
        f"model '{config.name}': failed to convert parameter '{key}' value '{value}' to "
        f"{kind.__name__}"
    )


def _session_options(ort, config: mc.ModelConfig):
    options = ort.SessionOptions()
    level = _GRAPH_LEVELS.get(config.optimization.graph.level, "ORT_ENABLE_ALL")
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    mode = _param(config, "execution_mode", int, 0)
    if mode not in (0, 1):
        raise ModelConfigError(
            "Invalid configuration value provided. Expected values for execution_mode are 0 "
            f"or 1 but got {mode} ."
        )
    modes = (ort.ExecutionMode.ORT_SEQUENTIAL, ort.ExecutionMode.ORT_PARALLEL)
    options.execution_mode = modes[mode]
    # 0 lets ORT choose (Triton's default); the env var is a process-wide fallback.
    intra = _param(config, "intra_op_thread_count", int, 0) or _env_threads()
    if intra > 0:
        options.intra_op_num_threads = intra
    inter = _param(config, "inter_op_thread_count", int, 0)
    if inter > 0:
        options.inter_op_num_threads = inter
    for key, attribute in (
        ("enable_mem_arena", "enable_cpu_mem_arena"),
        ("enable_mem_pattern", "enable_mem_pattern"),
    ):
        if key in config.parameters:
            setattr(options, attribute, _param(config, key, bool))
    key = "session.use_device_allocator_for_initializers"
    if key in config.parameters:
        options.add_session_config_entry(key, _param(config, key))
    return options


def _env_threads() -> int:
    value = os.environ.get(INTRA_OP_THREADS_ENV, "")
    if value.strip().isdigit():
        return int(value)
    if value:
        logger.warning("ignoring %s=%r: not a non-negative integer", INTRA_OP_THREADS_ENV, value)
    return 0


def _providers(ort, config: mc.ModelConfig, instance: InstanceSpec) -> list:
    available = set(ort.get_available_providers())
    accelerators = config.optimization.execution_accelerators
    providers: list = []
    if instance.kind == "GPU" and "CUDAExecutionProvider" not in available:
        logger.warning("model '%s': no CUDA execution provider, running on CPU", config.name)
    elif instance.kind == "GPU":
        cap = memory_cap_bytes(instance, device_total_bytes(instance.device_id))
        for accelerator in accelerators.gpu_execution_accelerator:
            if accelerator.name == "tensorrt" and "TensorrtExecutionProvider" in available:
                options = _trt_options(accelerator, instance.device_id, cap)
                providers.append(("TensorrtExecutionProvider", options))
            elif accelerator.name not in ("cuda", "tensorrt"):
                raise ModelConfigError(
                    f"unknown Execution Accelerator '{accelerator.name}' is requested"
                )
        providers.append(("CUDAExecutionProvider", cuda_provider_options(config, instance, cap)))
    for accelerator in accelerators.cpu_execution_accelerator:
        if accelerator.name != "openvino" or "OpenVINOExecutionProvider" not in available:
            raise ModelConfigError(
                f"unknown Execution Accelerator '{accelerator.name}' is requested"
            )
        providers.append(("OpenVINOExecutionProvider", {"device_type": "CPU"}))
    return [*providers, "CPUExecutionProvider"]


def cuda_provider_options(
    config: mc.ModelConfig, instance: InstanceSpec, memory_cap: int | None
) -> dict[str, str]:
    """The CUDA execution provider's options: Triton's parameters, and ``gpu_mem_limit`` no
    larger than the instance's share of the device (``memory_cap`` bytes; None: no share)."""
    # kSameAsRequested by default (Triton: kNextPowerOfTwo): replicas sharing a GPU
    # should not reserve power-of-two arena chunks they never use.
    cuda = {"device_id": str(instance.device_id), "arena_extend_strategy": "kSameAsRequested"}
    for key, choices in _CUDA_CHOICES.items():
        index = _param(config, key, int)
        if index is not None and not 0 <= index < len(choices):
            raise ModelConfigError(f"unsupported {key} value '{index}' is requested")
        if index is not None:
            cuda[key] = choices[index]
    for key in ("gpu_mem_limit", "do_copy_in_default_stream"):
        if key in config.parameters:
            cuda[key] = _param(config, key)
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accelerator.name == "cuda":
            cuda.update(accelerator.parameters)
    limit = capped(cuda.get("gpu_mem_limit"), memory_cap)
    if limit is not None:
        cuda["gpu_mem_limit"] = limit
    return cuda


def _trt_options(accelerator, device_id: int, memory_cap: int | None = None) -> dict[str, str]:
    options = {"device_id": str(device_id)}
    for key, value in accelerator.parameters.items():
        if key == "precision_mode" and value in (*_TRT_PRECISIONS, "FP32"):
            options.update({_TRT_PRECISIONS[value]: "1"} if value in _TRT_PRECISIONS else {})
        elif key == "precision_mode":
            raise ModelConfigError(f"unsupported precision mode '{value}' is requested")
        elif key == "max_workspace_size_bytes":
            options["trt_max_workspace_size"] = value
        elif key.startswith(("trt_", "int8_")):
            options[key if key.startswith("trt_") else f"trt_{key}"] = value
        else:
            raise ModelConfigError(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
    workspace = capped(options.get("trt_max_workspace_size"), memory_cap)
    if workspace is not None:
        options["trt_max_workspace_size"] = workspace
    return options


def _infos(config: mc.ModelConfig, args: Sequence) -> dict[str, TensorInfo]:
    infos = {}
    for arg in args:
        if arg.type not in _ORT_TYPES:
            raise InferenceServerError(
                f"model '{config.name}': unsupported ONNX type '{arg.type}' for I/O "
                f"'{arg.name}' (supported: {', '.join(_ORT_TYPES)})",
                StatusCode.UNSUPPORTED,
            )
        dims = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
        infos[arg.name] = TensorInfo(arg.name, _ORT_TYPES[arg.type], dims)
    return infos


def _validate(config: mc.ModelConfig, session) -> None:
    """Triton's ValidateInputs/ValidateOutputs: the config must describe the model."""
    # A sequence model's control and state inputs are the sequence batcher's to fill
    filled = {control.name for control in config.sequence_batching.control_input}
    filled.update(backend_inputs(config))
    inputs = {n: i for n, i in _infos(config, session.get_inputs()).items() if n not in filled}
    required = [t for t in config.input if not t.optional]
    if len(inputs) != len(required):
        raise ModelConfigError(
            f"unable to load model '{config.name}', configuration expects {len(required)} "
            f"inputs, model provides {len(inputs)}"
        )
    for tensor in config.input:
        if tensor.optional and config.max_batch_size != 0:
            raise ModelConfigError(
                f"unable to load model '{config.name}', optional input '{tensor.name}' is not "
                "supported for models that support batching"
            )
    inputs.update(_infos(config, session.get_overridable_initializers()))
    check_tensors(config, "input", config.input, inputs)
    outputs = _infos(config, session.get_outputs())
    check_tensors(config, "output", [*config.output, *backend_outputs(config)], outputs)


def _to_text(name: str, array: np.ndarray) -> np.ndarray:
    try:
        items = [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in array.flat]
    except UnicodeDecodeError:
        raise InferenceServerError(
            f"input '{name}': ONNX Runtime strings must be valid UTF-8"
        ) from None
    return _object_array(items, array.shape)


def _to_bytes(array: np.ndarray) -> np.ndarray:
    items = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in array.flat]
    return _object_array(items, array.shape)


def _object_array(items: list, shape: tuple[int, ...]) -> np.ndarray:
    result = np.empty(len(items), dtype=np.object_)
    result[:] = items
    return result.reshape(shape)
