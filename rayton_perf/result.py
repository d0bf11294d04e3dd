"""The outcome of one load level and its CSV form (perf_analyzer's ``-f`` columns).

CSV columns, all times in whole µs as perf_analyzer writes them:

* ``Client Send`` / ``Client Recv``: tritonclient's ``infer()`` builds, sends, waits and
  parses in one call, so these cannot be timed per request. They hold the client's mean
  cost to serialise one request and to parse one response of this model, timed offline on
  the real payload (:func:`rayton_perf.client.estimate_send_ns`); socket time is not in
  them.
* ``Network+Server Send/Recv``: mean client latency - Client Send - Client Recv - server
  queue - server compute (input+infer+output), floored at 0, exactly perf_analyzer's
  formula. It therefore also holds client-side event-loop time and HTTP/gRPC framing.
* ``Server *``: per-request means from the statistics deltas over the merged windows.
* The server columns are left out when the server does not list the ``statistics``
  extension, and cache columns are added when the model's response cache is on, as in
  perf_analyzer.
* ``--verbose-csv`` appends perf_analyzer's extra columns: ``Avg latency`` (unless
  ``--percentile``), ``request/response`` (Client Send + Client Recv), ``response wait``
  (mean latency minus both) and, with ``--collect-metrics``, the four GPU columns written
  ``uuid:value;`` per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rayton_perf.measure import LatencyStats
from rayton_perf.metrics import GpuMetrics
from rayton_perf.server_stats import ServerStats

CONCURRENCY = "concurrency"
REQUEST_RATE = "request_rate"

_SERVER_COLUMNS = [
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
]
_CACHE_COLUMNS = ["Server Cache Hit", "Server Cache Miss"]
_LATENCY_COLUMNS = ["p50 latency", "p90 latency", "p95 latency", "p99 latency"]
_METRIC_COLUMNS = [
    "Avg GPU Utilization",
    "Avg GPU Power Usage",
    "Max GPU Memory Usage",
    "Total GPU Memory",
]


@dataclass
class CsvOptions:
    """``--verbose-csv`` columns: which extras perf_analyzer would write.

    Attributes:
        verbose: ``--verbose-csv`` was given.
        percentile: ``--percentile`` (no ``Avg latency`` column when set).
        metrics: ``--collect-metrics`` was given (GPU columns).
    """

    verbose: bool = False
    percentile: int | None = None
    metrics: bool = False


def csv_header(
    mode: str,
    include_server: bool = True,
    cache_enabled: bool = False,
    options: CsvOptions | None = None,
) -> list[str]:
    """perf_analyzer's CSV header for a run in ``mode``."""
    header = ["Concurrency" if mode == CONCURRENCY else "Request Rate"]
    header += ["Inferences/Second", "Client Send"]
    if include_server:
        header += _SERVER_COLUMNS
        if cache_enabled:
            header += _CACHE_COLUMNS
    header += ["Client Recv", *_LATENCY_COLUMNS]
    if options is not None and options.verbose:
        if options.percentile is None:
            header.append("Avg latency")
        header += ["request/response", "response wait"]
        if options.metrics:
            header += _METRIC_COLUMNS
    return header


def format_number(value: float) -> str:
    """A number the way C++ ``ostream <<`` prints a double (6 significant digits)."""
    return f"{value:.6g}"


@dataclass
class LevelResult:
    """Measured performance of one concurrency or request-rate level.

    Attributes:
        mode: ``concurrency`` or ``request_rate``.
        concurrency: requests kept in flight (concurrency mode).
        request_rate: requests per second asked for (request-rate mode).
        batch_size: rows per request.
        throughput: client-side inferences (rows) per second.
        request_count: successful requests in the reported windows.
        duration_s: wall time of the reported windows.
        latencies: client-side latency summary in µs.
        stabilizing_latency_us: the latency stability was judged on (mean or percentile).
        server: server-side counter deltas over the reported windows (None if not collected).
        batch_size_distribution: executions per batch size during the reported windows.
        stable: the last three windows agreed within the stability percentage.
        windows: measurement windows run at this level.
        error_count: failed requests seen in the measured windows.
        delayed_count: request-rate mode: requests sent later than scheduled.
        send_rate: requests started per second.
        client_send_us: estimated client time to serialise one request.
        client_recv_us: estimated client time to parse one response.
        cache_enabled: the model has its response cache on (adds CSV columns).
        warnings: notes about the measurement (e.g. latency not stabilising).
        gpu_metrics: ``--collect-metrics`` values merged over the reported windows.
    """

    mode: str
    concurrency: int | None = None
    request_rate: float | None = None
    batch_size: int = 1
    throughput: float = 0.0
    request_count: int = 0
    duration_s: float = 0.0
    latencies: LatencyStats = field(default_factory=LatencyStats)
    stabilizing_latency_us: int = 0
    server: ServerStats | None = None
    batch_size_distribution: dict[int, int] = field(default_factory=dict)
    stable: bool = False
    windows: int = 0
    error_count: int = 0
    delayed_count: int = 0
    send_rate: float = 0.0
    client_send_us: int = 0
    client_recv_us: int = 0
    cache_enabled: bool = False
    warnings: list[str] = field(default_factory=list)
    gpu_metrics: GpuMetrics | None = None

    @property
    def level(self) -> float:
        """The load level: concurrency or request rate."""
        return self.concurrency if self.mode == CONCURRENCY else self.request_rate

    @property
    def network_us(self) -> int:
        """perf_analyzer's "Network+Server Send/Recv" (client wait not accounted by server)."""
        wait = self.latencies.avg_us - self.client_send_us - self.client_recv_us
        if self.server is None:
            return max(0, wait)
        accounted = (
            self.server.avg_queue_us
            + self.server.avg_compute_us
            + self.server.avg_cache_hit_us
            + self.server.avg_cache_miss_us
        )
        return max(0, wait - accounted)

    @property
    def response_wait_us(self) -> int:
        """perf_analyzer's "response wait": mean latency less the client's own send/recv."""
        return max(0, self.latencies.avg_us - self.client_send_us - self.client_recv_us)

    def csv_header(self, options: CsvOptions | None = None) -> list[str]:
        """The header matching :meth:`as_csv_row`."""
        return csv_header(self.mode, self.server is not None, self.cache_enabled, options)

    def as_csv_row(self, options: CsvOptions | None = None) -> list[str]:
        """This level as a row of perf_analyzer's CSV (see :func:`csv_header`)."""
        row = [format_number(self.level), format_number(self.throughput)]
        row.append(str(self.client_send_us))
        if self.server is not None:
            row += [
                str(self.network_us),
                str(self.server.avg_queue_us),
                str(self.server.avg_compute_input_us),
                str(self.server.avg_compute_infer_us),
                str(self.server.avg_compute_output_us),
            ]
            if self.cache_enabled:
                row += [str(self.server.avg_cache_hit_us), str(self.server.avg_cache_miss_us)]
        row.append(str(self.client_recv_us))
        row += [
            str(self.latencies.p50_us),
            str(self.latencies.p90_us),
            str(self.latencies.p95_us),
            str(self.latencies.p99_us),
        ]
        if options is not None and options.verbose:
            row += self._verbose_cells(options)
        return row

    def _verbose_cells(self, options: CsvOptions) -> list[str]:
        cells = [] if options.percentile is not None else [str(self.latencies.avg_us)]
        cells += [str(self.client_send_us + self.client_recv_us), str(self.response_wait_us)]
        if options.metrics:
            gpu = self.gpu_metrics or GpuMetrics()
            cells += [
                _per_gpu(gpu.utilization),
                _per_gpu(gpu.power_w),
                _per_gpu(gpu.memory_used_bytes),
                _per_gpu(gpu.memory_total_bytes),
            ]
        return cells

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (for benchmark harnesses)."""
        server = None
        if self.server is not None:
            server = {
                "inference_count": self.server.inference_count,
                "execution_count": self.server.execution_count,
                "success_count": self.server.success_count,
                "avg_request_us": self.server.avg_request_us,
                "avg_queue_us": self.server.avg_queue_us,
                "avg_compute_input_us": self.server.avg_compute_input_us,
                "avg_compute_infer_us": self.server.avg_compute_infer_us,
                "avg_compute_output_us": self.server.avg_compute_output_us,
            }
        return {
            "mode": self.mode,
            "level": self.level,
            "batch_size": self.batch_size,
            "throughput": self.throughput,
            "request_count": self.request_count,
            "duration_s": self.duration_s,
            "avg_latency_us": self.latencies.avg_us,
            "std_latency_us": self.latencies.std_us,
            "percentiles_us": dict(self.latencies.percentiles_us),
            "stable": self.stable,
            "windows": self.windows,
            "error_count": self.error_count,
            "delayed_count": self.delayed_count,
            "server": server,
            "batch_size_distribution": dict(self.batch_size_distribution),
        }


def _per_gpu(values: dict[str, float] | dict[str, int]) -> str:
    """perf_analyzer's GPU cell: ``uuid:value;`` for every GPU."""
    return "".join(f"{uuid}:{_metric_text(value)};" for uuid, value in sorted(values.items()))


def _metric_text(value: float) -> str:
    # Memory is a uint64 in perf_analyzer, written in full; fractions as ostream prints them.
    return str(value) if isinstance(value, int) else format_number(value)


def sort_for_csv(results: list[LevelResult]) -> list[LevelResult]:
    """Rows in increasing throughput, as perf_analyzer writes them (stable for ties)."""
    return sorted(results, key=lambda r: r.throughput)
