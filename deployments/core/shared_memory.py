"""Triton's system and CUDA shared-memory extensions, Ray-free: the registered regions and
their mappings.

A client creates a POSIX shared-memory object (``/dev/shm/<key>``), registers part of it as a
named region (``key``, ``offset``, ``byte_size``), and then names the region, an offset and a
size instead of sending an input's bytes or receiving an output's. A CUDA region is GPU memory
the client shares by its IPC handle (``raw_handle``, ``device_id``, ``byte_size``); serving
processes copy inputs from it into host memory and outputs into it
(:mod:`deployments.core.cuda_ipc`). Both kinds share one namespace of names, as in Triton.

* :class:`RegionTable` is the server's list of registered regions (one owner: the repository
  controller): registration checks the key and that the region lies inside the object, as
  Triton does, on the node where the table lives.
* :class:`MappedRegions` is a serving process's view: each region it was told about, mapped
  on first use; inputs are read as views of a system region's mapping (no copy) or copies of a
  CUDA region's bytes, outputs written into either.
  A region registered on another node is refused, never mapped: its key would name another
  object here (:class:`RegionElsewhereError`: the serving layer sends the request to a replica
  on that node).

Errors carry Triton's codes and messages.
"""

from __future__ import annotations

import contextlib
import enum
import mmap
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from deployments.core.cuda_ipc import (
    IPC_HANDLE_BYTES,
    CudaCallError,
    CudaIpcMapping,
    CudaUnavailableError,
)
from repo_adapter.datatypes import input_from_bytes
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import SharedMemoryTarget
from repo_adapter.request_validation import log_request

_T = TypeVar("_T")
SHM_DIRECTORY = "/dev/shm"  # where shm_open(3) keeps its objects on Linux
# Keys Triton keeps for its python backend's own regions.
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)


class MemoryKind(enum.Enum):
    """Which extension a region belongs to: its status and unregister calls see only its
    own kind."""

    SYSTEM = "system"
    CUDA = "cuda"


_KIND_NAMES = {MemoryKind.SYSTEM: "system", MemoryKind.CUDA: "CUDA"}  # as Triton's errors say


@dataclass(frozen=True)
class SystemRegion:
    """A registered region: ``byte_size`` bytes at ``offset`` of the object ``key``, on the
    node ``node_id`` (where it was registered)."""

    name: str
    key: str
    offset: int
    byte_size: int
    node_id: str = ""

    kind = MemoryKind.SYSTEM

    def status(self) -> dict[str, object]:
        """Triton's status entry of the region."""
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


@dataclass(frozen=True)
class CudaRegion:
    """A registered CUDA region: ``byte_size`` bytes of GPU memory a client shared by its IPC
    handle ``raw_handle``, on the GPU the client calls ``device_id``, of node ``node_id``."""

    name: str
    raw_handle: bytes
    device_id: int
    byte_size: int
    node_id: str = ""

    kind = MemoryKind.CUDA

    @property
    def offset(self) -> int:
        return 0  # the handle names the start of the client's allocation

    def status(self) -> dict[str, object]:
        """Triton's status entry of the region."""
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}


Region = SystemRegion | CudaRegion
# The registered regions now, from the table's owner.
RegionFetch = Callable[[], Awaitable[list[Region]]]


def check_region_name(name: str, kind: MemoryKind) -> None:
    """Triton's error for a register request that names no region."""
    if not name:
        raise InferenceServerError(
            f"'region name' is necessary to register {kind.value} shared memory region"
        )


def unknown_region(name: str) -> InferenceServerError:
    """A request names a region that is not registered."""
    return InferenceServerError(
        f"Unable to find shared memory region: '{name}'", StatusCode.NOT_FOUND
    )


def _object_path(key: str) -> str:
    return os.path.join(SHM_DIRECTORY, key.lstrip("/"))


def _open(key: str) -> int:
    try:
        return os.open(_object_path(key), os.O_RDWR)
    except OSError:
        raise InferenceServerError(
            f"Unable to open shared memory region: '{key}'", StatusCode.INTERNAL
        ) from None


def _check_key(name: str, key: str) -> None:
    bare = key.lstrip("/")
    if not bare or "/" in bare:
        raise InferenceServerError(
            f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )
    if bare.startswith(RESERVED_KEY_PREFIX):
        raise InferenceServerError(
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{RESERVED_KEY_PREFIX}'"
        )


class RegionTable:
    """The registered regions, by name (the server's one list)."""

    def __init__(self, node_id: str = "") -> None:
        self.node_id = node_id  # where registrations are checked
        self._regions: dict[str, Region] = {}

    def _check_new(self, name: str) -> None:
        if name in self._regions:
            raise InferenceServerError(
                f"shared memory region '{name}' already in manager", StatusCode.ALREADY_EXISTS
            )

    def register(self, name: str, key: str, offset: int, byte_size: int) -> SystemRegion:
        """Register a region after checking its key and that it lies inside the object."""
        _check_key(name, key)
        self._check_new(name)
        descriptor = _open(key)
        try:
            size = os.fstat(descriptor).st_size
        finally:
            os.close(descriptor)
        if offset + byte_size > size:
            raise InferenceServerError(
                f"Invalid shared memory region: '{key}'", StatusCode.INTERNAL
            )
        region = SystemRegion(name, key, offset, byte_size, self.node_id)
        self._regions[name] = region
        return region

    def register_cuda(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int, gpus: int
    ) -> CudaRegion:
        """Register a CUDA region of GPU ``device_id``, this node having ``gpus`` GPUs.

        Triton opens the handle here; rayton checks the handle's size and the GPU, and the
        serving processes open it when a request first names the region (the table's owner
        holds no GPU memory of its own).
        """
        if len(raw_handle) != IPC_HANDLE_BYTES:
            raise InferenceServerError(
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
            )
        if not 0 <= device_id < gpus:
            raise InferenceServerError(
                "failed to register shared memory region: invalid args: "
                f"GPU {device_id} does not exist on node {self.node_id or 'here'} "
                f"({gpus} GPUs)"
            )
        self._check_new(name)
        region = CudaRegion(name, raw_handle, device_id, byte_size, self.node_id)
        self._regions[name] = region
        return region

    def unregister(self, name: str = "", kind: MemoryKind = MemoryKind.SYSTEM) -> list[str]:
        """Forget the regions of ``kind`` named ``name`` (every one when empty; an unknown
        name, or one of the other kind, is no error, as in Triton); the names forgotten."""
        names = [
            known
            for known, region in self._regions.items()
            if region.kind is kind and (not name or known == name)
        ]
        for known in names:
            del self._regions[known]
        return names

    def status(self, name: str = "", kind: MemoryKind = MemoryKind.SYSTEM) -> list[Region]:
        """Every region of ``kind``, or the one named (NOT_FOUND when it is not registered
        as that kind)."""
        if not name:
            return [region for region in self._regions.values() if region.kind is kind]
        region = self._regions.get(name)
        if region is None:
            raise InferenceServerError(
                f"Unable to find {kind.value} shared memory region: '{name}'",
                StatusCode.NOT_FOUND,
            )
        if region.kind is not kind:
            raise InferenceServerError(
                f"The region named '{name}' is registered as {_KIND_NAMES[region.kind]} shared "
                f"memory, not {_KIND_NAMES[kind]} shared memory",
                StatusCode.NOT_FOUND,
            )
        return [region]

    def regions(self) -> list[Region]:
        return list(self._regions.values())


class RegionNotKnownError(Exception):
    """A request names a region this process was not told about (it may have been
    registered a moment ago): ask the table's owner, then decode again."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class RegionElsewhereError(InferenceServerError):
    """A request names a region registered on another node than this process's: a replica
    there must serve it (the serving layer forwards it there, or answers this error)."""

    def __init__(self, region: str, node_id: str, here: str) -> None:
        super().__init__(
            f"shared memory region '{region}' was registered on node {node_id}; this replica "
            f"runs on node {here} and cannot reach it: send requests that name it to the node "
            "where it was registered",
            StatusCode.UNAVAILABLE,
        )
        self.region = region
        self.node_id = node_id
        self.here = here

    def __reduce__(self):  # pickled with its own arguments, not the base class's
        return (RegionElsewhereError, (self.region, self.node_id, self.here))


class MappedRegions:
    """The regions one serving process knows, mapped when first used (``node_id``: this
    process's node; ``fetch``: the table's regions now, asked when a request names a region
    this process was not told about)."""

    def __init__(self, node_id: str = "", fetch: RegionFetch | None = None) -> None:
        self.node_id = node_id
        self.fetch = fetch
        self._regions: dict[str, Region] = {}
        self._maps: dict[str, mmap.mmap | CudaIpcMapping] = {}

    async def refresh(self) -> None:
        """Take the table's regions now (a region registered since this process last heard)."""
        if self.fetch is not None:
            self.adopt(await self.fetch())

    def adopt(self, regions: Iterable[Region]) -> None:
        """Know ``regions`` (the table's list now): the others are forgotten."""
        wanted = {region.name: region for region in regions}
        self.forget([name for name, old in self._regions.items() if wanted.get(name) != old])
        self._regions = wanted

    def forget(self, names: Iterable[str]) -> None:
        """Stop knowing ``names`` (unregistered), unmapping them."""
        for name in names:
            self._regions.pop(name, None)
            mapped = self._maps.pop(name, None)
            if mapped is not None:
                # A view of it still in use (a running request) keeps it: the GC unmaps it.
                with contextlib.suppress(BufferError, CudaCallError):
                    mapped.close()

    def _region(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotKnownError(name)
        if region.node_id and self.node_id and region.node_id != self.node_id:
            raise RegionElsewhereError(name, region.node_id, self.node_id)
        return region

    def _span(
        self, name: str, offset: int, byte_size: int
    ) -> tuple[mmap.mmap | CudaIpcMapping, int]:
        """The region's mapping (made on first use) and where the span starts in it, after
        checking the span lies inside the region."""
        region = self._region(name)
        if offset >= region.byte_size or offset + byte_size > region.byte_size or not byte_size:
            raise InferenceServerError(
                f"Invalid offset + byte size for shared memory region: '{name}'"
            )
        mapped = self._maps.get(name)
        if mapped is None:
            mapped = _map(region)
            self._maps[name] = mapped
        return mapped, region.offset + offset

    def read(self, name: str, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes at ``offset`` of the region: a view of a system region's
        mapping, a host copy of a CUDA region's bytes."""
        mapped, start = self._span(name, offset, byte_size)
        if isinstance(mapped, CudaIpcMapping):
            return _cuda_call(name, lambda: mapped.read(start, byte_size))
        return memoryview(mapped)[start : start + byte_size]

    def check(self, name: str, offset: int, byte_size: int) -> None:
        """Whether an output may go there (before the request runs)."""
        self._span(name, offset, byte_size)

    def write(self, name: str, offset: int, byte_size: int, data: bytes | memoryview) -> None:
        """Put ``data`` at ``offset`` of the region, which holds ``byte_size`` bytes there."""
        mapped, start = self._span(name, offset, byte_size)
        if isinstance(mapped, CudaIpcMapping):
            _cuda_call(name, lambda: mapped.write(start, data))
        else:
            mapped[start : start + len(data)] = data

    def read_input(
        self, location: tuple[str, int, int], datatype: str, shape: tuple[int, ...], name: str,
        model: str, request_id: str,
    ) -> np.ndarray:  # fmt: skip
        """Input ``name`` of a request to ``model`` from ``location`` (region, offset, byte
        size): a view of the mapping, its size checked as Triton checks it."""
        buffer = self.read(*location)
        try:
            return input_from_bytes(buffer, datatype, shape, name, model)
        except InferenceServerError as err:  # core's check, with its request-id prefix
            raise InferenceServerError(f"{log_request(request_id)}{err.message}") from None

    def write_output(self, name: str, target: SharedMemoryTarget, data: bytes | memoryview) -> None:
        """Output ``name``'s wire bytes into the region its request named (Triton's error
        when the region's span is too small)."""
        if len(data) > target.byte_size:
            raise InferenceServerError(
                f"shared memory size specified with the request for output '{name}' "
                f"({target.byte_size} bytes) should be at least {len(data)} bytes to hold the "
                "results",
                StatusCode.INTERNAL,
            )
        self.write(target.region, target.offset, target.byte_size, data)


def _map(region: Region) -> mmap.mmap | CudaIpcMapping:
    if isinstance(region, CudaRegion):
        return _cuda_call(
            region.name,
            lambda: CudaIpcMapping(region.raw_handle, region.device_id, region.byte_size),
        )
    descriptor = _open(region.key)
    try:
        return mmap.mmap(descriptor, region.offset + region.byte_size)
    except (OSError, ValueError):
        raise InferenceServerError(
            f"Invalid shared memory region: '{region.key}'", StatusCode.INTERNAL
        ) from None
    finally:
        os.close(descriptor)


def _cuda_call(name: str, call: Callable[[], _T]) -> _T:
    """``call`` on a CUDA region, CUDA's failures as Triton errors naming the region."""
    try:
        return call()
    except CudaUnavailableError as err:
        raise InferenceServerError(
            f"CUDA shared memory region '{name}' cannot be used by this serving process: {err}"
            " (a model's replicas must run on the node and see the GPU the region is on)",
            StatusCode.UNAVAILABLE,
        ) from None
    except CudaCallError as err:
        raise InferenceServerError(
            f"failed to use CUDA shared memory region '{name}': {err}", StatusCode.INTERNAL
        ) from None


_process_regions = MappedRegions()


def process_regions() -> MappedRegions:
    """This process's regions (one per serving process, like its tracer): what its
    transports read inputs from and write outputs into."""
    return _process_regions
