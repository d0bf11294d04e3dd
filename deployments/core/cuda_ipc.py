"""GPU memory another process shared through a CUDA IPC handle (``cudaIpcMemHandle_t``), for
Triton's CUDA shared-memory extension: opened in a serving process, read into host memory
(inputs) and written from it (outputs). Ray-free.

The binding is ctypes over the CUDA runtime library (``libcudart``), found where the CUDA
toolkit or PyTorch's ``nvidia-cuda-runtime`` wheel installed it, so no CUDA Python package is
needed. Declarations follow the runtime API's documented signatures.

A client names the GPU by its device id as it sees them all. A process that Ray gave GPUs sees
only those (``CUDA_VISIBLE_DEVICES``), renumbered from 0: :func:`visible_index` maps one to
the other. Without the runtime library or a GPU, opening a handle raises
:class:`CudaUnavailableError` with the reason.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading

IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice
_DEVICE_TO_HOST = 2  # cudaMemcpyDeviceToHost


class CudaUnavailableError(RuntimeError):
    """No CUDA runtime library, or no GPU this process may use."""


class CudaCallError(RuntimeError):
    """A CUDA runtime call failed: its name and CUDA's own error string."""


class _IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


def _library_candidates() -> list[str]:
    found = ctypes.util.find_library("cudart")
    names = [found] if found else []
    names += ["libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"]
    for root in sys.path:  # PyTorch's CUDA builds bring the runtime as a wheel of its own
        for package in ("cuda_runtime", "cu*"):
            pattern = os.path.join(root, "nvidia", package, "lib", "libcudart.so*")
            names += sorted(glob.glob(pattern))
    return names


class CudaRuntime:
    """The few runtime calls the extension needs, on one loaded ``libcudart``."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._lib = library
        void_p, c_int, c_size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        library.cudaGetErrorString.restype = ctypes.c_char_p
        library.cudaGetErrorString.argtypes = [c_int]
        library.cudaGetDeviceCount.argtypes = [ctypes.POINTER(c_int)]
        library.cudaSetDevice.argtypes = [c_int]
        library.cudaIpcOpenMemHandle.argtypes = [
            ctypes.POINTER(void_p),
            _IpcMemHandle,
            ctypes.c_uint,
        ]
        library.cudaIpcCloseMemHandle.argtypes = [void_p]
        library.cudaMemcpy.argtypes = [void_p, void_p, c_size, c_int]
        for name in (
            "cudaGetDeviceCount",
            "cudaSetDevice",
            "cudaIpcOpenMemHandle",
            "cudaIpcCloseMemHandle",
            "cudaMemcpy",
        ):
            getattr(library, name).restype = c_int

    def _check(self, call: str, status: int) -> None:
        if status != 0:
            text = self._lib.cudaGetErrorString(status) or b"unknown error"
            raise CudaCallError(f"{call}: {text.decode(errors='replace')}")

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        status = self._lib.cudaGetDeviceCount(ctypes.byref(count))
        if status != 0:  # no driver or no device: CUDA says which
            self._check("cudaGetDeviceCount", status)
        return count.value

    def set_device(self, index: int) -> None:
        self._check("cudaSetDevice", self._lib.cudaSetDevice(index))

    def open_handle(self, raw_handle: bytes, index: int) -> int:
        """The device address ``raw_handle`` maps to in this process, on visible GPU
        ``index``."""
        self.set_device(index)
        handle = _IpcMemHandle()
        ctypes.memmove(ctypes.addressof(handle), raw_handle, IPC_HANDLE_BYTES)
        pointer = ctypes.c_void_p()
        self._check(
            "cudaIpcOpenMemHandle",
            self._lib.cudaIpcOpenMemHandle(ctypes.byref(pointer), handle, _LAZY_ENABLE_PEER_ACCESS),
        )
        return pointer.value or 0

    def close_handle(self, address: int, index: int) -> None:
        self.set_device(index)
        self._check("cudaIpcCloseMemHandle", self._lib.cudaIpcCloseMemHandle(address))

    def copy_to_host(self, target: memoryview, address: int, index: int) -> None:
        """Copy ``len(target)`` bytes from device ``address`` into ``target``."""
        self.set_device(index)  # the current device is per thread
        host = (ctypes.c_char * len(target)).from_buffer(target)
        self._check(
            "cudaMemcpy",
            self._lib.cudaMemcpy(ctypes.addressof(host), address, len(target), _DEVICE_TO_HOST),
        )

    def copy_to_device(self, address: int, data: bytes | memoryview, index: int) -> None:
        """Copy ``data`` to device ``address``."""
        self.set_device(index)
        source = bytes(data) if not isinstance(data, bytes) else data
        self._check(
            "cudaMemcpy",
            self._lib.cudaMemcpy(address, source, len(source), _HOST_TO_DEVICE),
        )


_runtime: CudaRuntime | None = None
_runtime_error = ""
_runtime_lock = threading.Lock()


def cuda_runtime() -> CudaRuntime:
    """This process's CUDA runtime (loaded once).

    Raises:
        CudaUnavailableError: no ``libcudart`` could be loaded.
    """
    global _runtime, _runtime_error
    with _runtime_lock:
        if _runtime is None and not _runtime_error:
            for name in _library_candidates():
                try:
                    _runtime = CudaRuntime(ctypes.CDLL(name))
                    break
                except (OSError, AttributeError):
                    continue
            else:
                _runtime_error = "the CUDA runtime library (libcudart) is not installed here"
        if _runtime is None:
            raise CudaUnavailableError(_runtime_error)
        return _runtime


def visible_index(device_id: int, visible: str | None = None) -> int:
    """The index by which this process reaches the GPU a client calls ``device_id``.

    ``visible`` is ``CUDA_VISIBLE_DEVICES`` (read from the environment when None): unset, every
    GPU is visible under its own id; set, the GPUs listed there, renumbered from 0.

    Raises:
        CudaUnavailableError: the GPU is not visible to this process.
    """
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return device_id
    listed = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if str(device_id) in listed:
        return listed.index(str(device_id))
    shown = ",".join(listed) or "none"
    raise CudaUnavailableError(
        f"GPU {device_id} is not visible to this process (CUDA_VISIBLE_DEVICES={shown})"
    )


class CudaIpcMapping:
    """``byte_size`` bytes of another process's GPU memory, opened from its IPC handle on the
    GPU the client calls ``device_id``.

    Raises:
        CudaUnavailableError: no CUDA runtime, or that GPU is not visible here.
        CudaCallError: CUDA refused the handle (stale, or from another machine).
    """

    def __init__(self, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self._runtime = cuda_runtime()
        self._index = visible_index(device_id)
        try:
            count = self._runtime.device_count()
        except CudaCallError as err:
            raise CudaUnavailableError(str(err)) from None
        if self._index >= count:
            raise CudaUnavailableError(f"GPU {device_id} does not exist here ({count} GPUs)")
        self._address = self._runtime.open_handle(raw_handle, self._index)
        self.byte_size = byte_size

    def read(self, start: int, byte_size: int) -> memoryview:
        """A host copy of ``byte_size`` bytes at ``start``."""
        target = memoryview(bytearray(byte_size))
        self._runtime.copy_to_host(target, self._address + start, self._index)
        return target

    def write(self, start: int, data: bytes | memoryview) -> None:
        """Put ``data`` at ``start``."""
        self._runtime.copy_to_device(self._address + start, data, self._index)

    def close(self) -> None:
        if self._address:
            address, self._address = self._address, 0
            self._runtime.close_handle(address, self._index)
