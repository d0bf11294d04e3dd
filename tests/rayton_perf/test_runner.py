"""The profiler and the sweep driven end to end against fake clients (no server)."""

from __future__ import annotations

import asyncio

import pytest

from rayton_perf import cli, runner
from rayton_perf.cli import main
from rayton_perf.client import wire_headers
from rayton_perf.config import PerfConfig
from rayton_perf.measure import LatencyStats
from rayton_perf.metrics import MetricsCollector
from rayton_perf.result import LevelResult
from rayton_perf.runner import Profiler
from rayton_perf.server_stats import ModelInfo, TensorMeta


class FakeClient:
    """Records the keyword arguments of every ``infer`` call."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    async def infer(self, model, inputs, version, **kwargs):
        self.calls.append(kwargs)
        await asyncio.sleep(0.001)
        return "result"


class FakeStream:
    """Records the requests sent on one stream (``--streaming``)."""

    def __init__(self) -> None:
        self.requests: list[tuple] = []

    async def infer(self, model, inputs, version="", outputs=None):
        self.requests.append((model, inputs, version))
        await asyncio.sleep(0.001)
        return "result"


class FakePool:
    """Stands in for :class:`rayton_perf.client.ClientPool`; remembers its sizing."""

    created: list[FakePool] = []

    def __init__(self, connection, max_in_flight: int, streams: int = 0):
        self.max_in_flight = max_in_flight
        self.stream_count = streams
        self.client = FakeClient()
        self.streams: dict[int, FakeStream] = {}
        FakePool.created.append(self)

    def client_for(self, worker: int) -> FakeClient:
        return self.client

    def stream_for(self, worker: int) -> FakeStream:
        return self.streams.setdefault(worker % self.stream_count, FakeStream())

    async def close(self) -> None:
        pass


class FakeConnection:
    def __init__(self, protocol: str, headers: dict[str, str]):
        self.protocol = protocol
        self.headers = wire_headers(protocol, headers)


def _profiler(monkeypatch, **changes) -> Profiler:
    settings = {
        "measurement_interval_ms": 30,
        "max_trials": 3,
        "stability_percentage": 1000.0,
        "warmup_s": 0.0,
        **changes,
    }
    config = PerfConfig("m", **settings)
    config.validate()
    profiler = Profiler(config)
    profiler.connection = FakeConnection(config.protocol, config.headers)
    profiler.model = ModelInfo("m", "", "python", 8, [TensorMeta("IN", "FP32", [4])], [])
    profiler._payloads = [["payload"]]
    FakePool.created = []
    monkeypatch.setattr(runner, "ClientPool", FakePool)
    return profiler


def _calls() -> list[dict]:
    return [call for pool in FakePool.created for call in pool.client.calls]


async def test_http_requests_carry_headers(monkeypatch):
    profiler = _profiler(monkeypatch, headers={"Authorization": "Bearer t"}, request_count=3)
    await profiler.run_level(concurrency=1)
    assert [c["headers"] for c in _calls()] == [
        {"Authorization": "Bearer t", "Accept-Encoding": "identity"}
    ] * 3
    # A user's own Accept-Encoding replaces the default, in any case.
    profiler = _profiler(monkeypatch, headers={"accept-encoding": "gzip"}, request_count=1)
    await profiler.run_level(concurrency=1)
    assert _calls()[0]["headers"] == {"accept-encoding": "gzip"}


async def test_grpc_requests_carry_headers_as_metadata(monkeypatch):
    profiler = _profiler(
        monkeypatch, protocol="grpc", headers={"X-Trace": "1"}, request_count=2, request_timeout_s=3
    )
    await profiler.run_level(concurrency=2)
    assert [(c["headers"], c["client_timeout"]) for c in _calls()] == [({"x-trace": "1"}, 3)] * 2
    profiler = _profiler(monkeypatch, protocol="grpc", request_count=1)
    await profiler.run_level(concurrency=1)
    assert _calls()[0]["headers"] is None


async def test_streaming_sends_on_a_stream_per_worker_and_no_unary_calls(monkeypatch):
    profiler = _profiler(monkeypatch, protocol="grpc", streaming=True, request_count=12)
    await profiler.run_level(concurrency=3)
    (pool,) = FakePool.created
    assert pool.stream_count == 3 and sorted(pool.streams) == [0, 1, 2]
    assert sum(len(stream.requests) for stream in pool.streams.values()) == 12
    assert pool.client.calls == []
    # request-rate mode: perf_analyzer's worker threads, each with its stream
    profiler = _profiler(
        monkeypatch, protocol="grpc", streaming=True, request_count=4, max_threads=2
    )
    await profiler.run_level(request_rate=500)
    (pool,) = FakePool.created
    assert pool.stream_count == 2


async def test_warmup_request_count_sends_exactly_that_many_first(monkeypatch):
    profiler = _profiler(monkeypatch, warmup_request_count=4, request_count=5)
    result = await profiler.run_level(concurrency=2)
    assert len(_calls()) == 9
    assert result.request_count == 5  # the warm-up requests are not measured
    # Time windows after a counted warm-up.
    profiler = _profiler(monkeypatch, warmup_request_count=3)
    result = await profiler.run_level(concurrency=1)
    assert result.windows >= 1
    assert len(_calls()) >= 3 + result.request_count


async def test_synchronous_rate_mode_bounds_requests_in_flight(monkeypatch):
    profiler = _profiler(monkeypatch, synchronous=True, max_threads=2, request_count=4)
    await profiler.run_level(request_rate=500.0)
    assert FakePool.created[-1].max_in_flight == 2
    assert profiler._new_load(FakePool(None, 2), None, 500.0, 0).max_outstanding == 2
    free = _profiler(monkeypatch, max_threads=2)
    assert free._new_load(FakePool(None, 1), None, 500.0, 0).max_outstanding == 1024


async def test_custom_intervals_drive_the_rate_load(monkeypatch):
    profiler = _profiler(monkeypatch, request_intervals_ns=[1_000_000, 2_000_000])
    load = profiler._new_load(FakePool(None, 1), None, 666.0, 0)
    assert [load.interval_ns() for _ in range(3)] == [1_000_000, 2_000_000, 1_000_000]


async def test_collect_metrics_fills_the_result(monkeypatch):
    async def fetch(url: str) -> str:
        return 'nv_gpu_utilization{gpu_uuid="g"} 0.5\nnv_gpu_memory_used_bytes{gpu_uuid="g"} 7\n'

    profiler = _profiler(monkeypatch, collect_metrics=True)
    profiler.metrics = MetricsCollector("http://h:8002/metrics", 5, fetch=fetch)
    result = await profiler.run_level(concurrency=1)
    assert result.gpu_metrics is not None
    assert result.gpu_metrics.utilization == {"g": 0.5}
    assert result.gpu_metrics.memory_used_bytes == {"g": 7}
    assert "WARNING: Unable to parse 'nv_gpu_power_usage' metric." in result.warnings
    plain = _profiler(monkeypatch)
    assert (await plain.run_level(concurrency=1)).gpu_metrics is None


# ---------------------------------------------------------------------------------------------
# The command line's sweep: -l, --binary-search, --verbose-csv (fake profiler)


class FakeProfiler:
    """Answers every level with a latency of ``level`` ms; records the levels asked for."""

    levels: list[int] = []

    def __init__(self, config, progress=None, on_window=None):
        self.collect_stats = True

    async def __aenter__(self) -> FakeProfiler:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        pass

    async def run_level(self, concurrency=None, request_rate=None) -> LevelResult:
        FakeProfiler.levels.append(concurrency)
        latency = concurrency * 1000
        return LevelResult(
            mode="concurrency",
            concurrency=concurrency,
            throughput=100.0 * concurrency,
            request_count=10,
            latencies=LatencyStats(latency, 0, {p: latency for p in (50, 90, 95, 99)}),
            stabilizing_latency_us=latency,
            stable=True,
            windows=3,
        )


@pytest.fixture
def fake_profiler(monkeypatch):
    FakeProfiler.levels = []
    monkeypatch.setattr(cli, "Profiler", FakeProfiler)
    return FakeProfiler


def test_latency_threshold_ends_the_sweep(fake_profiler, capsys, tmp_path):
    path = tmp_path / "out.csv"
    argv = ["-m", "x", "--concurrency-range", "1:8", "-l", "5", "-f", str(path), "--verbose-csv"]
    assert main([*argv, "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert fake_profiler.levels == [1, 2, 3, 4, 5]
    assert "Request concurrency: 5" in out
    assert "Measured latency went over the set limit of 5 msec." in err
    summary = out[out.index("Inferences/Second vs. Client") :]
    assert "Concurrency: 4," in summary and "Concurrency: 5," not in summary
    header, *rows = path.read_text().splitlines()
    assert header.endswith(",Avg latency,request/response,response wait")
    assert [row.split(",")[0] for row in rows] == ["1", "2", "3", "4"]


def test_binary_search_over_the_range(fake_profiler, capsys):
    argv = ["-m", "x", "--concurrency-range", "1:16", "-l", "6", "--binary-search"]
    assert main([*argv, "--no-progress"]) == 0
    out, _ = capsys.readouterr()
    assert fake_profiler.levels == [1, 16, 8, 4, 6, 5]
    assert "Using Binary Search algorithm" in out
    summary = out[out.index("Inferences/Second vs. Client") :].splitlines()[1:]
    assert [line.split(",")[0] for line in summary if line] == [
        "Concurrency: 1",
        "Concurrency: 4",
        "Concurrency: 5",
    ]


def test_without_threshold_every_level_runs(fake_profiler, capsys):
    assert main(["-m", "x", "--concurrency-range", "1:3", "--no-progress"]) == 0
    assert fake_profiler.levels == [1, 2, 3]
    assert "went over" not in capsys.readouterr().err
