"""Model discovery and statistics deltas (no server)."""

from __future__ import annotations

import pytest

from rayton_perf.config import PerfError
from rayton_perf.server_stats import (
    ServerStats,
    model_info_from,
    parse_statistics,
    select_version,
    supports_statistics,
    window_delta,
)

METADATA = {
    "name": "ident",
    "versions": ["1"],
    "platform": "python",
    "inputs": [{"name": "IN", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [-1, 4]}],
}
CONFIG = {
    "name": "ident",
    "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": False}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
    "dynamic_batching": {},
}


def _entry(version="1", n=0, queue_ns=0, batches=None, as_strings=False):
    def num(x):
        return str(x) if as_strings else x

    def d(count, ns):
        return {"count": num(count), "ns": num(ns)}

    return {
        "name": "ident",
        "version": version,
        "inference_count": num(n * 2),
        "execution_count": num(n),
        "inference_stats": {
            "success": d(n, n * 1000),
            "fail": d(0, 0),
            "queue": d(n, queue_ns),
            "compute_input": d(n, n * 100),
            "compute_infer": d(n, n * 500),
            "compute_output": d(n, n * 100),
            "cache_hit": d(0, 0),
            "cache_miss": d(0, 0),
        },
        "batch_stats": [
            {"batch_size": num(b), "compute_infer": d(c, c * 10)}
            for b, c in (batches or {}).items()
        ],
    }


def test_statistics_extension_detection():
    assert supports_statistics({"extensions": ["binary_tensor_data", "statistics"]})
    assert not supports_statistics({"extensions": ["binary_tensor_data"]})
    assert not supports_statistics({})


def test_model_info_strips_batch_dim():
    info = model_info_from(METADATA, CONFIG)
    assert info.max_batch_size == 8 and info.batching and info.dynamic_batching
    assert info.inputs[0].dims == [4]
    assert info.outputs[0].dims == [4]
    assert info.platform == "python"
    unbatched = model_info_from(
        {**METADATA, "inputs": [{"name": "IN", "datatype": "FP32", "shape": [4]}]},
        {**CONFIG, "max_batch_size": 0},
    )
    assert unbatched.inputs[0].dims == [4] and not unbatched.batching


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"model_transaction_policy": {"decoupled": True}}, "decoupled"),
        ({"sequence_batching": {}}, "sequence"),
        ({"input": [{"name": "IN", "is_shape_tensor": True}]}, "shape tensor"),
    ],
)
def test_model_info_refuses_unsupported_models(extra, message):
    with pytest.raises(PerfError, match=message):
        model_info_from(METADATA, {**CONFIG, **extra})


def test_from_json_http_and_grpc_forms_agree():
    http = ServerStats.from_json(_entry(n=4, queue_ns=800, batches={1: 2, 2: 1}))
    grpc = ServerStats.from_json(_entry(n=4, queue_ns=800, batches={1: 2, 2: 1}, as_strings=True))
    assert http == grpc
    assert http.success_count == 4 and http.inference_count == 8
    assert http.batch_executions == {1: 2, 2: 1}
    # Protobuf JSON omits zero fields entirely.
    assert ServerStats.from_json({"name": "ident", "version": "1"}) == ServerStats()


def test_delta_and_averages():
    start = parse_statistics({"model_stats": [_entry(n=10, queue_ns=10_000, batches={1: 10})]})
    end = parse_statistics({"model_stats": [_entry(n=30, queue_ns=70_000, batches={1: 12, 4: 5})]})
    delta = window_delta("ident", "", start, end)
    assert delta.success_count == 20
    assert delta.execution_count == 20
    assert delta.inference_count == 40
    assert delta.batch_executions == {1: 2, 4: 5}
    assert delta.avg_queue_us == 3  # 60_000 ns / 20 requests = 3 us
    assert delta.avg_request_us == 1
    assert delta.avg_compute_infer_us == 0  # 500 ns -> 0 us, truncated as perf_analyzer does
    assert delta.avg_overhead_us >= 0
    assert (delta + delta).success_count == 40


def test_version_selection_as_perf_analyzer():
    start = parse_statistics({"model_stats": [_entry("1", 5), _entry("2", 5)]})
    end = parse_statistics({"model_stats": [_entry("1", 5), _entry("2", 9)]})
    assert select_version("ident", "", start, end) == "2"  # the one whose queue count grew
    both = parse_statistics({"model_stats": [_entry("1", 6), _entry("2", 9)]})
    assert select_version("ident", "", start, both) == "2"  # highest when several grew
    assert select_version("ident", "1", start, end) == "1"  # -x wins
    with pytest.raises(PerfError, match="failed to find the requested model version"):
        select_version("ident", "", start, start)
    with pytest.raises(PerfError, match="failed to find"):
        select_version("ident", "3", start, end)
    # A version first seen in the end snapshot counts from zero.
    assert select_version("ident", "", {}, end) == "2"
