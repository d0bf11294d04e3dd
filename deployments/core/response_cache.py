"""Triton's response cache, Ray-free: the key of a request, the LRU store of responses, and a
model's view of a store.

A request's key is a hash of its model (and of what the repository loaded for it, so a
reloaded model never answers from its old files), its version and its inputs (name, datatype,
shape and data, in name order). A cached entry is every output the model produced for the
request; a hit whose entry lacks an output the request names is answered as a miss (Triton
2.51 answers it with the cached outputs). Only successful responses are cached.

:class:`LruResponseStore` holds entries within a byte budget, least recently used evicted
first; the node's cache actor keeps one for every replica of the node
(:mod:`deployments.apps.node_response_cache`).
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from repo_adapter.datatypes import serialize_bytes_tensor, tensor_from_bytes, tensor_to_bytes
from repo_adapter.inference_types import InferRequest, InferTensor, RequestedOutput

# What one entry costs beside its encoded bytes: its key and the store's bookkeeping.
ENTRY_OVERHEAD_BYTES = 256


def request_key(scope: str, version: int, inputs: Sequence[InferTensor]) -> bytes:
    """The cache key of a request with ``inputs`` for ``version`` of the model ``scope`` names
    (its name and what the repository loaded for it)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(scope.encode())
    digest.update(b"\0%d" % version)
    for tensor in sorted(inputs, key=lambda t: t.name):
        header = f"\0{tensor.name}\0{tensor.datatype}\0{list(tensor.shape)}\0"
        digest.update(header.encode())
        digest.update(_tensor_bytes(tensor))
    return digest.digest()


def _tensor_bytes(tensor: InferTensor) -> bytes | np.ndarray:
    if tensor.datatype == "BYTES":
        return serialize_bytes_tensor(tensor.data)
    return np.ascontiguousarray(tensor.data)  # a buffer: hashed without a copy


def encode_entry(outputs: Sequence[InferTensor]) -> bytes:
    """``outputs`` as one cache entry: a JSON header (each tensor's name, datatype, shape and
    byte size) after its 4-byte length, then the tensors' raw bytes."""
    buffers = [tensor_to_bytes(tensor.data, tensor.datatype) for tensor in outputs]
    header = json.dumps(
        [
            [tensor.name, tensor.datatype, list(tensor.shape), len(buffer)]
            for tensor, buffer in zip(outputs, buffers, strict=True)
        ]
    ).encode()
    return b"".join([struct.pack("<I", len(header)), header, *buffers])


def decode_entry(entry: bytes) -> list[InferTensor]:
    """The outputs :func:`encode_entry` made ``entry`` of (fixed-size tensors are read-only
    views over it)."""
    (header_size,) = struct.unpack_from("<I", entry)
    view = memoryview(entry)
    offset = 4 + header_size
    outputs = []
    for name, datatype, shape, size in json.loads(view[4:offset].tobytes()):
        data = tensor_from_bytes(view[offset : offset + size], datatype, tuple(shape))
        outputs.append(InferTensor(name, datatype, data))
        offset += size
    return outputs


@dataclass(frozen=True)
class CacheUsage:
    """A store's size and counters (Triton's server-wide ``nv_cache_*`` gauges)."""

    capacity_bytes: int
    used_bytes: int
    entries: int
    lookups: int
    hits: int
    misses: int
    evictions: int
    lookup_ns: int
    insertion_ns: int


class LruResponseStore:
    """Entries (:func:`encode_entry`) by key within ``capacity_bytes``, the least recently
    used evicted first; an entry counts its bytes and :data:`ENTRY_OVERHEAD_BYTES`."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._used = 0
        self._lookups = self._hits = self._evictions = 0
        self._lookup_ns = self._insertion_ns = 0

    def get(self, key: bytes) -> bytes | None:
        started = time.monotonic_ns()
        self._lookups += 1
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            self._hits += 1
        self._lookup_ns += time.monotonic_ns() - started
        return entry

    def put(self, key: bytes, entry: bytes) -> bool:
        """Keep ``entry`` under ``key``, evicting what it needs; False when the entry is
        larger than the whole cache (it is not kept)."""
        started = time.monotonic_ns()
        size = len(entry) + ENTRY_OVERHEAD_BYTES
        if size > self.capacity_bytes:
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self._used -= len(old) + ENTRY_OVERHEAD_BYTES
        while self._used + size > self.capacity_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._used -= len(evicted) + ENTRY_OVERHEAD_BYTES
            self._evictions += 1
        self._entries[key] = entry
        self._used += size
        self._insertion_ns += time.monotonic_ns() - started
        return True

    def usage(self) -> CacheUsage:
        return CacheUsage(
            capacity_bytes=self.capacity_bytes,
            used_bytes=self._used,
            entries=len(self._entries),
            lookups=self._lookups,
            hits=self._hits,
            misses=self._lookups - self._hits,
            evictions=self._evictions,
            lookup_ns=self._lookup_ns,
            insertion_ns=self._insertion_ns,
        )


class CacheUnavailableError(Exception):
    """The store cannot be used now (the server has no cache, or it cannot be reached): the
    request runs uncached, counted neither as a hit nor as a miss."""


class ResponseStore(Protocol):
    """Where a model's cached responses are kept (a node's shared cache in a replica)."""

    async def lookup(self, key: bytes) -> list[InferTensor] | None:
        """The outputs kept under ``key`` (None: a miss).

        Raises:
            CacheUnavailableError: the store cannot be used now.
        """
        ...

    async def insert(self, key: bytes, outputs: list[InferTensor]) -> None:
        """Keep ``outputs`` under ``key`` (best effort: a store that cannot be reached
        keeps nothing)."""
        ...


class LocalResponseStore:
    """A :class:`ResponseStore` in this process (one model server without Ray's actors)."""

    def __init__(self, capacity_bytes: int) -> None:
        self.store = LruResponseStore(capacity_bytes)

    async def lookup(self, key: bytes) -> list[InferTensor] | None:
        entry = self.store.get(key)
        return None if entry is None else decode_entry(entry)

    async def insert(self, key: bytes, outputs: list[InferTensor]) -> None:
        self.store.put(key, encode_entry(outputs))


class CacheStatistics(Protocol):
    """Where a version's cache hits and misses are counted (Triton's
    ``UpdateSuccessCacheHit`` / ``UpdateSuccessCacheMiss``)."""

    def record_cache_hit(self, arrival_ns: int, lookup_start_ns: int, lookup_ns: int) -> None: ...

    def record_cache_miss(self, cache_ns: int) -> None: ...


Response = TypeVar("Response")


@dataclass(frozen=True)
class ModelResponseCache:
    """One model's use of a store: its requests' keys are scoped by ``scope`` (the model's
    name and what the repository loaded for it)."""

    store: ResponseStore
    scope: str

    def key(self, version: int, inputs: Sequence[InferTensor]) -> bytes:
        return request_key(self.scope, version, inputs)

    async def respond(
        self,
        request: InferRequest,
        version: int,
        every_output: Sequence[str],
        statistics: CacheStatistics,
        run: Callable[[], Awaitable[tuple[Response, list[InferTensor]]]],
        hit: Callable[[list[InferTensor]], Response],
        arrival_ns: int,
    ) -> Response:
        """``request``'s response: ``hit`` of the cached outputs when the store holds every
        output the request wants, else ``run``'s response (whose outputs the store then keeps).
        A store that cannot be reached leaves the request to ``run``, counted as neither."""
        key = self.key(version, request.inputs)
        lookup_start_ns = time.monotonic_ns()
        try:
            cached = await self.store.lookup(key)
        except CacheUnavailableError:
            return (await run())[0]
        lookup_ns = time.monotonic_ns() - lookup_start_ns
        if cached is not None and answers(cached, request.outputs, every_output):
            statistics.record_cache_hit(arrival_ns, lookup_start_ns, lookup_ns)
            return hit(cached)
        response, outputs = await run()
        insert_start_ns = time.monotonic_ns()
        await self.store.insert(key, outputs)
        statistics.record_cache_miss(lookup_ns + time.monotonic_ns() - insert_start_ns)
        return response


def answers(
    entry: list[InferTensor], requested: Sequence[RequestedOutput], every_output: Sequence[str]
) -> bool:
    """Whether a cached entry holds every output a request names (``every_output``, the
    model's configured outputs, when it names none)."""
    held = {tensor.name for tensor in entry}
    wanted = [output.name for output in requested] if requested else every_output
    return all(name in held for name in wanted)
