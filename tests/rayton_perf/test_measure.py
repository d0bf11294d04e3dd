"""Percentiles, windows, stability and merging (perf_analyzer's rules)."""

from __future__ import annotations

import pytest

from rayton_perf.measure import (
    LatencyStats,
    Window,
    is_stable,
    merge,
    percentile,
    percentile_index,
)
from rayton_perf.server_stats import ServerStats

SECOND = 1_000_000_000


def test_percentile_index_matches_perf_analyzer():
    # index = int(p/100 * (n-1) + 0.5)
    assert percentile_index(50, 1) == 0
    assert percentile_index(50, 10) == 5  # 4.5 + 0.5
    assert percentile_index(90, 10) == 8  # 8.1 + 0.5
    assert percentile_index(99, 10) == 9
    assert percentile_index(95, 100) == 94  # 94.05 + 0.5
    assert percentile_index(99, 1000) == 989  # 989.01 + 0.5
    with pytest.raises(ValueError):
        percentile_index(50, 0)


def test_percentile_of_sorted_values():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == 51  # index 50
    assert percentile(values, 90) == 90  # index int(89.6) = 89
    assert percentile(values, 99) == 99


def test_window_statistics():
    window = Window(duration_ns=2 * SECOND, latencies_ns=[3000, 1000, 2000, 4000], batch_size=4)
    assert window.latencies_ns == [1000, 2000, 3000, 4000]  # sorted on creation
    assert window.request_count == 4
    assert window.throughput == pytest.approx(8.0)  # 4 requests * 4 rows / 2 s
    assert window.avg_latency_ns == 2500
    assert window.std_latency_us == 1  # sample std 1290.99 ns -> 1 us
    assert window.percentile_ns(50) == 3000
    assert window.stabilizing_latency_ns(None) == 2500
    assert window.stabilizing_latency_ns(99) == 4000


def test_empty_window():
    window = Window(duration_ns=SECOND, latencies_ns=[])
    assert window.throughput == 0
    assert window.avg_latency_ns == 0
    assert window.percentile_ns(99) == 0
    assert LatencyStats.of(window).p99_us == 0


def _window(throughput: float, latency_us: int) -> Window:
    count = int(throughput)
    return Window(duration_ns=SECOND, latencies_ns=[latency_us * 1000] * count)


def test_stability_needs_three_windows():
    assert not is_stable([_window(100, 10)] * 2, 10)
    assert is_stable([_window(100, 10)] * 3, 10)


def test_stability_uses_only_the_last_three_windows():
    windows = [_window(10, 100), _window(100, 10), _window(105, 10), _window(109, 11)]
    assert is_stable(windows, 10)
    assert not is_stable(windows[:3], 10)


def test_stability_threshold_on_throughput_and_latency():
    # max/min <= 1 + s/100
    assert is_stable([_window(100, 10), _window(110, 10), _window(105, 10)], 10)
    assert not is_stable([_window(100, 10), _window(111, 10), _window(105, 10)], 10)
    assert not is_stable([_window(100, 10), _window(100, 12), _window(100, 10)], 10)
    # Latency may be ignored (perf_analyzer's async fallback).
    assert is_stable([_window(100, 10), _window(100, 12), _window(100, 10)], 10, None, False)


def test_stability_on_a_percentile():
    base = [1000] * 95
    a = Window(SECOND, base + [50_000] * 5)
    b = Window(SECOND, base + [90_000] * 5)
    assert is_stable([a, a, a], 10, stability_percentile=50)
    assert is_stable([a, b, a], 10, stability_percentile=50)
    assert not is_stable([a, b, a], 10, stability_percentile=99)


def test_window_without_requests_is_never_stable():
    assert not is_stable([_window(0, 0)] * 3, 10)


def test_merge_pools_windows():
    server = ServerStats(success_count=2, queue_count=2, queue_ns=4000, batch_executions={1: 2})
    a = Window(SECOND, [1000, 3000], batch_size=2, error_count=1, sent_count=3, server=server)
    b = Window(SECOND, [2000], batch_size=2, delayed_count=1, sent_count=1, server=server)
    merged = merge([a, b])
    assert merged.duration_ns == 2 * SECOND
    assert merged.latencies_ns == [1000, 2000, 3000]
    assert merged.throughput == pytest.approx(3.0)  # 3 requests * 2 rows / 2 s
    assert merged.error_count == 1
    assert merged.delayed_count == 1
    assert merged.sent_count == 4
    assert merged.server.success_count == 4
    assert merged.server.batch_executions == {1: 4}
    assert merge([a, Window(SECOND, [1])]).server is None  # stats missing in one window


def test_latency_stats_include_extra_percentile():
    window = Window(SECOND, [i * 1000 for i in range(1, 101)])
    stats = LatencyStats.of(window, extra_percentile=75)
    assert set(stats.percentiles_us) == {50, 75, 90, 95, 99}
    assert stats.avg_us == 50  # 50.5 us truncated
    assert (stats.p50_us, stats.p90_us, stats.p95_us, stats.p99_us) == (51, 90, 95, 99)
