"""A node cache's socket without Ray: a replica's store talking to the cache server on a real
Unix socket, and what a replica does when the cache goes away or the server has none."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from deployments.apps.node_response_cache import CacheServer, NodeResponseStore
from deployments.core.response_cache import (
    CacheUnavailableError,
    LruResponseStore,
    request_key,
)
from repo_adapter.inference_types import InferTensor


def outputs(value: float) -> list[InferTensor]:
    return [
        InferTensor("OUT", "FP32", np.full((1, 4), value, np.float32)),
        InferTensor("TEXT", "BYTES", np.array([b"v%d" % value], np.object_)),
    ]


async def serving(tmp_path, capacity: int = 1 << 20) -> tuple[CacheServer, str]:
    server = CacheServer(LruResponseStore(capacity))
    path = str(tmp_path / "cache.sock")
    await server.start(path)
    return server, path


async def test_replicas_share_entries_through_the_socket(tmp_path):
    server, path = await serving(tmp_path)

    async def find() -> str:
        return path

    one, other = NodeResponseStore(find), NodeResponseStore(find)
    key = request_key("m\0g", 1, outputs(1.0))
    assert await one.lookup(key) is None
    await one.insert(key, outputs(2.0))
    found = await other.lookup(key)  # another replica's store: the same cache
    assert [t.name for t in found] == ["OUT", "TEXT"]
    np.testing.assert_array_equal(found[0].data, np.full((1, 4), 2.0))
    assert found[1].data.tolist() == [b"v2"]
    # concurrent calls use connections of their own
    keys = [request_key("m\0g", 2, outputs(float(i))) for i in range(20)]
    await asyncio.gather(*(one.insert(k, outputs(float(i))) for i, k in enumerate(keys)))
    found = await asyncio.gather(*(other.lookup(k) for k in keys))
    assert [float(f[0].data[0, 0]) for f in found] == [float(i) for i in range(20)]
    usage = server.store.usage()
    assert usage.entries == 21 and usage.hits == 21
    await one.close()
    await other.close()
    await server.close()


async def test_an_entry_larger_than_the_cache_is_not_kept(tmp_path):
    server, path = await serving(tmp_path, capacity=300)

    async def find() -> str:
        return path

    store = NodeResponseStore(find)
    await store.insert(b"k" * 16, outputs(1.0) * 10)
    assert await store.lookup(b"k" * 16) is None
    await store.close()
    await server.close()


async def test_without_a_server_cache_every_request_runs_uncached():
    asked = []

    async def none() -> None:
        asked.append(1)
        return None

    store = NodeResponseStore(none)
    for _ in range(3):
        with pytest.raises(CacheUnavailableError):
            await store.lookup(b"k" * 16)
    assert asked == [1]  # the controller said there is none: not asked again


async def test_a_cache_that_went_away_is_unavailable_until_found_again(tmp_path):
    async def find() -> str:
        return str(tmp_path / "gone.sock")  # nothing listens there

    store = NodeResponseStore(find)
    with pytest.raises(CacheUnavailableError):
        await store.lookup(b"k" * 16)
    await store.insert(b"k" * 16, outputs(1.0))  # an insert gives up quietly
