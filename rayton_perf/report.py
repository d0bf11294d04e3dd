"""perf_analyzer-style output: settings banner, per-level Client/Server blocks, summary
lines, the ``-f`` CSV file and a latency-vs-throughput PNG plot."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rayton_perf.config import CONSTANT, COUNT_WINDOWS, GRPC, PerfConfig, PerfError
from rayton_perf.load import intervals_rate
from rayton_perf.measure import STABILITY_WINDOWS
from rayton_perf.metrics import GpuMetrics
from rayton_perf.result import (
    CONCURRENCY,
    CsvOptions,
    LevelResult,
    csv_header,
    format_number,
    sort_for_csv,
)

# perf_analyzer prints per-GPU metrics only up to this many GPUs.
_MAX_GPUS_IN_REPORT = 16


def format_settings(config: PerfConfig, mode: str, levels: Sequence[float]) -> str:
    """The ``*** Measurement Settings ***`` banner printed before the first level."""
    lines = ["*** Measurement Settings ***", f"  Batch size: {config.batch_size}"]
    lines.append("  Service Kind: TRITON")
    if config.warmup_request_count:
        plural = "s" if config.warmup_request_count > 1 else ""
        lines.append(f"  Sending {config.warmup_request_count} warmup request{plural}")
    if config.request_count:
        lines.append(f"  Sending {config.request_count} benchmark requests")
    else:
        window_mode = config.measurement_mode
        lines.append(f'  Using "{window_mode}" mode for stabilization')
        metric = "latency" if mode == CONCURRENCY else "latency and throughput"
        if config.percentile is None:
            lines.append(f"  Stabilizing using average {metric}")
        else:
            lines.append(f"  Stabilizing using p{config.percentile} {metric}")
        if window_mode == COUNT_WINDOWS:
            lines.append(
                f"  Minimum number of samples in each window: {config.measurement_request_count}"
            )
        else:
            lines.append(f"  Measurement window: {config.measurement_interval_ms} msec")
    if config.warmup_s:
        lines.append(f"  Warm-up: {format_number(config.warmup_s)} s per level")
    if config.latency_threshold_ms:
        lines.append(f"  Latency limit: {config.latency_threshold_ms} msec")
    lines += _load_lines(config, mode, levels)
    if config.binary_search:
        lines.append("  Using Binary Search algorithm")
    kind = "synchronous" if config.synchronous else "asynchronous"
    lines.append(f"  Using {kind} calls for inference")
    return "\n".join(lines) + "\n"


def _load_lines(config: PerfConfig, mode: str, levels: Sequence[float]) -> list[str]:
    """The banner's lines on the load: its limit and how requests are spaced."""
    if mode == CONCURRENCY:
        return [f"  Concurrency limit: {format_number(max(levels))} concurrent requests"]
    if config.request_intervals_ns:
        rate = intervals_rate(config.request_intervals_ns)
        return [
            f"  Using {len(config.request_intervals_ns)} custom request intervals "
            f"({format_number(rate)} requests per second)"
        ]
    kind = "uniform" if config.request_distribution == CONSTANT else "poisson"
    return [
        f"  Request Rate limit: {format_number(max(levels))} requests per seconds",
        f"  Using {kind} distribution on request generation",
    ]


def format_level_header(mode: str, level: float) -> str:
    """The line perf_analyzer prints when a level starts."""
    if mode == CONCURRENCY:
        return f"Request concurrency: {format_number(level)}"
    return f"Request Rate: {format_number(level)} inference requests per second"


def format_level(result: LevelResult, protocol: str, percentile: int | None = None) -> str:
    """Client and Server blocks for one level, as perf_analyzer prints them."""
    lat = result.latencies
    lines = ["  Client: ", f"    Request count: {result.request_count}"]
    if result.delayed_count and result.request_count:
        pct = 100.0 * result.delayed_count / result.request_count
        if pct > 1.0:
            lines.append(f"    Avg send request rate: {result.send_rate:.2f} infer/sec")
            lines.append(
                "    [WARNING] Perf Analyzer was not able to keep up with the desired request "
                f"rate. {pct:.2f}% of the requests were delayed. "
            )
    lines.append(f"    Throughput: {format_number(result.throughput)} infer/sec")
    if percentile is None:
        lines.append(f"    Avg latency: {lat.avg_us} usec (standard deviation {lat.std_us} usec)")
    for p, value in sorted(lat.percentiles_us.items()):
        lines.append(f"    p{p} latency: {value} usec")
    codec = result.client_send_us + result.client_recv_us
    wait = max(0, lat.avg_us - codec)
    if protocol == GRPC:
        lines.append(
            f"    Avg gRPC time: {lat.avg_us} usec ((un)marshal request/response {codec} usec "
            f"+ response wait {wait} usec)"
        )
    else:
        lines.append(
            f"    Avg HTTP time: {lat.avg_us} usec (send/recv {codec} usec + response wait "
            f"{wait} usec)"
        )
    if result.error_count:
        lines.append(f"    Failed requests: {result.error_count}")
    server = result.server
    if server is not None:
        lines.append("  Server: ")
        if server.success_count == 0:
            lines.append("    Request count: 0")
        else:
            lines += [
                f"    Inference count: {server.inference_count}",
                f"    Execution count: {server.execution_count}",
            ]
            if result.cache_enabled:
                lines += [
                    f"    Cache hit count: {server.cache_hit_count}",
                    f"    Cache miss count: {server.cache_miss_count}",
                ]
            lines += [
                f"    Successful request count: {server.success_count}",
                f"    Avg request latency: {server.avg_request_us} usec (overhead "
                f"{server.avg_overhead_us} usec + queue {server.avg_queue_us} usec + compute "
                f"input {server.avg_compute_input_us} usec + compute infer "
                f"{server.avg_compute_infer_us} usec + compute output "
                f"{server.avg_compute_output_us} usec)",
            ]
            if result.batch_size_distribution:
                dist = " ".join(
                    f"{b}:{n}" for b, n in sorted(result.batch_size_distribution.items())
                )
                lines.append(f"    Batch size distribution (batch size:executions): {dist}")
    if result.gpu_metrics is not None:
        lines += format_gpu_metrics(result.gpu_metrics)
    if not result.stable:
        lines.append(
            f"  [WARNING] unstable: no {STABILITY_WINDOWS} consecutive windows within the "
            f"stability percentage after {result.windows} windows; reporting the last ones"
        )
    return "\n".join(lines) + "\n"


def format_gpu_metrics(metrics: GpuMetrics) -> list[str]:
    """perf_analyzer's "Server Prometheus Metrics" block (``--collect-metrics``)."""
    lines = ["  Server Prometheus Metrics: "]
    families = (
        metrics.utilization,
        metrics.power_w,
        metrics.memory_used_bytes,
        metrics.memory_total_bytes,
    )
    if any(len(values) > _MAX_GPUS_IN_REPORT for values in families):
        lines.append(
            "Too many GPUs on system to print out individual Prometheus metrics, use the CSV "
            "output feature to see metrics."
        )
        return lines
    lines.append("    Avg GPU Utilization:")
    lines += [f"      {u} : {format_number(v * 100.0)}%" for u, v in metrics.utilization.items()]
    lines.append("    Avg GPU Power Usage:")
    lines += [f"      {u} : {format_number(v)} watts" for u, v in metrics.power_w.items()]
    lines.append("    Max GPU Memory Usage:")
    lines += [f"      {u} : {v} bytes" for u, v in metrics.memory_used_bytes.items()]
    lines.append("    Total GPU Memory:")
    lines += [f"      {u} : {v} bytes" for u, v in metrics.memory_total_bytes.items()]
    return lines


def format_summary(results: Sequence[LevelResult], percentile: int | None = None) -> str:
    """The closing "Inferences/Second vs. Client ... Batch Latency" block."""
    metric = "Average Batch Latency" if percentile is None else f"p{percentile} Batch Latency"
    lines = [f"Inferences/Second vs. Client {metric}"]
    for r in results:
        label = "Concurrency" if r.mode == CONCURRENCY else "Request Rate"
        suffix = "" if r.stable else " (unstable)"
        lines.append(
            f"{label}: {format_number(r.level)}, throughput: {format_number(r.throughput)} "
            f"infer/sec, latency {r.stabilizing_latency_us} usec{suffix}"
        )
    return "\n".join(lines) + "\n"


def write_csv(
    path: str | Path,
    results: Sequence[LevelResult],
    mode: str,
    options: CsvOptions | None = None,
) -> None:
    """Write perf_analyzer's CSV: header, then one row per level sorted by throughput.

    ``options`` adds the ``--verbose-csv`` columns.
    """
    include_server = bool(results) and all(r.server is not None for r in results)
    cache = bool(results) and any(r.cache_enabled for r in results)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(csv_header(mode, include_server, cache, options))
        for result in sort_for_csv(list(results)):
            # Every row takes the header's shape, even if one level lost its server stats.
            row_source = replace(
                result,
                server=result.server if include_server else None,
                cache_enabled=cache,
            )
            writer.writerow(row_source.as_csv_row(options))


def write_plot(path: str | Path, results: Sequence[LevelResult], title: str = "") -> None:
    """PNG of client p50/p95/p99 latency (ms) against throughput (infer/sec)."""
    try:
        import matplotlib
    except ImportError:
        raise PerfError(
            "--plot needs matplotlib: pip install 'rayton[perf]' (or matplotlib)"
        ) from None

    matplotlib.use("Agg")  # no display; must precede pyplot's import
    import matplotlib.pyplot as plt

    ordered = sort_for_csv(list(results))
    throughput = [r.throughput for r in ordered]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    try:
        for p, style in ((50, "o-"), (95, "s-"), (99, "^-")):
            ax.plot(
                throughput,
                [r.latencies.percentiles_us.get(p, 0) / 1000 for r in ordered],
                style,
                label=f"p{p}",
            )
        for r in ordered:
            ax.annotate(
                format_number(r.level),
                (r.throughput, r.latencies.p50_us / 1000),
                textcoords="offset points",
                xytext=(4, -10),
                fontsize=7,
            )
        ax.set_xlabel("Throughput (infer/sec)")
        ax.set_ylabel("Client latency (ms)")
        ax.set_title(title or "Latency vs. throughput")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
