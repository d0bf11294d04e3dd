"""``pb_utils.Tensor``: a named tensor backed by a numpy array, or by a torch tensor on a GPU.

Request inputs wrap the request's arrays without copying, so ``as_numpy()`` returns the very
array the frontend decoded (arrays decoded from wire bytes are read-only). DLPack interop goes
through numpy for CPU tensors and through torch (imported lazily) for GPU and BF16 tensors,
which numpy's DLPack support cannot represent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from repo_adapter import datatypes
from repo_adapter.python_backend.dtypes import TritonDataType, numpy_to_triton_type
from repo_adapter.python_backend.triton_error import TritonModelException

_DL_CPU = 1  # DLDeviceType kDLCPU
_DL_CUDA_HOST = 3  # kDLCUDAHost: pinned host memory, readable as CPU memory
_NOT_CONTIGUOUS = (
    "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in "
    "C-Order are supported."
)


class Tensor:
    """An input or output tensor of an inference request or response.

    Args:
        name: Tensor name.
        numpy_array: The data; BYTES tensors are object arrays of ``bytes`` (or ``str``).

    Raises:
        TritonModelException: for numpy dtypes Triton has no type for (unicode, void, complex).
    """

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Tensor name must be a str, got {type(name).__name__}")
        array = np.asarray(numpy_array)
        if array.dtype.kind == "U":
            raise TritonModelException(
                "Tensor dtype used for numpy_array is not supported by Python backend. "
                "Please use np.object_ instead."
            )
        data_type = numpy_to_triton_type(array.dtype)
        if data_type is None:
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {array.dtype} has no Triton data type"
            )
        self._name = name
        self._array: np.ndarray | None = array
        self._device_tensor: Any = None  # a torch tensor when the data lives on a GPU
        self._data_type = TritonDataType(data_type)

    @classmethod
    def _wrap(cls, name: str, array: np.ndarray, data_type: int) -> Tensor:
        """Zero-copy tensor over ``array`` with a known data type (request inputs)."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._device_tensor = None
        tensor._data_type = TritonDataType(data_type)
        return tensor

    def name(self) -> str:
        """The tensor name."""
        return self._name

    def triton_dtype(self) -> TritonDataType:
        """The ``TRITONSERVER_DataType`` of the tensor (``TYPE_FP32`` = 11, ...)."""
        return self._data_type

    def shape(self) -> list[int]:
        """The tensor shape."""
        source = self._array if self._array is not None else self._device_tensor
        return [int(dim) for dim in source.shape]

    def is_cpu(self) -> bool:
        """Whether the data is in CPU memory (False for tensors imported from a GPU)."""
        return self._array is not None

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array (no copy).

        Raises:
            TritonModelException: when the tensor lives on a GPU.
        """
        if self._array is None:
            raise TritonModelException(
                f"Tensor '{self._name}' is stored in GPU memory and cannot be converted to NumPy"
            )
        return self._array

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing the tensor's memory (copied first if read-only)."""
        return self.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._device_tensor is not None:
            return self._device_tensor.__dlpack__(stream=stream, **kwargs)
        array = self._array
        if array.dtype == np.object_:
            raise TritonModelException(
                f"tensor '{self._name}': BYTES tensors cannot be exported through DLPack"
            )
        if datatypes.BF16_DTYPE is not None and array.dtype == datatypes.BF16_DTYPE:
            return _bf16_to_torch(array).__dlpack__(stream=stream, **kwargs)
        if not array.flags.writeable:
            # numpy < 2 cannot signal read-only buffers through DLPack; arrays decoded from
            # request bytes are read-only, so export a private copy instead of failing.
            array = array.copy()
        # Unknown keywords (max_version, copy, ...) raise TypeError on numpy 1.x; consumers
        # such as torch retry without them, so pass them through unchanged.
        return array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._device_tensor is not None:
            return tuple(self._device_tensor.__dlpack_device__())
        return (_DL_CPU, 0)

    @staticmethod
    def from_dlpack(tensor_name: str, dlpack_object: Any) -> Tensor:
        """A tensor sharing memory with a DLPack producer (an object or a capsule).

        Args:
            tensor_name: Name of the new tensor.
            dlpack_object: An object with ``__dlpack__`` (torch, numpy, cupy, ...) or a capsule
                from ``to_dlpack``. Only C-contiguous tensors are accepted, as in Triton.

        Raises:
            TritonModelException: for non-contiguous tensors and unsupported data types.
        """
        if not isinstance(tensor_name, str):
            raise TypeError(f"Tensor name must be a str, got {type(tensor_name).__name__}")
        if not hasattr(dlpack_object, "__dlpack__"):
            return _from_capsule(tensor_name, dlpack_object)
        device_type = dlpack_object.__dlpack_device__()[0]
        if device_type in (_DL_CPU, _DL_CUDA_HOST) and not _is_torch_bf16(dlpack_object):
            try:
                array = np.from_dlpack(dlpack_object)
            except (BufferError, RuntimeError, TypeError, ValueError):
                array = None  # a dtype numpy cannot hold: let torch import it
            if array is not None:
                return _from_host_array(tensor_name, array)
        return _from_torch(tensor_name, _torch().from_dlpack(dlpack_object))

    def _host_array(self) -> np.ndarray:
        """The data in CPU memory (GPU tensors are copied to the host)."""
        if self._array is not None:
            return self._array
        return _torch_to_numpy(self._device_tensor.cpu())

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._data_type.name}, shape={self.shape()})"


def _from_host_array(name: str, array: np.ndarray) -> Tensor:
    if not array.flags.c_contiguous:
        raise TritonModelException(_NOT_CONTIGUOUS)
    data_type = numpy_to_triton_type(array.dtype)
    if data_type is None:
        raise TritonModelException(f"tensor '{name}': unsupported DLPack data type {array.dtype}")
    return Tensor._wrap(name, array, data_type)


def _from_capsule(name: str, capsule: Any) -> Tensor:
    try:
        torch = _torch()
    except TritonModelException:
        # Without torch, a capsule can only be read by numpy, which needs a producer object;
        # capsules carry no readable device information, so assume host memory.
        return _from_host_array(name, np.from_dlpack(_CapsuleProducer(capsule)))
    return _from_torch(name, torch.utils.dlpack.from_dlpack(capsule))


def _from_torch(name: str, tensor: Any) -> Tensor:
    if not tensor.is_contiguous():
        raise TritonModelException(_NOT_CONTIGUOUS)
    if tensor.device.type == "cpu":
        return _from_host_array(name, _torch_to_numpy(tensor))
    data_type = _torch_triton_type(tensor)
    result = Tensor.__new__(Tensor)
    result._name = name
    result._array = None
    result._device_tensor = tensor
    result._data_type = TritonDataType(data_type)
    return result


class _CapsuleProducer:
    """Adapts a bare DLPack capsule to the producer protocol ``np.from_dlpack`` expects."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DL_CPU, 0)


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is installed wherever GPUs are used
        raise TritonModelException(
            "this DLPack tensor needs torch to be imported, and torch is not installed"
        ) from None
    return torch


def _is_torch_bf16(obj: Any) -> bool:
    if type(obj).__module__.split(".")[0] != "torch":
        return False
    return str(getattr(obj, "dtype", "")) == "torch.bfloat16"


def _torch_to_numpy(tensor: Any) -> np.ndarray:
    torch = _torch()
    tensor = tensor.detach()  # outputs of autograd-tracked computations are still plain data
    if tensor.dtype == torch.bfloat16:
        if datatypes.BF16_DTYPE is None:  # pragma: no cover - ml_dtypes is a dependency
            raise TritonModelException("BF16 tensors need the ml_dtypes package")
        # numpy has no native bfloat16: reinterpret the bits, sharing memory.
        return tensor.view(torch.int16).numpy().view(datatypes.BF16_DTYPE)
    return tensor.numpy()


def _bf16_to_torch(array: np.ndarray) -> Any:
    torch = _torch()
    bits = np.ascontiguousarray(array).view(np.int16)
    if not bits.flags.writeable:
        bits = bits.copy()
    return torch.from_numpy(bits).view(torch.bfloat16)


def _torch_triton_type(tensor: Any) -> int:
    torch = _torch()
    mapping = {
        torch.bool: TritonDataType.TYPE_BOOL,
        torch.uint8: TritonDataType.TYPE_UINT8,
        torch.int8: TritonDataType.TYPE_INT8,
        torch.int16: TritonDataType.TYPE_INT16,
        torch.int32: TritonDataType.TYPE_INT32,
        torch.int64: TritonDataType.TYPE_INT64,
        torch.float16: TritonDataType.TYPE_FP16,
        torch.float32: TritonDataType.TYPE_FP32,
        torch.float64: TritonDataType.TYPE_FP64,
        torch.bfloat16: TritonDataType.TYPE_BF16,
    }
    for name, data_type in (
        ("uint16", TritonDataType.TYPE_UINT16),
        ("uint32", TritonDataType.TYPE_UINT32),
        ("uint64", TritonDataType.TYPE_UINT64),
    ):
        if hasattr(torch, name):
            mapping[getattr(torch, name)] = data_type
    try:
        return mapping[tensor.dtype]
    except KeyError:
        raise TritonModelException(f"unsupported DLPack data type {tensor.dtype}") from None
