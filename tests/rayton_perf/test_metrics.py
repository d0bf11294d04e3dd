"""--collect-metrics: Prometheus parsing, merging and the background scraper (no server)."""

from __future__ import annotations

import asyncio

import pytest

from rayton_perf.config import PerfError
from rayton_perf.metrics import GpuMetrics, MetricsCollector, merge_metrics, parse_metrics

SCRAPE = """\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-a"} 0.25
nv_gpu_utilization{gpu_uuid="GPU-b"} 0.5
nv_gpu_power_usage{gpu_uuid="GPU-a"} 71.5
nv_gpu_memory_used_bytes{gpu_uuid="GPU-a"} 1048576
nv_gpu_memory_total_bytes{gpu_uuid="GPU-a"} 85899345920
nv_gpu_utilization 0.9
nv_cpu_utilization 0.3
nv_inference_count{model="m",version="1"} 12
"""


def test_parse_metrics_reads_gpu_families_by_uuid():
    metrics = parse_metrics(SCRAPE)
    assert metrics.utilization == {"GPU-a": 0.25, "GPU-b": 0.5}  # unlabelled sample skipped
    assert metrics.power_w == {"GPU-a": 71.5}
    assert metrics.memory_used_bytes == {"GPU-a": 1048576}
    assert metrics.memory_total_bytes == {"GPU-a": 85899345920}
    assert isinstance(metrics.memory_total_bytes["GPU-a"], int)
    assert metrics.missing() == []
    assert parse_metrics("nv_cpu_utilization 0.3\n").missing() == [
        "nv_gpu_utilization",
        "nv_gpu_power_usage",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_memory_total_bytes",
    ]


def test_merge_metrics_like_perf_analyzer():
    first = GpuMetrics({"g": 0.2}, {"g": 50.0}, {"g": 100}, {"g": 1000})
    second = GpuMetrics({"g": 0.6}, {"g": 70.0}, {"g": 300}, {"g": 2000})
    merged = merge_metrics([first, second])
    assert merged.utilization == {"g": pytest.approx(0.4)}  # mean
    assert merged.power_w == {"g": 60.0}  # mean
    assert merged.memory_used_bytes == {"g": 300}  # peak
    assert merged.memory_total_bytes == {"g": 1000}  # first
    assert merge_metrics([]) == GpuMetrics()


async def test_collector_scrapes_until_stopped_and_warns_once():
    urls: list[str] = []

    async def fetch(url: str) -> str:
        urls.append(url)
        return 'nv_gpu_utilization{gpu_uuid="g"} 0.5\n'

    collector = MetricsCollector("http://h:8002/metrics", interval_ms=10, fetch=fetch)
    collector.start()
    await asyncio.sleep(0.1)
    samples = collector.take()
    assert len(samples) >= 3
    assert all(s.utilization == {"g": 0.5} for s in samples)
    assert collector.warnings() == [
        "WARNING: Unable to parse 'nv_gpu_power_usage' metric.",
        "WARNING: Unable to parse 'nv_gpu_memory_used_bytes' metric.",
        "WARNING: Unable to parse 'nv_gpu_memory_total_bytes' metric.",
    ]
    assert collector.warnings() == []  # once per run
    await collector.stop()
    count = len(urls)
    await asyncio.sleep(0.05)
    assert len(urls) == count  # stopped
    assert set(urls) == {"http://h:8002/metrics"}


async def test_collector_failure_ends_the_run():
    async def fetch(url: str) -> str:
        raise ConnectionError("refused")

    collector = MetricsCollector("http://h:8002/metrics", interval_ms=10, fetch=fetch)
    collector.start()
    await asyncio.sleep(0.05)
    with pytest.raises(PerfError, match="failed to get metrics from http://h:8002/metrics: "):
        collector.take()
    await collector.stop()
