"""Measurement windows: client-side statistics, stability, and merging, as perf_analyzer.

* A window counts the requests that *completed* inside it; windows are back to back.
* Throughput = completed requests * batch size / window length (inferences per second).
* Percentiles use perf_analyzer's index ``int(p/100 * (n-1) + 0.5)`` on sorted latencies.
* A level is stable once the last three windows agree within ``s`` percent on throughput
  and on the stabilising latency (the mean, or ``--percentile``): ``max/min <= 1 + s/100``.
  A window with no completed request is never stable.
* The reported result merges the last three windows (latencies pooled, counts summed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from rayton_perf.metrics import GpuMetrics
from rayton_perf.server_stats import ServerStats

STABILITY_WINDOWS = 3  # perf_analyzer's load_parameters_.stability_window
REPORTED_PERCENTILES = (50, 90, 95, 99)


def percentile_index(p: float, n: int) -> int:
    """Index of the ``p``-th percentile in a sorted list of ``n`` samples (perf_analyzer)."""
    if n <= 0:
        raise ValueError("no samples")
    return int((p / 100.0) * (n - 1) + 0.5)


def percentile(sorted_values: Sequence[int], p: float) -> int:
    """The ``p``-th percentile of already sorted values."""
    return sorted_values[percentile_index(p, len(sorted_values))]


@dataclass
class Window:
    """One measurement window (or several merged).

    Attributes:
        duration_ns: wall time covered.
        latencies_ns: latencies of requests that completed in it, sorted.
        batch_size: rows per request.
        error_count: requests that failed in it.
        delayed_count: request-rate mode: requests sent later than scheduled.
        sent_count: requests started in it.
        server: server-side counter deltas, or None when not collected.
        metrics: ``--collect-metrics`` scrapes finished in it.
    """

    duration_ns: int
    latencies_ns: list[int]
    batch_size: int = 1
    error_count: int = 0
    delayed_count: int = 0
    sent_count: int = 0
    server: ServerStats | None = None
    metrics: list[GpuMetrics] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.latencies_ns = sorted(self.latencies_ns)

    @property
    def request_count(self) -> int:
        """Successful requests completed in the window."""
        return len(self.latencies_ns)

    @property
    def throughput(self) -> float:
        """Inferences (rows) per second."""
        if self.duration_ns <= 0:
            return 0.0
        return self.request_count * self.batch_size / (self.duration_ns / 1e9)

    @property
    def send_rate(self) -> float:
        """Requests started per second."""
        return self.sent_count / (self.duration_ns / 1e9) if self.duration_ns > 0 else 0.0

    @property
    def avg_latency_ns(self) -> int:
        return sum(self.latencies_ns) // len(self.latencies_ns) if self.latencies_ns else 0

    @property
    def std_latency_us(self) -> int:
        """Sample standard deviation in µs (0 with fewer than two samples)."""
        n = len(self.latencies_ns)
        if n < 2:
            return 0
        mean = sum(self.latencies_ns) / n
        variance = sum((x - mean) ** 2 for x in self.latencies_ns) / (n - 1)
        return int(math.sqrt(variance) / 1000)

    def percentile_ns(self, p: float) -> int:
        """``p``-th percentile latency; 0 when nothing completed."""
        return percentile(self.latencies_ns, p) if self.latencies_ns else 0

    def stabilizing_latency_ns(self, stability_percentile: int | None) -> int:
        """The latency stability is judged on: the mean or the chosen percentile."""
        if stability_percentile is None:
            return self.avg_latency_ns
        return self.percentile_ns(stability_percentile)


def is_stable(
    windows: Sequence[Window],
    stability_percentage: float,
    stability_percentile: int | None = None,
    check_latency: bool = True,
) -> bool:
    """Whether the last :data:`STABILITY_WINDOWS` windows agree (perf_analyzer's rule)."""
    if len(windows) < STABILITY_WINDOWS:
        return False
    last = windows[-STABILITY_WINDOWS:]
    limit = 1 + stability_percentage / 100.0
    throughputs = [w.throughput for w in last]
    if min(throughputs) <= 0:
        return False
    if max(throughputs) / min(throughputs) > limit:
        return False
    if not check_latency:
        return True
    latencies = [w.stabilizing_latency_ns(stability_percentile) for w in last]
    if min(latencies) <= 0:
        return max(latencies) <= 0
    return max(latencies) / min(latencies) <= limit


def merge(windows: Sequence[Window]) -> Window:
    """Pool windows into one: latencies concatenated, counts and durations summed."""
    if not windows:
        raise ValueError("nothing to merge")
    servers = [w.server for w in windows]
    server = None
    if all(s is not None for s in servers):
        server = ServerStats()
        for s in servers:
            server = server + s
    return Window(
        duration_ns=sum(w.duration_ns for w in windows),
        latencies_ns=[x for w in windows for x in w.latencies_ns],
        batch_size=windows[0].batch_size,
        error_count=sum(w.error_count for w in windows),
        delayed_count=sum(w.delayed_count for w in windows),
        sent_count=sum(w.sent_count for w in windows),
        server=server,
        metrics=[m for w in windows for m in w.metrics],
    )


@dataclass
class LatencyStats:
    """Client-side latency summary of a level, in µs.

    Attributes:
        avg_us: mean.
        std_us: sample standard deviation.
        percentiles_us: p50/p90/p95/p99 (and ``--percentile`` if another).
    """

    avg_us: int = 0
    std_us: int = 0
    percentiles_us: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, window: Window, extra_percentile: int | None = None) -> LatencyStats:
        """Summarise a window's latencies."""
        wanted = sorted(set(REPORTED_PERCENTILES) | ({extra_percentile} - {None}))
        return cls(
            avg_us=window.avg_latency_ns // 1000,
            std_us=window.std_latency_us,
            percentiles_us={p: window.percentile_ns(p) // 1000 for p in wanted},
        )

    @property
    def p50_us(self) -> int:
        return self.percentiles_us.get(50, 0)

    @property
    def p90_us(self) -> int:
        return self.percentiles_us.get(90, 0)

    @property
    def p95_us(self) -> int:
        return self.percentiles_us.get(95, 0)

    @property
    def p99_us(self) -> int:
        return self.percentiles_us.get(99, 0)
