"""PyTorch backend: Triton's ``pytorch`` (libtorch) backend for TorchScript ``model.pt`` files.

Input/output naming conventions, supported data types, parameters and messages follow
Triton's pytorch_backend (``src/pt/model_instance_state.cc``). TorchScript carries no I/O
metadata, so there is no auto-complete: the config must declare inputs and outputs.
"""

from __future__ import annotations

import logging
import os

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from repo_adapter.backends.base import InstanceSpec, ModelVersion, TensorBackend
from repo_adapter.backends.gpu_memory import torch_memory_fraction
from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError, ModelConfigError, StatusCode

logger = logging.getLogger(__name__)

THREADS_ENV = "RAYTON_TORCH_THREADS"

# The data types Triton's libtorch backend accepts (no BF16, UINT16+ or BYTES tensors).
_TORCH_DTYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}


class PyTorchBackend(TensorBackend):
    """A Triton ``pytorch`` model instance: one TorchScript module on one device."""

    name = "pytorch"
    platforms = ("pytorch_libtorch",)
    default_model_filename = "model.pt"
    probe_priority = 30

    def __init__(self, model: ModelVersion, instance: InstanceSpec) -> None:
        super().__init__(model, instance)
        self._module = None
        self._device = None
        self._dict_input = False
        self._call_order: list[str] = []  # config input names in forward() argument order
        self._output_slots = _output_slots(self.config)
        self._inference_mode = True
        self._optimize = True
        self._clean_cache = False

    def load(self) -> None:
        torch = _torch()
        _check_data_types(self.config)
        path = self.model.model_path
        if not path.is_file():
            raise InferenceServerError(
                f"unable to find '{path}' for model instance '{self.instance.name}'",
                StatusCode.UNAVAILABLE,
            )
        self._device = _device(torch, self.model.name, self.instance)
        _set_threads(torch, self.config)
        self._inference_mode = _bool_param(self.config, "INFERENCE_MODE", True)
        self._optimize = not _bool_param(self.config, "DISABLE_OPTIMIZED_EXECUTION", False)
        self._clean_cache = _bool_param(self.config, "ENABLE_CACHE_CLEANING", False)
        location = None if self.instance.kind == "MODEL" else self._device
        try:
            with torch.inference_mode(self._inference_mode):
                module = torch.jit.load(str(path), map_location=location)
        except Exception as err:  # torch raises RuntimeError/ValueError/pickle errors
            raise InferenceServerError(
                f"failed to load model '{self.model.name}': unable to load TorchScript file "
                f"'{path}': {err}",
                StatusCode.UNAVAILABLE,
            ) from None
        self._dict_input, self._call_order = _input_plan(self.config, module)
        self._module = module

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = _torch()
        missing = [name for name in self._call_order if name not in inputs]
        if missing:
            raise InferenceServerError(f"expected input '{missing[0]}' was not provided")
        tensors = [_to_torch(torch, inputs[name], self._device) for name in self._call_order]
        if hasattr(torch._C, "_set_graph_executor_optimize"):
            torch._C._set_graph_executor_optimize(self._optimize)  # Triton sets it per run
        try:
            with torch.inference_mode(self._inference_mode), torch.no_grad():
                if self._dict_input:
                    result = self._module(dict(zip(self._call_order, tensors, strict=True)))
                else:
                    result = self._module(*tensors)
            return {name: self._read(torch, result, name) for name in self._output_slots}
        except InferenceServerError:
            raise
        except Exception as err:  # a TorchScript runtime error fails the whole batch
            raise InferenceServerError(
                f"PyTorch execute failure: {err}", StatusCode.INTERNAL
            ) from err
        finally:
            if self._clean_cache and self._device.type == "cuda":
                torch.cuda.empty_cache()

    def unload(self) -> None:
        self._module = None
        super().unload()

    def _read(self, torch, result, name: str) -> np.ndarray:
        slot = self._output_slots[name]
        if isinstance(result, dict):  # rayton extension: Triton rejects dict returns
            if name not in result:
                raise InferenceServerError(
                    f"output tensor '{name}' is not found in the dict returned by model "
                    f"'{self.model.name}' (keys: {', '.join(map(str, result))})",
                    StatusCode.INTERNAL,
                )
            value = result[name]
        else:
            items = list(result) if isinstance(result, tuple | list) else [result]
            if isinstance(result, list) and items and isinstance(items[0], str | bytes):
                items = [result]  # a List[str] is one BYTES output, not several outputs
            if slot >= len(items):
                raise InferenceServerError(
                    f"output tensor '{name}' (index {slot}) is not found: model "
                    f"'{self.model.name}' returned {len(items)} output(s)",
                    StatusCode.INTERNAL,
                )
            value = items[slot]
        return _to_numpy(torch, value, name, self._output_configs[name].data_type)


def _torch():
    try:
        import torch
    except ImportError as err:
        raise InferenceServerError(
            f"PyTorch is not installed: {err}", StatusCode.UNAVAILABLE
        ) from None
    return torch


def _check_data_types(config: mc.ModelConfig) -> None:
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            datatype = config_to_protocol(tensor.data_type)
            if datatype == "BYTES" and kind == "output":
                continue  # a TorchScript List[str] return
            if datatype not in _TORCH_DTYPES:
                message = (
                    f"unsupported datatype {mc.DataType.Name(tensor.data_type)} for {kind} "
                    f"'{tensor.name}' for model '{config.name}'"
                )
                if datatype == "BYTES":
                    message += ": TorchScript List[str] inputs are not supported"
                raise InferenceServerError(message, StatusCode.UNSUPPORTED)


def _device(torch, model_name: str, instance: InstanceSpec):
    if instance.kind != "GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InferenceServerError(
            f"no CUDA GPU available for PyTorch model '{model_name}' instance "
            f"'{instance.name}' (KIND_GPU)",
            StatusCode.UNAVAILABLE,
        )
    if instance.device_id >= torch.cuda.device_count():
        raise InferenceServerError(
            f"GPU {instance.device_id} of instance '{instance.name}' is not available "
            f"({torch.cuda.device_count()} visible)",
            StatusCode.UNAVAILABLE,
        )
    device = torch.device("cuda", instance.device_id)
    fraction = torch_memory_fraction(instance)
    if fraction is not None:  # its share of a GPU other instances use too
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    return device


def _bool_param(config: mc.ModelConfig, key: str, default: bool) -> bool:
    if key not in config.parameters:
        return default
    value = config.parameters[key].string_value.lower()
    if value not in ("true", "on", "1", "false", "off", "0"):
        raise ModelConfigError(
            f"model '{config.name}': failed to convert parameter '{key}' value '{value}' to bool"
        )
    return value in ("true", "on", "1")


def _set_threads(torch, config: mc.ModelConfig) -> None:
    """Triton's INTRA/INTER_OP_THREAD_COUNT, then ``RAYTON_TORCH_THREADS``; else torch's."""
    values = {}
    for key in ("INTRA_OP_THREAD_COUNT", "INTER_OP_THREAD_COUNT"):
        text = config.parameters[key].string_value if key in config.parameters else ""
        if text and not text.strip().lstrip("-").isdigit():
            raise ModelConfigError(f"model '{config.name}': parameter '{key}' must be an integer")
        values[key] = int(text) if text else 0
    env = os.environ.get(THREADS_ENV, "").strip()
    intra = values["INTRA_OP_THREAD_COUNT"] or (int(env) if env.isdigit() else 0)
    if intra > 0 and torch.get_num_threads() != intra:
        torch.set_num_threads(intra)  # process-wide, as libtorch's at::set_num_threads
    if values["INTER_OP_THREAD_COUNT"] > 0:
        try:
            torch.set_num_interop_threads(values["INTER_OP_THREAD_COUNT"])
        except RuntimeError:  # only settable once, before inter-op work started
            logger.warning("model '%s': inter-op thread count already fixed", config.name)


def _named_index(name: str) -> int | None:
    """``<name>__<index>`` -> index (Triton splits at the first ``__``)."""
    start = name.find("__")
    suffix = name[start + 2 :] if start >= 0 else ""
    return int(suffix) if suffix.isdigit() else None


def _input_plan(config: mc.ModelConfig, module) -> tuple[bool, list[str]]:
    """Triton's input naming convention -> (dict input?, config names in argument order)."""
    method = getattr(module, "forward", None)
    arguments = list(getattr(getattr(method, "schema", None), "arguments", []))
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]  # self
    names = [tensor.name for tensor in config.input]
    if len(arguments) == 1 and arguments[0].type.kind() == "DictType":
        return True, names
    for argument in arguments:
        if argument.type.kind() not in ("TensorType", "ListType"):
            raise InferenceServerError(
                f"An input of type '{argument.type}' was detected in the model. Only a single "
                "input of type Dict(str, Tensor) or input(s) of type Tensor are supported.",
                StatusCode.UNSUPPORTED,
            )
    if len(arguments) != len(names):
        raise ModelConfigError(
            f"unable to load model '{config.name}', configuration expects {len(names)} inputs, "
            f"model provides {len(arguments)}"
        )
    arg_names = [argument.name for argument in arguments]
    if all(name in arg_names for name in names):  # forward() argument names
        return False, sorted(names, key=arg_names.index)
    indices = [_named_index(name) for name in names]
    if None not in indices:  # <name>__<index>
        if sorted(indices) != list(range(len(names))):
            raise ModelConfigError(
                f"model '{config.name}': <name>__<index> input indices {sorted(indices)} must "
                f"be 0..{len(names) - 1}"
            )
        return False, sorted(names, key=_named_index)
    logger.warning(
        "model '%s': inputs are neither forward() arguments nor <name>__<index>; passing them "
        "in configuration order",
        config.name,
    )
    return False, names


def _output_slots(config: mc.ModelConfig) -> dict[str, int]:
    """Output name -> index in the returned tuple: ``<name>__<index>`` or config order."""
    indices = [_named_index(tensor.name) for tensor in config.output]
    if None in indices:
        return {tensor.name: i for i, tensor in enumerate(config.output)}
    return {tensor.name: index for tensor, index in zip(config.output, indices, strict=True)}


def _to_torch(torch, array: np.ndarray, device):
    # torch.from_numpy shares memory but needs a writeable, positively-strided array.
    if not array.flags.writeable or any(stride < 0 for stride in array.strides):
        array = np.array(array)
    return torch.from_numpy(array).to(device)


def _to_numpy(torch, value, name: str, data_type: int) -> np.ndarray:
    expected = config_to_protocol(data_type)
    if isinstance(value, list) and all(isinstance(item, str | bytes) for item in value):
        if expected != "BYTES":
            raise InferenceServerError(
                f"configuration expects datatype TYPE_{expected} for output '{name}', model "
                "provides TYPE_STRING",
                StatusCode.INVALID_ARG,
            )
        result = np.empty(len(value), dtype=np.object_)
        result[:] = [item.encode("utf-8") if isinstance(item, str) else item for item in value]
        return result
    if not isinstance(value, torch.Tensor):
        raise InferenceServerError(
            f"output '{name}' must be of type Tensor or List[str], received {type(value).__name__}",
            StatusCode.INTERNAL,
        )
    provided = next((k for k, v in _TORCH_DTYPES.items() if getattr(torch, v) == value.dtype), "")
    if provided != expected:
        raise InferenceServerError(
            f"configuration expects datatype TYPE_{expected} for output '{name}', model "
            f"provides TYPE_{provided or str(value.dtype).removeprefix('torch.').upper()}",
            StatusCode.INVALID_ARG,
        )
    if value.dim() == 0:
        raise InferenceServerError(
            f"output '{name}' is a scalar which is not supported.", StatusCode.INVALID_ARG
        )
    return value.detach().cpu().numpy()
