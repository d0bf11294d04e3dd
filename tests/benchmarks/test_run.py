"""The benchmark report: every level and system in the table, n/a where a system does not
serve a model, the raw ONNX Runtime comparisons (fed with stand-in results; the real run is
``make bench``)."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.run import (
    GRPC_LEVELS,
    LEVELS,
    STREAM_LEVELS,
    SystemResults,
    render,
)


def result(throughput: float) -> SimpleNamespace:
    return SimpleNamespace(
        throughput=throughput,
        latencies=SimpleNamespace(p50_us=5000.0),
        batch_size_distribution={1: 3, 8: 2},
    )


def test_report_has_every_level_with_ratios_and_gaps():
    systems = {name: SystemResults(name) for name in ("rayton", "triton", "handwritten")}
    systems["rayton-grpc"] = SystemResults("rayton-grpc")
    systems["triton-grpc"] = SystemResults("triton-grpc")
    systems["rayton-stream"] = SystemResults("rayton-stream")
    systems["triton-stream"] = SystemResults("triton-stream")
    for level in LEVELS:
        systems["rayton"].levels[level] = [result(100.0)]
        systems["triton"].levels[level] = [result(50.0)]
        systems["handwritten"].levels[level] = [result(200.0)]
        if level in GRPC_LEVELS:
            systems["rayton-grpc"].levels[level] = [result(90.0)]
            systems["triton-grpc"].levels[level] = [result(45.0)]
        if level in STREAM_LEVELS:
            systems["rayton-stream"].levels[level] = [result(120.0)]
            systems["triton-stream"].levels[level] = [result(60.0)]
    raw = {
        "mlp": {1: {"rows_per_s": 400.0, "p50_us": 1.0}},
        "convnet": {8: {"rows_per_s": 200.0, "p50_us": 1.0}},
    }
    report = render(systems, raw, 1, "python -m benchmarks.run", 60.0)
    # the server's CPU per request (benchmarks/headline.md) leads, the throughput table follows
    assert report.startswith("# Benchmarks\n\n## Server CPU per request")
    table = report.split("## Throughput")[1].split("Raw ONNX Runtime")[0]
    rows = {
        line.split(" | ")[0].strip("| "): line
        for line in table.splitlines()
        if line.startswith("| ")
    }
    for level in LEVELS:
        assert level.label in rows, level
    assert rows["mlp b=1 c=16"].split(" | ")[1:] == [
        "100",
        "90",
        "50",
        "45",
        "200",
        "2.00",
        "2.00",
        "0.50",
        "0.90",
        "5.00 / 5.00 / 5.00 |",
    ]
    pipeline = rows["pipeline b=1 c=8"].split(" | ")
    assert pipeline[2] == "n/a" and pipeline[5] == "200"  # no gRPC run; the hand-written app
    assert "`convnet c=8` on rayton: HTTP 100 rows/s = 50% of raw ONNX Runtime at batch 8" in report
    assert "of raw ONNX Runtime's best single-thread batch throughput (400 rows/s)" in report
    assert (
        "`mlp b=1 c=16` on gRPC streams (`rayton perf --streaming`, one stream per client): "
        "rayton 120 infer/s (unary gRPC 90), triton 60 infer/s (unary gRPC 45)." in report
    )
