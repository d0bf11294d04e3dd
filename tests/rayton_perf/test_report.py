"""Report text, CSV rows and plot (no server)."""

from __future__ import annotations

import csv

from rayton_perf.config import PerfConfig
from rayton_perf.measure import LatencyStats
from rayton_perf.metrics import GpuMetrics
from rayton_perf.report import (
    format_level,
    format_level_header,
    format_settings,
    format_summary,
    write_csv,
    write_plot,
)
from rayton_perf.result import CsvOptions, LevelResult, csv_header, format_number, sort_for_csv
from rayton_perf.server_stats import ServerStats

HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)


def _result(level: int, throughput: float, stable: bool = True, server: bool = True):
    stats = None
    if server:
        stats = ServerStats(
            inference_count=200,
            execution_count=50,
            success_count=100,
            success_ns=100 * 900_000,
            queue_count=100,
            queue_ns=100 * 300_000,
            compute_input_count=100,
            compute_input_ns=100 * 10_000,
            compute_infer_count=100,
            compute_infer_ns=100 * 400_000,
            compute_output_count=100,
            compute_output_ns=100 * 20_000,
            batch_executions={2: 30, 4: 20},
        )
    return LevelResult(
        mode="concurrency",
        concurrency=level,
        batch_size=2,
        throughput=throughput,
        request_count=100,
        latencies=LatencyStats(1500, 100, {50: 1400, 90: 1800, 95: 1900, 99: 2500}),
        stabilizing_latency_us=1500,
        server=stats,
        batch_size_distribution={2: 30, 4: 20} if server else {},
        stable=stable,
        windows=3,
        client_send_us=20,
        client_recv_us=30,
    )


def test_csv_header_exact():
    assert ",".join(csv_header("concurrency")) == HEADER
    assert csv_header("request_rate")[0] == "Request Rate"
    assert "Network+Server Send/Recv" not in csv_header("concurrency", include_server=False)
    cached = csv_header("concurrency", cache_enabled=True)
    assert cached[8:10] == ["Server Cache Hit", "Server Cache Miss"]


def test_csv_row_values():
    row = _result(4, 1234.5678).as_csv_row()
    assert len(row) == len(HEADER.split(","))
    # network = avg 1500 - send 20 - recv 30 - (queue 300 + compute 430) = 720
    expected = "4,1234.57,20,720,300,10,400,20,30,1400,1800,1900,2500"
    assert row == expected.split(",")
    without_server = _result(1, 10, server=False).as_csv_row()
    assert without_server == ["1", "10", "20", "30", "1400", "1800", "1900", "2500"]


def test_format_number_like_cpp_ostream():
    assert format_number(4) == "4"
    assert format_number(100.0) == "100"
    assert format_number(2246.5333) == "2246.53"
    assert format_number(0.5) == "0.5"
    assert format_number(12345678.0) == "1.23457e+07"


def test_rows_sorted_by_throughput(tmp_path):
    results = [_result(1, 300.0), _result(2, 100.0), _result(3, 200.0)]
    assert [r.concurrency for r in sort_for_csv(results)] == [2, 3, 1]
    path = tmp_path / "out.csv"
    write_csv(path, results, "concurrency")
    lines = path.read_text().splitlines()
    assert lines[0] == HEADER
    assert [line.split(",")[0] for line in lines[1:]] == ["2", "3", "1"]
    for row in csv.reader(lines[1:]):
        assert all(float(cell) >= 0 for cell in row)


def test_csv_without_server_stats_drops_server_columns(tmp_path):
    path = tmp_path / "out.csv"
    write_csv(path, [_result(1, 10, server=False), _result(2, 20)], "concurrency")
    header, *rows = path.read_text().splitlines()
    assert header.split(",") == csv_header("concurrency", include_server=False)
    assert all(len(r.split(",")) == len(header.split(",")) for r in rows)


def test_level_report_blocks():
    text = format_level(_result(2, 1000.0), "http")
    assert "  Client: \n    Request count: 100\n    Throughput: 1000 infer/sec" in text
    assert "Avg latency: 1500 usec (standard deviation 100 usec)" in text
    assert "p95 latency: 1900 usec" in text
    assert "Avg HTTP time: 1500 usec (send/recv 50 usec + response wait 1450 usec)" in text
    assert "  Server: \n    Inference count: 200\n    Execution count: 50" in text
    assert "Successful request count: 100" in text
    assert (
        "Avg request latency: 900 usec (overhead 170 usec + queue 300 usec + compute input "
        "10 usec + compute infer 400 usec + compute output 20 usec)"
    ) in text
    assert "Batch size distribution (batch size:executions): 2:30 4:20" in text
    assert "unstable" not in text
    grpc = format_level(_result(2, 1000.0, stable=False), "grpc", percentile=95)
    assert "Avg gRPC time" in grpc and "Avg latency" not in grpc
    assert "unstable" in grpc


def test_summary_and_headers():
    summary = format_summary([_result(1, 10.5), _result(2, 20, stable=False)])
    assert summary.splitlines() == [
        "Inferences/Second vs. Client Average Batch Latency",
        "Concurrency: 1, throughput: 10.5 infer/sec, latency 1500 usec",
        "Concurrency: 2, throughput: 20 infer/sec, latency 1500 usec (unstable)",
    ]
    assert format_summary([], 95).startswith("Inferences/Second vs. Client p95 Batch Latency")
    assert format_level_header("concurrency", 4) == "Request concurrency: 4"
    assert format_level_header("request_rate", 100.0) == (
        "Request Rate: 100 inference requests per second"
    )
    settings = format_settings(PerfConfig("m", batch_size=2), "concurrency", [1, 4])
    assert settings.startswith("*** Measurement Settings ***\n  Batch size: 2\n")
    assert "Concurrency limit: 4 concurrent requests" in settings


def test_plot_writes_png(tmp_path):
    path = tmp_path / "plot.png"
    write_plot(path, [_result(1, 100.0), _result(2, 180.0)], title="ident")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_as_dict_is_plain_data():
    data = _result(2, 1000.0).as_dict()
    assert data["level"] == 2 and data["stable"] is True
    assert data["server"]["avg_queue_us"] == 300
    assert data["batch_size_distribution"] == {2: 30, 4: 20}


def test_verbose_csv_columns(tmp_path):
    verbose = CsvOptions(verbose=True)
    header = csv_header("concurrency", options=verbose)
    assert header[-3:] == ["Avg latency", "request/response", "response wait"]
    # avg 1500, send 20 + recv 30 = 50, response wait 1450
    assert _result(1, 10).as_csv_row(verbose)[-3:] == ["1500", "50", "1450"]
    with_percentile = CsvOptions(verbose=True, percentile=95)
    assert "Avg latency" not in csv_header("concurrency", options=with_percentile)
    assert _result(1, 10).as_csv_row(with_percentile)[-2:] == ["50", "1450"]
    assert csv_header("concurrency", options=CsvOptions()) == csv_header("concurrency")
    path = tmp_path / "verbose.csv"
    write_csv(path, [_result(1, 10), _result(2, 20)], "concurrency", verbose)
    lines = path.read_text().splitlines()
    assert lines[0] == HEADER + ",Avg latency,request/response,response wait"
    assert all(len(line.split(",")) == len(lines[0].split(",")) for line in lines)


def test_verbose_csv_gpu_metric_cells():
    options = CsvOptions(verbose=True, metrics=True)
    header = csv_header("concurrency", options=options)
    assert header[-4:] == [
        "Avg GPU Utilization",
        "Avg GPU Power Usage",
        "Max GPU Memory Usage",
        "Total GPU Memory",
    ]
    result = _result(1, 10)
    result.gpu_metrics = GpuMetrics(
        {"GPU-b": 0.5, "GPU-a": 0.25}, {"GPU-a": 70.5}, {"GPU-a": 123456789}, {"GPU-a": 8 << 30}
    )
    assert result.as_csv_row(options)[-4:] == [
        "GPU-a:0.25;GPU-b:0.5;",
        "GPU-a:70.5;",
        "GPU-a:123456789;",
        f"GPU-a:{8 << 30};",
    ]
    assert _result(1, 10).as_csv_row(options)[-4:] == ["", "", "", ""]  # no GPUs scraped


def test_gpu_metrics_block():
    result = _result(1, 10)
    result.gpu_metrics = GpuMetrics(
        {"GPU-a": 0.25}, {"GPU-a": 70.5}, {"GPU-a": 100}, {"GPU-a": 800}
    )
    text = format_level(result, "http")
    assert (
        "  Server Prometheus Metrics: \n    Avg GPU Utilization:\n      GPU-a : 25%\n"
        "    Avg GPU Power Usage:\n      GPU-a : 70.5 watts\n    Max GPU Memory Usage:\n"
        "      GPU-a : 100 bytes\n    Total GPU Memory:\n      GPU-a : 800 bytes\n"
    ) in text
    assert "Prometheus" not in format_level(_result(1, 10), "http")
    many = _result(1, 10)
    many.gpu_metrics = GpuMetrics({f"GPU-{i}": 0.1 for i in range(17)})
    assert "Too many GPUs on system" in format_level(many, "http")


def test_settings_banner_for_new_options():
    config = PerfConfig(
        "m",
        warmup_s=0,
        warmup_request_count=1,
        latency_threshold_ms=40,
        binary_search=True,
        synchronous=True,
    )
    settings = format_settings(config, "concurrency", [1, 8])
    assert "  Sending 1 warmup request\n" in settings
    assert "  Latency limit: 40 msec\n" in settings
    assert "  Using Binary Search algorithm\n" in settings
    assert "  Using synchronous calls for inference\n" in settings
    assert "Warm-up:" not in settings
    assert "asynchronous" in format_settings(PerfConfig("m"), "concurrency", [1])
    custom = PerfConfig("m", request_intervals_ns=[1_000_000, 3_000_000])
    settings = format_settings(custom, "request_rate", [500.0])
    assert "  Using 2 custom request intervals (500 requests per second)\n" in settings
    assert "distribution" not in settings
