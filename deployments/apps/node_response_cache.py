"""The response cache every replica of a node shares: one actor per node holds it.

* :class:`ResponseCacheActor` holds a node's :class:`~deployments.core.response_cache.
  LruResponseStore` (``--cache-config local,size=BYTES``: each node's cache holds up to that).
* :class:`NodeCaches` is the repository controller's: it starts a node's cache actor the first
  time a replica there asks for it and owns it (the caches stop with the controller, and a
  cache that dies is started again by Ray, empty).
* :class:`NodeResponseStore` is a replica's :class:`~deployments.core.response_cache.
  ResponseStore`: its node's actor, asked of the controller when the replica first needs it.
  While there is none (the server has no cache) or it cannot be reached, requests run
  uncached.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.response_cache import (
    CacheUnavailableError,
    CacheUsage,
    LruResponseStore,
    ModelResponseCache,
)
from repo_adapter.inference_types import InferTensor

logger = logging.getLogger(__name__)

_ACTOR_PREFIX = "rayton-response-cache-"
# How long a replica whose cache could not be found waits before asking again.
_RETRY_S = 5.0
# A lookup or insert that takes longer is given up (the request runs uncached).
_CALL_TIMEOUT_S = 10.0


# Asks the controller for a node's cache actor (None: the server has no response cache).
CacheFinder = Callable[[str], Awaitable[ActorHandle | None]]


@ray.remote(num_cpus=0, max_restarts=-1)
class ResponseCacheActor:
    """One node's response cache."""

    def __init__(self, capacity_bytes: int) -> None:
        self._store = LruResponseStore(capacity_bytes)

    def lookup(self, key: bytes) -> list[InferTensor] | None:
        return self._store.get(key)

    def insert(self, key: bytes, outputs: list[InferTensor]) -> bool:
        return self._store.put(key, outputs)

    def usage(self) -> CacheUsage:
        return self._store.usage()


class NodeCaches:
    """The controller's node caches: started on demand, one per node, owned here."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes  # 0: the server has no response cache
        self._actors: dict[str, ActorHandle] = {}

    def for_node(self, node_id: str) -> ActorHandle | None:
        """``node_id``'s cache, started if it is not yet (None: the server has none)."""
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
        return actor

    async def usage(self) -> list[CacheUsage]:
        """Every node cache's size and counters (those that answer)."""
        answers = await asyncio.gather(
            *(actor.usage.remote() for actor in self._actors.values()), return_exceptions=True
        )
        return [answer for answer in answers if isinstance(answer, CacheUsage)]


class NodeResponseStore:
    """A replica's view of its node's cache (a
    :class:`~deployments.core.response_cache.ResponseStore`); ``find_cache`` asks the
    controller for a node's cache actor."""

    def __init__(self, find_cache: CacheFinder) -> None:
        self._find_cache = find_cache
        self._actor: ActorHandle | None = None
        self._none = False  # the server has no response cache
        self._next_try = 0.0
        self._finding = asyncio.Lock()

    async def _cache(self) -> ActorHandle | None:
        if self._actor is not None or self._none or time.monotonic() < self._next_try:
            return self._actor
        async with self._finding:  # one question to the controller at a time
            if self._actor is None and time.monotonic() >= self._next_try:
                await self._find()
        return self._actor

    async def _find(self) -> None:
        try:
            self._actor = await self._find_cache(ray.get_runtime_context().get_node_id())
            self._none = self._actor is None
        except Exception as err:  # the controller is starting or moving: ask again later
            logger.warning("the node's response cache cannot be reached yet: %s", err)
            self._next_try = time.monotonic() + _RETRY_S

    def _lost(self, err: Exception) -> None:
        logger.warning("the node's response cache did not answer: %s", err)
        self._actor = None
        self._next_try = time.monotonic() + _RETRY_S

    async def lookup(self, key: bytes) -> list[InferTensor] | None:
        actor = await self._cache()
        if actor is None:
            raise CacheUnavailableError
        try:
            return await asyncio.wait_for(actor.lookup.remote(key), _CALL_TIMEOUT_S)
        except (RayError, asyncio.TimeoutError) as err:
            self._lost(err)
            raise CacheUnavailableError from err

    async def insert(self, key: bytes, outputs: list[InferTensor]) -> None:
        actor = await self._cache()
        if actor is None:
            return
        try:
            await asyncio.wait_for(actor.insert.remote(key, outputs), _CALL_TIMEOUT_S)
        except (RayError, asyncio.TimeoutError) as err:
            self._lost(err)


def model_cache(
    config: mc.ModelConfig, generation: str, store: NodeResponseStore
) -> ModelResponseCache | None:
    """The response cache of a model whose config enables it (None otherwise), its keys
    scoped by the model's name and ``generation`` (what the repository loaded for it)."""
    if not config.response_cache.enable:
        return None
    return ModelResponseCache(store, f"{config.name}\0{generation}")
