"""The response cache without Ray: keys, the LRU store within its size, and a SingleModel
answering from it with Triton's statistics."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from deployments.core.response_cache import (
    ENTRY_OVERHEAD_BYTES,
    LocalResponseStore,
    LruResponseStore,
    ModelResponseCache,
    answers,
    decode_entry,
    encode_entry,
    request_key,
)
from deployments.core.single_model import SingleModel
from repo_adapter.backends import InstanceSpec
from repo_adapter.inference_types import InferRequest, InferTensor, RequestedOutput
from repo_adapter.repository import scan_model

REPOSITORY = Path(__file__).parents[1] / "model_repository"


def tensor(name: str, values, datatype: str = "FP32") -> InferTensor:
    dtype = {"FP32": np.float32, "INT32": np.int32}.get(datatype, np.object_)
    return InferTensor(name, datatype, np.array(values, dtype=dtype))


def test_the_key_covers_model_version_and_every_inputs_name_type_shape_and_data():
    inputs = [tensor("A", [[1.0, 2.0]]), tensor("B", [[3.0]])]
    key = request_key("m\0gen", 1, inputs)
    assert key == request_key("m\0gen", 1, list(reversed(inputs)))  # input order is not part
    different = [
        request_key("other\0gen", 1, inputs),
        request_key("m\0gen2", 1, inputs),  # the model reloaded from other files
        request_key("m\0gen", 2, inputs),
        request_key("m\0gen", 1, [tensor("A", [[1.0, 2.5]]), inputs[1]]),
        request_key("m\0gen", 1, [tensor("A", [[1.0], [2.0]]), inputs[1]]),  # same bytes
        request_key("m\0gen", 1, [tensor("C", [[1.0, 2.0]]), inputs[1]]),
        request_key("m\0gen", 1, [tensor("A", [[1, 2]], "INT32"), inputs[1]]),
    ]
    assert key not in different and len(set(different)) == len(different)


def test_bytes_inputs_are_keyed_by_their_elements():
    one = request_key("m", 1, [tensor("S", [b"ab", b"c"], "BYTES")])
    other = request_key("m", 1, [tensor("S", [b"a", b"bc"], "BYTES")])
    assert one != other
    assert one == request_key("m", 1, [tensor("S", [b"ab", b"c"], "BYTES")])


def test_an_entry_keeps_every_outputs_name_datatype_shape_and_data():
    outputs = [
        tensor("OUT", [[1.0, 2.0], [3.0, 4.0]]),
        tensor("TEXT", [b"ab", b"", b"\x00c"], "BYTES"),
        tensor("N", [[7]], "INT32"),
    ]
    decoded = decode_entry(encode_entry(outputs))
    assert [(t.name, t.datatype, t.shape) for t in decoded] == [
        ("OUT", "FP32", (2, 2)),
        ("TEXT", "BYTES", (3,)),
        ("N", "INT32", (1, 1)),
    ]
    for mine, theirs in zip(decoded, outputs, strict=True):
        np.testing.assert_array_equal(mine.data, theirs.data)


def test_the_store_evicts_the_least_recently_used_within_its_size():
    entry = b"x" * 400
    size = len(entry) + ENTRY_OVERHEAD_BYTES
    store = LruResponseStore(3 * size)
    for key in (b"a", b"b", b"c"):
        assert store.put(key, entry)
    assert store.get(b"a") == entry  # now the most recently used
    store.put(b"d", entry)  # evicts b, the least recently used
    assert store.get(b"b") is None
    assert all(store.get(key) == entry for key in (b"a", b"c", b"d"))
    usage = store.usage()
    assert (usage.entries, usage.used_bytes, usage.evictions) == (3, 3 * size, 1)
    assert (usage.lookups, usage.hits, usage.misses) == (5, 4, 1)
    assert not store.put(b"huge", b"x" * (3 * size))  # larger than the cache
    assert store.usage().entries == 3


def test_replacing_an_entry_counts_its_size_once():
    store = LruResponseStore(10_000)
    store.put(b"k", b"x" * 400)
    store.put(b"k", b"x" * 40)
    assert store.usage().used_bytes == 40 + ENTRY_OVERHEAD_BYTES


def test_an_entry_answers_only_requests_whose_outputs_it_holds():
    entry = [tensor("OUT", [1.0])]
    assert answers(entry, [RequestedOutput("OUT")], ["OUT", "EXTRA"])
    assert not answers(entry, [RequestedOutput("EXTRA")], ["OUT", "EXTRA"])
    assert not answers(entry, [], ["OUT", "EXTRA"])  # a request naming none wants them all
    assert answers(entry, [], ["OUT"])


@pytest.fixture
def cached_recorder(tmp_path):
    model_dir = tmp_path / "batch_recorder"
    shutil.copytree(REPOSITORY / "batch_recorder", model_dir)
    config = model_dir / "config.pbtxt"
    config.write_text(config.read_text() + "response_cache { enable: true }\n")
    scanned = scan_model(model_dir)
    assert scanned.available, scanned.error
    store = LocalResponseStore(1 << 20)
    model = SingleModel(
        scanned.config,
        model_dir,
        scanned.versions,
        scanned.labels,
        InstanceSpec.cpu(scanned.name),
        cache=ModelResponseCache(store, "batch_recorder\0g1"),
    )
    yield model, store
    asyncio.run(model.close())


def rows_request(value: float, outputs: list[str] | None = None) -> InferRequest:
    return InferRequest(
        "batch_recorder",
        [InferTensor("IN", "FP32", np.full((1, 2), value, np.float32))],
        outputs=[RequestedOutput(name) for name in outputs or []],
    )


async def test_a_repeated_request_is_answered_from_the_cache_with_tritons_counts(cached_recorder):
    model, store = cached_recorder
    first = await model.infer(rows_request(1.0))
    again = await model.infer(rows_request(1.0))
    assert [t.name for t in again.outputs] == [t.name for t in first.outputs]
    np.testing.assert_array_equal(again.output("OUT").data, first.output("OUT").data)
    assert again.model_version == "1"
    await model.infer(rows_request(2.0))  # another input: a miss
    stats = model.statistics()[0]
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 2)
    assert inference["success"]["count"] == inference["queue"]["count"] == 3
    assert inference["compute_infer"]["count"] == 2  # a hit runs nothing
    assert (stats["inference_count"], stats["execution_count"]) == (2, 2)
    assert inference["cache_hit"]["ns"] > 0 and inference["cache_miss"]["ns"] > 0
    assert store.store.usage().entries == 2
    metrics = model.metrics()[0]
    assert metrics["response_cache"] and metrics["cache_hit_count"] == 1


async def test_a_hit_gives_the_requested_outputs_and_a_subset_entry_misses(cached_recorder):
    model, _ = cached_recorder
    await model.infer(rows_request(3.0))
    selected = await model.infer(rows_request(3.0, ["BATCH_ROWS", "OUT"]))
    assert [t.name for t in selected.outputs] == ["BATCH_ROWS", "OUT"]
    assert model.statistics()[0]["inference_stats"]["cache_hit"]["count"] == 1
