"""``--shared-memory system|cuda``: the request data in shared-memory regions, as
perf_analyzer sends it: system shared memory (``/dev/shm``), or GPU 0's memory shared by CUDA
IPC handles (tritonclient's ``cuda_shared_memory``, which needs ``cuda-python`` and a GPU).

Every input of every prepared request is written once into a region of its own; each output
gets a region of ``--output-shared-memory-size`` bytes that every request writes into (the
content is never read, as perf_analyzer does not read it). All regions are registered before
the run and unregistered (and freed) after it; every region the server knew is unregistered
first, as perf_analyzer does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import serialize_byte_tensor

from rayton_perf.client import TritonConnection
from rayton_perf.config import PerfError

CUDA_DEVICE = 0  # perf_analyzer's GPU for CUDA shared memory


@dataclass
class SharedMemoryData:
    """The regions of one run: the requests' inputs and the outputs'."""

    connection: TritonConnection
    kind: str = "system"  # or "cuda"
    prefix: str = field(default_factory=lambda: f"rayton_perf_{os.getpid()}")
    handles: list[Any] = field(default_factory=list)

    async def _region(self, name: str, data: bytes | None, byte_size: int) -> None:
        if self.kind == "cuda":
            cudashm = _cuda_shared_memory()
            try:
                handle = cudashm.create_shared_memory_region(name, byte_size, CUDA_DEVICE)
            except Exception as err:  # tritonclient's CudaSharedMemoryException and CUDA's
                raise PerfError(f"--shared-memory cuda: cannot allocate on GPU 0: {err}") from None
            self.handles.append(handle)
            if data is not None:
                cudashm.set_shared_memory_region(handle, [np.frombuffer(data, np.uint8)])
            raw_handle = cudashm.get_raw_handle(handle)
            await self.connection.register_cuda_region(name, raw_handle, CUDA_DEVICE, byte_size)
            return
        handle = shm.create_shared_memory_region(name, f"/{name}", byte_size)
        self.handles.append(handle)
        if data is not None:
            shm.set_shared_memory_region(handle, [np.frombuffer(data, np.uint8)])
        await self.connection.register_system_region(name, f"/{name}", byte_size)

    async def _unregister_all(self) -> None:
        await self.connection.unregister_system_regions()
        await self.connection.unregister_cuda_regions()

    async def inputs(
        self, requests: list[dict[str, np.ndarray]], datatypes: dict[str, str]
    ) -> list[list[Any]]:
        """Each request's inputs as InferInputs that name their region."""
        await self._unregister_all()
        built = []
        for index, request in enumerate(requests):
            inputs = []
            for name, array in request.items():
                data = _bytes(array, datatypes[name])
                region = f"{self.prefix}_in_{index}_{name}"
                await self._region(region, data, max(len(data), 1))
                tensor = self.connection.make_shm_input(name, datatypes[name], array.shape)
                tensor.set_shared_memory(region, len(data))
                inputs.append(tensor)
            built.append(inputs)
        return built

    async def outputs(self, names: list[str], byte_size: int) -> list[Any]:
        """The outputs, each into its region of ``byte_size`` bytes."""
        built = []
        for name in names:
            region = f"{self.prefix}_out_{name}"
            await self._region(region, None, byte_size)
            output = self.connection.make_output(name)
            output.set_shared_memory(region, byte_size)
            built.append(output)
        return built

    async def close(self) -> None:
        """Unregister every region and remove their objects."""
        try:
            await self._unregister_all()
        finally:
            destroy = (
                _cuda_shared_memory().destroy_shared_memory_region
                if self.kind == "cuda"
                else shm.destroy_shared_memory_region
            )
            for handle in self.handles:
                destroy(handle)
            self.handles.clear()


def _cuda_shared_memory() -> Any:
    """tritonclient's CUDA shared-memory utilities (imported when asked for: they need
    ``cuda-python``)."""
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except ImportError as err:
        raise PerfError(f"--shared-memory cuda needs cuda-python: {err}") from None
    return cudashm


def _bytes(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        serialized = serialize_byte_tensor(array)
        return serialized.item() if serialized.size else b""
    return np.ascontiguousarray(array).tobytes()
