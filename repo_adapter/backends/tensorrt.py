"""TensorRT backend: serialized engines (``model.plan``) through the ``tensorrt`` Python runtime.

Needs the TensorRT runtime and a CUDA GPU (device buffers come from torch.cuda); without
either, loading fails with UNAVAILABLE. There is no CPU fallback: a plan file is compiled
for one GPU architecture. Only plain tensors are supported (no shape tensors, no
data-dependent output shapes); execution uses optimization profile 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.backends.gpu_memory import (
    device_total_bytes,
    memory_cap_bytes,
    torch_memory_fraction,
)
from repo_adapter.datatypes import BF16_DTYPE
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode
from repo_adapter.version_dirs import available_versions

# TensorRT DataType name -> (config data type, torch dtype name)
_TRT_TYPES = {
    "FLOAT": (mc.TYPE_FP32, "float32"),
    "HALF": (mc.TYPE_FP16, "float16"),
    "BF16": (mc.TYPE_BF16, "bfloat16"),
    "INT8": (mc.TYPE_INT8, "int8"),
    "INT32": (mc.TYPE_INT32, "int32"),
    "INT64": (mc.TYPE_INT64, "int64"),
    "BOOL": (mc.TYPE_BOOL, "bool"),
    "UINT8": (mc.TYPE_UINT8, "uint8"),
}


class EngineTensor(NamedTuple):
    """One engine I/O tensor; ``profile_max`` is profile 0's largest dim 0 (inputs only)."""

    name: str
    is_input: bool
    data_type: int
    shape: list[int]
    profile_max: int


class TensorRTBackend(TensorBackend):
    """A Triton ``tensorrt`` model instance: one engine and execution context on one GPU."""

    name = "tensorrt"
    platforms = ("tensorrt_plan",)
    default_model_filename = "model.plan"
    probe_priority = 10

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._engine = None
        self._context = None
        self._stream = None
        self._device = None
        self._torch = None
        self._torch_types: dict = {}

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, model_dir: Path) -> None:
        """Fill missing I/O and max_batch_size from the engine; a no-op without TensorRT/GPU."""
        if (config.input or config.batch_input) and config.output:
            return
        try:
            trt, _ = _runtime(config.name)
        except InferenceServerError:
            return  # load() reports the missing runtime or GPU

        versions = available_versions(model_dir)
        filename = config.default_model_filename or "model.plan"
        path = model_dir / str(versions[-1]) / filename if versions else None
        if path is None or not path.is_file():
            return  # the repository scan reports the missing version or file
        try:
            infos = _engine_infos(_deserialize(trt, path, config.name), config.name)
        except InferenceServerError:
            raise
        except Exception as err:  # the scan only expects InferenceServerError
            raise ModelConfigError(
                f"unable to read TensorRT engine '{path}' to auto-complete model "
                f"'{config.name}': {err}"
            ) from None
        inputs = [info for info in infos if info.is_input]
        batchable = all(info.shape and info.shape[0] == -1 for info in inputs)
        engine_max = min((info.profile_max for info in inputs), default=0) if batchable else 0
        if config.max_batch_size > engine_max:
            raise ModelConfigError(
                f"unable to autofill for '{config.name}': configuration specified max-batch "
                f"{config.max_batch_size} but TensorRT engine only supports max-batch {engine_max}"
            )
        if config.max_batch_size == 0:
            config.max_batch_size = engine_max
        scheduled = config.HasField("dynamic_batching") or config.HasField("sequence_batching")
        if config.max_batch_size > 1 and not scheduled:
            config.dynamic_batching.SetInParent()
        for tensors, is_input in ((config.input, True), (config.output, False)):
            if tensors:
                continue
            for info in (info for info in infos if info.is_input == is_input):
                tensor = tensors.add(name=info.name, data_type=info.data_type)
                tensor.dims.extend(info.shape[1:] if config.max_batch_size > 0 else info.shape)
                if not tensor.dims:  # as Triton: a scalar is dims [1] reshaped to []
                    tensor.dims.append(1)
                    tensor.reshape.SetInParent()

    def load(self) -> None:
        trt, torch = _runtime(self.model.name)
        if self.instance.kind not in ("GPU", "MODEL"):
            raise InferenceServerError(
                f"TensorRT model '{self.model.name}' needs KIND_GPU instances, "
                f"instance '{self.instance.name}' is KIND_{self.instance.kind}",
                StatusCode.UNAVAILABLE,
            )
        path = self.model.model_path
        if not path.is_file():
            raise InferenceServerError(
                f"unable to find '{path}' for model instance '{self.instance.name}'",
                StatusCode.UNAVAILABLE,
            )
        self._device = torch.device("cuda", self.instance.device_id)
        fraction = torch_memory_fraction(self.instance)
        if fraction is not None:  # the I/O buffers come from torch's allocator
            torch.cuda.set_per_process_memory_fraction(fraction, self._device)
        with torch.cuda.device(self._device):
            engine = _deserialize(trt, path, self.model.name)
            infos = {info.name: info for info in _engine_infos(engine, self.model.name)}
            _validate(self.config, infos)
            cap = memory_cap_bytes(self.instance, device_total_bytes(self.instance.device_id))
            check_activation_memory(_activation_bytes(engine), cap, self.instance.name)
            self._context = engine.create_execution_context()
            self._stream = torch.cuda.Stream(self._device)
        self._engine, self._torch = engine, torch
        torch_names = dict(_TRT_TYPES.values())
        self._torch_types = {
            name: getattr(torch, torch_names[info.data_type]) for name, info in infos.items()
        }

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch, context = self._torch, self._context
        keep_alive = []  # device buffers must outlive the asynchronous execution
        with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
            for name, array in inputs.items():
                tensor = _to_device(torch, array, self._device)
                if not context.set_input_shape(name, tuple(array.shape)):
                    raise InferenceServerError(
                        f"input '{name}' shape {list(array.shape)} is outside the engine's "
                        "optimization profile"
                    )
                context.set_tensor_address(name, tensor.data_ptr())
                keep_alive.append(tensor)
            outputs = {}
            for name in self._output_configs:
                shape = tuple(context.get_tensor_shape(name))
                if any(dim < 0 for dim in shape):
                    raise InferenceServerError(
                        f"output '{name}' has a data-dependent shape, which is not supported",
                        StatusCode.UNSUPPORTED,
                    )
                outputs[name] = torch.empty(
                    shape, dtype=self._torch_types[name], device=self._device
                )
                context.set_tensor_address(name, outputs[name].data_ptr())
            if not context.execute_async_v3(self._stream.cuda_stream):
                raise InferenceServerError(
                    f"TensorRT execution failed for model '{self.model.name}'", StatusCode.INTERNAL
                )
            self._stream.synchronize()
        return {name: _to_numpy(torch, tensor) for name, tensor in outputs.items()}

    def unload(self) -> None:
        self._context = self._engine = self._stream = None
        super().unload()


def _runtime(model_name: str):
    """``(tensorrt, torch)``; UNAVAILABLE when either is missing or no CUDA GPU is visible."""
    try:
        import tensorrt
    except (ImportError, OSError) as err:  # OSError: the wheel's CUDA libraries are missing
        raise InferenceServerError(
            f"TensorRT runtime not installed, cannot load model '{model_name}' ({err}); "
            "install the 'tensorrt' package on a machine with a CUDA GPU",
            StatusCode.UNAVAILABLE,
        ) from None
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise InferenceServerError(
            f"no CUDA GPU available for TensorRT model '{model_name}'"
            + ("" if torch is not None else " (torch with CUDA provides the device buffers)"),
            StatusCode.UNAVAILABLE,
        )
    return tensorrt, torch


def _activation_bytes(engine) -> int:
    """Device memory one execution context of ``engine`` allocates (its workspace included)."""
    size = getattr(engine, "device_memory_size_v2", None)
    return int(size if size is not None else engine.device_memory_size)


def check_activation_memory(needed: int, cap: int | None, instance: str) -> None:
    """Refuse an engine whose execution context alone needs more than the instance's share of
    the GPU (``cap`` bytes; None: no share): its neighbours' memory is not its to take."""
    if cap is not None and needed > cap:
        raise InferenceServerError(
            f"instance '{instance}': the engine's execution context needs "
            f"{needed / 2**20:.0f} MiB of device memory, more than the instance's share of the "
            f"GPU ({cap / 2**20:.0f} MiB); lower the instance count or rebuild the engine with "
            "a smaller workspace",
            StatusCode.UNAVAILABLE,
        )


def _deserialize(trt, path: Path, model_name: str):
    logger = trt.Logger(trt.Logger.WARNING)
    trt.init_libnvinfer_plugins(logger, "")
    engine = trt.Runtime(logger).deserialize_cuda_engine(path.read_bytes())
    if engine is None:  # TensorRT logs why (version or GPU architecture mismatch)
        raise InferenceServerError(
            f"unable to deserialize TensorRT engine '{path}' for model '{model_name}': the plan "
            "must be built by the same TensorRT version for this GPU",
            StatusCode.UNAVAILABLE,
        )
    return engine


def _engine_infos(engine, model_name: str) -> list[EngineTensor]:
    import tensorrt as trt

    infos = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        dtype = engine.get_tensor_dtype(name).name
        if dtype not in _TRT_TYPES or engine.is_shape_inference_io(name):
            raise InferenceServerError(
                f"model '{model_name}': tensor '{name}' ({dtype}, shape tensor: "
                f"{engine.is_shape_inference_io(name)}) is not supported by rayton's TensorRT "
                "backend",
                StatusCode.UNSUPPORTED,
            )
        shape = list(engine.get_tensor_shape(name))
        profile_max = 0
        if is_input and shape and engine.num_optimization_profiles > 0:
            profile_max = engine.get_tensor_profile_shape(name, 0)[2][0]
        infos.append(EngineTensor(name, is_input, _TRT_TYPES[dtype][0], shape, profile_max))
    return infos


def _validate(config: mc.ModelConfig, infos: dict[str, EngineTensor]) -> None:
    for kind, tensors, is_input in (
        ("input", config.input, True),
        ("output", config.output, False),
    ):
        allowed = sorted(name for name, info in infos.items() if info.is_input == is_input)
        if is_input and len(tensors) != len(allowed):  # the engine needs every input bound
            raise ModelConfigError(
                f"unable to load model '{config.name}', configuration expects {len(tensors)} "
                f"inputs, model provides {len(allowed)}"
            )
        for tensor in tensors:
            if tensor.name not in allowed:
                raise ModelConfigError(
                    f"unexpected inference {kind} '{tensor.name}', allowed {kind}s are: "
                    f"{', '.join(allowed)}"
                )
            if infos[tensor.name].data_type != tensor.data_type:
                raise ModelConfigError(
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"{mc.DataType.Name(tensor.data_type)} for {kind} '{tensor.name}', model "
                    f"provides {mc.DataType.Name(infos[tensor.name].data_type)}"
                )


def _to_device(torch, array: np.ndarray, device):
    if BF16_DTYPE is not None and array.dtype == BF16_DTYPE:  # numpy has no bfloat16
        return _to_device(torch, array.view(np.int16), device).view(torch.bfloat16)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")  # a writeable, contiguous copy
    return torch.from_numpy(array).to(device, non_blocking=True)


def _to_numpy(torch, tensor) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).cpu().numpy().view(BF16_DTYPE)
    return tensor.cpu().numpy()
