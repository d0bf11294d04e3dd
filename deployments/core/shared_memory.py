"""Triton's system shared-memory extension, Ray-free: the registered regions and their
mappings.

A client creates a POSIX shared-memory object (``/dev/shm/<key>``), registers part of it as a
named region (``key``, ``offset``, ``byte_size``), and then names the region, an offset and a
size instead of sending an input's bytes or receiving an output's.

* :class:`RegionTable` is the server's list of registered regions (one owner: the repository
  controller): registration checks the key and that the region lies inside the object, as
  Triton does, on the node where the table lives.
* :class:`MappedRegions` is a serving process's view: each region it was told about, mapped
  on first use; inputs are read as views of the mapping (no copy), outputs written into it.
  A region registered on another node is refused, never mapped: its key would name another
  object here (:class:`RegionElsewhereError`: the serving layer sends the request to a replica
  on that node).

Errors carry Triton's codes and messages.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import numpy as np

from repo_adapter.datatypes import input_from_bytes
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import SharedMemoryTarget
from repo_adapter.request_validation import log_request

SHM_DIRECTORY = "/dev/shm"  # where shm_open(3) keeps its objects on Linux
# Keys Triton keeps for its python backend's own regions.
RESERVED_KEY_PREFIX = "triton_python_backend_shm_region_"
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)


@dataclass(frozen=True)
class SystemRegion:
    """A registered region: ``byte_size`` bytes at ``offset`` of the object ``key``, on the
    node ``node_id`` (where it was registered)."""

    name: str
    key: str
    offset: int
    byte_size: int
    node_id: str = ""

    def status(self) -> dict[str, object]:
        """Triton's status entry of the region."""
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


# The registered regions now, from the table's owner.
RegionFetch = Callable[[], Awaitable[list[SystemRegion]]]


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
        self._regions: dict[str, SystemRegion] = {}

    def register(self, name: str, key: str, offset: int, byte_size: int) -> SystemRegion:
        """Register a region after checking its key and that it lies inside the object."""
        _check_key(name, key)
        if name in self._regions:
            raise InferenceServerError(
                f"shared memory region '{name}' already in manager", StatusCode.ALREADY_EXISTS
            )
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

    def unregister(self, name: str = "") -> list[str]:
        """Forget ``name`` (every region when empty; an unknown name is no error, as in
        Triton); the names forgotten."""
        if not name:
            names = list(self._regions)
            self._regions.clear()
            return names
        return [name] if self._regions.pop(name, None) is not None else []

    def status(self, name: str = "") -> list[SystemRegion]:
        """Every region, or the one named (NOT_FOUND when it is not registered)."""
        if not name:
            return list(self._regions.values())
        region = self._regions.get(name)
        if region is None:
            raise InferenceServerError(
                f"Unable to find system shared memory region: '{name}'", StatusCode.NOT_FOUND
            )
        return [region]

    def regions(self) -> list[SystemRegion]:
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
        self._regions: dict[str, SystemRegion] = {}
        self._maps: dict[str, mmap.mmap] = {}

    async def refresh(self) -> None:
        """Take the table's regions now (a region registered since this process last heard)."""
        if self.fetch is not None:
            self.adopt(await self.fetch())

    def adopt(self, regions: Iterable[SystemRegion]) -> None:
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
                with contextlib.suppress(BufferError):
                    mapped.close()

    def _mapping(self, name: str) -> tuple[SystemRegion, mmap.mmap]:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotKnownError(name)
        if region.node_id and self.node_id and region.node_id != self.node_id:
            raise RegionElsewhereError(name, region.node_id, self.node_id)
        mapped = self._maps.get(name)
        if mapped is None:
            descriptor = _open(region.key)
            try:
                mapped = mmap.mmap(descriptor, region.offset + region.byte_size)
            except (OSError, ValueError):
                raise InferenceServerError(
                    f"Invalid shared memory region: '{region.key}'", StatusCode.INTERNAL
                ) from None
            finally:
                os.close(descriptor)
            self._maps[name] = mapped
        return region, mapped

    def _span(self, name: str, offset: int, byte_size: int) -> tuple[mmap.mmap, int]:
        region, mapped = self._mapping(name)
        if offset >= region.byte_size or offset + byte_size > region.byte_size or not byte_size:
            raise InferenceServerError(
                f"Invalid offset + byte size for shared memory region: '{name}'"
            )
        return mapped, region.offset + offset

    def read(self, name: str, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes at ``offset`` of the region: a view of the mapping."""
        mapped, start = self._span(name, offset, byte_size)
        return memoryview(mapped)[start : start + byte_size]

    def check(self, name: str, offset: int, byte_size: int) -> None:
        """Whether an output may go there (before the request runs)."""
        self._span(name, offset, byte_size)

    def write(self, name: str, offset: int, byte_size: int, data: bytes | memoryview) -> None:
        """Put ``data`` at ``offset`` of the region, which holds ``byte_size`` bytes there."""
        mapped, start = self._span(name, offset, byte_size)
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


_process_regions = MappedRegions()


def process_regions() -> MappedRegions:
    """This process's regions (one per serving process, like its tracer): what its
    transports read inputs from and write outputs into."""
    return _process_regions
