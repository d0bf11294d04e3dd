"""The response cache every replica of a node shares: one actor per node holds it.

* :class:`ResponseCacheActor` holds a node's :class:`~deployments.core.response_cache.
  LruResponseStore` (``--cache-config local,size=BYTES``: each node's cache holds up to that)
  and serves lookups and inserts on a Unix socket of its node: a Ray actor call costs a hit
  about a millisecond, the socket a tenth of that (BENCHMARKS.md).
* :class:`NodeCaches` is the repository controller's: it starts a node's cache actor the first
  time a replica there asks for it and owns it (the caches stop with the controller, and a
  cache that dies is started again by Ray, empty).
* :class:`NodeResponseStore` is a replica's :class:`~deployments.core.response_cache.
  ResponseStore`: its node's cache, asked of the controller when the replica first needs it.
  While there is none (the server has no cache) or it cannot be reached, requests run
  uncached.

The socket's messages: a lookup is ``b"L"`` and the 16-byte key, answered by the entry's
4-byte length and the entry (length ``0xFFFFFFFF``: a miss); an insert is ``b"I"``, the key,
the entry's 4-byte length and the entry, answered by one byte (``b"1"`` kept, ``b"0"`` too
large for the cache). Entries are :func:`~deployments.core.response_cache.encode_entry`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import ray
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.response_cache import (
    CacheUnavailableError,
    CacheUsage,
    LruResponseStore,
    ModelResponseCache,
    decode_entry,
    encode_entry,
)
from repo_adapter.inference_types import InferTensor

logger = logging.getLogger(__name__)

_ACTOR_PREFIX = "rayton-response-cache-"
# How long a replica whose cache could not be found waits before asking again.
_RETRY_S = 5.0
# A lookup or insert that takes longer is given up (the request runs uncached).
_CALL_TIMEOUT_S = 10.0
# Connections one replica keeps open to its node's cache (one per concurrent call).
_MAX_IDLE_CONNECTIONS = 8
_LOOKUP, _INSERT = b"L", b"I"
_KEY_BYTES = 16
_MISS = 0xFFFFFFFF
_LENGTH = struct.Struct("<I")

T = TypeVar("T")
# Asks the controller for this node's cache socket (None: the server has no response cache).
CacheFinder = Callable[[], Awaitable[str | None]]


class CacheServer:
    """A store served on a Unix socket (the messages above)."""

    def __init__(self, store: LruResponseStore) -> None:
        self.store = store
        self._server: asyncio.AbstractServer | None = None

    async def start(self, path: str) -> None:
        if self._server is None:
            self._server = await asyncio.start_unix_server(self._serve, path=path)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                op = await reader.read(1)
                if not op:
                    return
                key = await reader.readexactly(_KEY_BYTES)
                if op == _LOOKUP:
                    entry = self.store.get(key)
                    if entry is None:
                        writer.write(_LENGTH.pack(_MISS))
                    else:
                        writer.writelines((_LENGTH.pack(len(entry)), entry))
                elif op == _INSERT:
                    (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                    kept = self.store.put(key, await reader.readexactly(size))
                    writer.write(b"1" if kept else b"0")
                else:
                    return  # not a client of this protocol
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


@ray.remote(num_cpus=0, max_restarts=-1)
class ResponseCacheActor:
    """One node's response cache, served on a Unix socket of the node (in a directory only
    this user can open)."""

    def __init__(self, capacity_bytes: int) -> None:
        self._server = CacheServer(LruResponseStore(capacity_bytes))
        self._directory = tempfile.mkdtemp(prefix="rayton-cache-")  # mode 0700
        self._path = os.path.join(self._directory, "cache.sock")

    async def socket_path(self) -> str:
        """Where the cache answers (its server starts on the first call)."""
        await self._server.start(self._path)
        return self._path

    async def usage(self) -> CacheUsage:
        return self._server.store.usage()

    def __ray_shutdown__(self) -> None:  # a graceful end (its owner gone): no file left
        shutil.rmtree(self._directory, ignore_errors=True)


class NodeCaches:
    """The controller's node caches: started on demand, one per node, owned here."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes  # 0: the server has no response cache
        self._actors: dict[str, ActorHandle] = {}

    async def socket_for_node(self, node_id: str) -> str | None:
        """Where ``node_id``'s cache answers, started if it is not yet (None: the server has
        no response cache)."""
        if not self.capacity_bytes:
            return None
        actor = self._actors.get(node_id)
        if actor is None:
            actor = ResponseCacheActor.options(
                name=_ACTOR_PREFIX + node_id,
                get_if_exists=True,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(self.capacity_bytes)
            self._actors[node_id] = actor
        return await actor.socket_path.remote()

    async def usage(self) -> list[CacheUsage]:
        """Every node cache's size and counters (those that answer)."""
        answers = await asyncio.gather(
            *(actor.usage.remote() for actor in self._actors.values()), return_exceptions=True
        )
        return [answer for answer in answers if isinstance(answer, CacheUsage)]


class NodeResponseStore:
    """A replica's view of its node's cache (a
    :class:`~deployments.core.response_cache.ResponseStore`); ``find_cache`` asks the
    controller where this node's cache answers."""

    def __init__(self, find_cache: CacheFinder) -> None:
        self._find_cache = find_cache
        self._path: str | None = None
        self._none = False  # the server has no response cache
        self._next_try = 0.0
        self._finding = asyncio.Lock()
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _socket(self) -> str:
        if self._path is None and not self._none and time.monotonic() >= self._next_try:
            async with self._finding:  # one question to the controller at a time
                if self._path is None and time.monotonic() >= self._next_try:
                    await self._find()
        if self._path is None:
            raise CacheUnavailableError
        return self._path

    async def _find(self) -> None:
        try:
            self._path = await self._find_cache()
            self._none = self._path is None
        except (Exception, asyncio.TimeoutError) as err:  # starting or moving: ask again later
            logger.warning("the node's response cache cannot be reached yet: %s", err)
            self._next_try = time.monotonic() + _RETRY_S

    async def _call(
        self, message: list[bytes], read: Callable[[asyncio.StreamReader], Awaitable[T]]
    ) -> T:
        path = await self._socket()
        writer: asyncio.StreamWriter | None = None
        try:
            if self._idle:
                reader, writer = self._idle.pop()
            else:
                reader, writer = await asyncio.open_unix_connection(path)
            writer.writelines(message)
            answer = await asyncio.wait_for(read(reader), _CALL_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as err:
            if writer is not None:
                writer.close()
            self._lost(err)
            raise CacheUnavailableError from err
        except BaseException:  # cancelled mid-call: the connection's state is unknown
            if writer is not None:
                writer.close()
            raise
        if len(self._idle) < _MAX_IDLE_CONNECTIONS:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return answer

    async def close(self) -> None:
        """Close the connections kept open to the cache."""
        writers = [writer for _, writer in self._idle]
        self._idle.clear()
        for writer in writers:
            writer.close()
        for writer in writers:
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _lost(self, err: BaseException) -> None:
        logger.warning("the node's response cache did not answer: %r", err)
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()
        self._path = None  # ask the controller again: the cache may have been restarted
        self._next_try = time.monotonic() + _RETRY_S

    async def lookup(self, key: bytes) -> list[InferTensor] | None:
        async def read(reader: asyncio.StreamReader) -> bytes | None:
            (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            return None if size == _MISS else await reader.readexactly(size)

        entry = await self._call([_LOOKUP, key], read)
        return None if entry is None else decode_entry(entry)

    async def insert(self, key: bytes, outputs: list[InferTensor]) -> None:
        entry = encode_entry(outputs)

        async def read(reader: asyncio.StreamReader) -> bytes:
            return await reader.readexactly(1)

        with contextlib.suppress(CacheUnavailableError):  # not kept: the next one runs again
            await self._call([_INSERT, key, _LENGTH.pack(len(entry)), entry], read)


def model_cache(
    config: mc.ModelConfig, generation: str, store: NodeResponseStore
) -> ModelResponseCache | None:
    """The response cache of a model whose config enables it (None otherwise), its keys
    scoped by the model's name and ``generation`` (what the repository loaded for it)."""
    if not config.response_cache.enable:
        return None
    return ModelResponseCache(store, f"{config.name}\0{generation}")
