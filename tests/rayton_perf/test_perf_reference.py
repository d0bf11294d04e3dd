"""``rayton perf`` end to end against the real tritonserver 2.51 (reference harness).

One server per module serves the tiny Python-backend repository of
:mod:`tests.support.perf_triton` (``ident``, ``ident_nobatch``, ``broken``).

Windows are short (``-p 300..500``, ``--warmup 0.2``) and trials few, so each test stays
well under 20 s on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
from pathlib import Path

import pytest

from benchmarks.cuda_shm_check import cuda_device_present
from rayton_perf import PerfConfig, PerfError, main, run_level
from rayton_perf.measure import STABILITY_WINDOWS
from rayton_perf.runner import Profiler
from tests.support.perf_triton import serving_idents

pytestmark = pytest.mark.reference

HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Short, bounded runs: at most 0.2 s warm-up + 6 windows of 400 ms per level.
FAST = ["-p", "400", "--warmup", "0.2", "-r", "6", "-s", "50", "--no-progress"]


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    """The reference tritonserver on loopback ports, or a skip saying why not."""
    yield from serving_idents(tmp_path_factory.mktemp("perf"))


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _check_csv(path: Path, first_column: str, rows: int) -> list[dict[str, str]]:
    text = path.read_text()
    header = text.splitlines()[0]
    assert header == HEADER.replace("Concurrency", first_column, 1)
    records = list(csv.DictReader(io.StringIO(text)))
    assert len(records) == rows
    for record in records:
        for column, value in record.items():
            assert float(value) >= 0, (column, value)
        assert float(record["Inferences/Second"]) > 0
        assert float(record["p99 latency"]) >= float(record["p50 latency"]) > 0
    throughputs = [float(r["Inferences/Second"]) for r in records]
    assert throughputs == sorted(throughputs)  # perf_analyzer sorts rows by throughput
    return records


def _server_counts(stdout: str) -> list[int]:
    return [int(n) for n in re.findall(r"^    Inference count: (\d+)$", stdout, re.MULTILINE)]


def _check_stdout(stdout: str, levels: int) -> None:
    assert stdout.startswith("*** Measurement Settings ***")
    assert stdout.count("  Client: \n") == levels
    assert stdout.count("  Server: \n") == levels
    counts = _server_counts(stdout)
    assert len(counts) == levels and all(n > 0 for n in counts)
    assert re.search(r"^    Execution count: [1-9]\d*$", stdout, re.MULTILINE)
    assert re.search(r"^    Successful request count: [1-9]\d*$", stdout, re.MULTILINE)
    assert "Avg request latency:" in stdout
    assert "Batch size distribution" in stdout
    assert "Inferences/Second vs. Client" in stdout


def test_http_concurrency_sweep(triton, tmp_path, capsys):
    out_csv, out_png = tmp_path / "out.csv", tmp_path / "out.png"
    status, stdout, stderr = _run(
        capsys,
        ["-m", "ident", "-u", triton.http_url.removeprefix("http://"),
         "--concurrency-range", "1:2", "-f", str(out_csv), "--plot", str(out_png), *FAST],
    )  # fmt: skip
    assert status == 0, stderr
    _check_stdout(stdout, levels=2)
    assert "Request concurrency: 1" in stdout and "Request concurrency: 2" in stdout
    assert "Avg HTTP time:" in stdout
    records = _check_csv(out_csv, "Concurrency", rows=2)
    assert sorted(r["Concurrency"] for r in records) == ["1", "2"]
    assert out_png.read_bytes()[:8] == PNG_MAGIC


def test_grpc_batched_with_percentile(triton, tmp_path, capsys):
    out_csv, out_png = tmp_path / "out.csv", tmp_path / "out.png"
    status, stdout, stderr = _run(
        capsys,
        ["-m", "ident", "-i", "grpc", "-u", triton.grpc_url, "-b", "2",
         "--concurrency-range", "1:2", "--percentile", "95",
         "-f", str(out_csv), "--plot", str(out_png), *FAST],
    )  # fmt: skip
    assert status == 0, stderr
    _check_stdout(stdout, levels=2)
    assert "Avg gRPC time:" in stdout
    assert "Inferences/Second vs. Client p95 Batch Latency" in stdout
    # Every request carries 2 rows: the server counts rows, the client reports them.
    inference = _server_counts(stdout)
    requests = [
        int(n) for n in re.findall(r"^    Successful request count: (\d+)$", stdout, re.MULTILINE)
    ]
    assert inference == [2 * n for n in requests]
    _check_csv(out_csv, "Concurrency", rows=2)
    assert out_png.read_bytes()[:8] == PNG_MAGIC


def test_http_request_rate_with_json_data(triton, tmp_path, capsys):
    data = tmp_path / "data.json"
    data.write_text(
        '{"data": [{"IN": [1, 2, 3, 4]}, {"IN": {"content": [5, 6, 7, 8], "shape": [4]}}]}'
    )
    out_csv = tmp_path / "rate.csv"
    status, stdout, stderr = _run(
        capsys,
        ["-m", "ident", "-u", triton.http_url.removeprefix("http://"),
         "--request-rate-range", "100:200:100", "--request-distribution", "poisson",
         "--input-data", str(data), "--json", "-f", str(out_csv), *FAST],
    )  # fmt: skip
    assert status == 0, stderr
    _check_stdout(stdout, levels=2)
    assert "Request Rate: 100 inference requests per second" in stdout
    records = _check_csv(out_csv, "Request Rate", rows=2)
    assert sorted(float(r["Request Rate"]) for r in records) == [100.0, 200.0]


async def test_library_run_level(triton):
    config = PerfConfig(
        model_name="ident",
        url=triton.http_url,
        batch_size=2,
        measurement_interval_ms=300,
        warmup_s=0.2,
        max_trials=5,
        stability_percentage=50,
    )
    concurrency = 2
    result = await run_level(config, concurrency=concurrency)
    assert result.throughput > 0
    assert result.request_count > 0 and result.windows >= 3
    assert result.latencies.p50_us > 0
    assert result.latencies.p99_us >= result.latencies.p95_us >= result.latencies.p50_us
    server = result.server
    assert server is not None and server.success_count > 0 and server.execution_count > 0
    # Windows are differences of snapshots taken under load (as perf_analyzer takes them): at
    # each edge a request in flight may be in one of the server's counters and not yet in
    # another, so they agree up to the rows in flight at the two edges of each window reported.
    in_flight_rows = STABILITY_WINDOWS * 2 * concurrency * config.batch_size
    assert abs(server.inference_count - 2 * server.success_count) <= in_flight_rows, server
    batched_rows = sum(size * n for size, n in result.batch_size_distribution.items())
    assert abs(batched_rows - server.inference_count) <= in_flight_rows, result
    assert len(result.as_csv_row()) == len(HEADER.split(","))
    assert isinstance(result.stable, bool)


async def test_library_request_count_grpc(triton):
    config = PerfConfig(
        model_name="ident", url=triton.grpc_url, protocol="grpc", warmup_s=0, request_count=40
    )
    result = await run_level(config, request_rate=400)
    assert result.request_count == 40
    assert result.server is not None and result.server.success_count == 40
    assert result.stable and result.windows == 1


async def test_a_sustained_load_runs_until_its_block_ends(triton):
    config = PerfConfig(model_name="ident", url=triton.http_url, batch_size=2)
    async with Profiler(config) as profiler:
        async with profiler.sustained_load(3) as load:
            await asyncio.sleep(0.5)
            first = load.buffer.completed
            await asyncio.sleep(0.5)
            assert load.buffer.completed > first > 0
        finished = load.buffer.completed
        await asyncio.sleep(0.3)
        assert load.buffer.completed == finished  # nothing more once the block ended
    assert load.buffer.errors == 0


async def test_a_sustained_load_raises_on_failure(triton):
    config = PerfConfig(model_name="broken", url=triton.http_url)
    async with Profiler(config) as profiler:
        with pytest.raises(PerfError, match="broken on purpose"):
            async with profiler.sustained_load(1):
                await asyncio.sleep(0.3)


def test_batch_size_needs_a_batching_model(triton, capsys):
    status, _, stderr = _run(
        capsys, ["-m", "ident_nobatch", "-u", triton.http_url, "-b", "2", *FAST]
    )
    assert status == 1
    assert "does not support batching" in stderr


def test_unknown_model_and_unreachable_server(triton, capsys):
    status, _, stderr = _run(capsys, ["-m", "nope", "-u", triton.http_url, *FAST])
    assert status == 1 and "nope" in stderr
    from tests.reference_triton import free_ports

    [port] = free_ports(1)
    status, _, stderr = _run(capsys, ["-m", "ident", "-u", f"127.0.0.1:{port}", *FAST])
    assert status == 1 and "failed to get server metadata" in stderr


def test_failing_requests_stop_the_run(triton, capsys):
    status, stdout, stderr = _run(
        capsys, ["-m", "broken", "-u", triton.http_url, "--concurrency-range", "1:4", *FAST]
    )
    assert status == 1
    assert "inference request failed during warm-up" in stderr
    assert "broken on purpose" in stderr
    assert "Client:" not in stdout  # no level was measured


async def test_run_level_raises_on_failure(triton):
    config = PerfConfig(model_name="broken", url=triton.http_url, warmup_s=0, max_trials=2)
    with pytest.raises(PerfError, match="broken on purpose"):
        await run_level(config, concurrency=1)


def test_grpc_streaming(triton, capsys):
    status, stdout, stderr = _run(
        capsys,
        ["-m", "ident", "-i", "grpc", "--streaming", "-u", triton.grpc_url,
         "--concurrency-range", "2", *FAST],
    )  # fmt: skip
    assert status == 0, stderr
    _check_stdout(stdout, levels=1)
    # the server answered the requests the client counted, all of them on streams; a request
    # that ends while a window's statistics are read counts in the server's window and the
    # client's next one (or the reverse at its start): at most the 2 in flight at each edge
    requests = re.findall(r"^    Successful request count: (\d+)$", stdout, re.MULTILINE)
    (server,) = _server_counts(stdout)
    (client,) = [int(n) for n in requests]
    assert client > 0 and abs(server - client) <= 2 * 2, (server, client)


async def test_streaming_errors_fail_the_run(triton):
    config = PerfConfig(
        model_name="broken", url=triton.grpc_url, protocol="grpc", streaming=True, warmup_s=0
    )
    with pytest.raises(PerfError, match="broken on purpose"):
        await run_level(config, concurrency=2)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shared_memory_system(triton, capsys, protocol):
    url = triton.http_url.removeprefix("http://") if protocol == "http" else triton.grpc_url
    status, stdout, stderr = _run(
        capsys,
        ["-m", "ident", "-u", url, "-i", protocol, "-b", "2", "--shared-memory", "system",
         "--output-shared-memory-size", "64", "--concurrency-range", "2", *FAST],
    )  # fmt: skip
    assert status == 0, stderr
    _check_stdout(stdout, levels=1)
    # Every region was unregistered and removed afterwards.
    assert triton.request("GET", "/v2/systemsharedmemory/status") == (200, [])
    assert not [p for p in Path("/dev/shm").glob("rayton_perf_*")]


def test_shared_memory_refusals(triton, capsys):
    url = triton.http_url.removeprefix("http://")
    status, _, stderr = _run(
        capsys,
        ["-m", "ident", "-u", url, "--shared-memory", "cuda", "--concurrency-range", "1",
         *FAST],
    )  # fmt: skip
    if cuda_device_present():
        assert status == 0, stderr
    else:
        assert status != 0 and "--shared-memory cuda: cannot allocate on GPU 0" in stderr
    status, _, stderr = _run(
        capsys,
        ["-m", "ident", "-u", url, "--shared-memory", "system",
         "--output-shared-memory-size", "8", "--concurrency-range", "1", *FAST],
    )  # fmt: skip
    assert status != 0 and "should be at least 16 bytes" in stderr
