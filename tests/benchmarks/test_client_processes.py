"""The load spread over client processes (benchmarks.client_processes), against the reference
tritonserver."""

from __future__ import annotations

import time

import pytest

from benchmarks.client_processes import (
    ClientMark,
    ClientProcesses,
    ClientWindow,
    concurrency_shares,
)
from benchmarks.cpu_per_request import CLIENT, measure_spread
from rayton_perf import PerfConfig, PerfError
from tests.support.perf_triton import serving_idents


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    yield from serving_idents(tmp_path_factory.mktemp("spread"))


def test_concurrency_is_shared_evenly_over_the_processes():
    assert concurrency_shares(32, 2) == [16, 16]
    assert concurrency_shares(5, 2) == [3, 2]
    assert concurrency_shares(2, 4) == [1, 1]  # never a process without a request
    with pytest.raises(ValueError):
        concurrency_shares(0, 2)


def test_a_mark_minus_an_earlier_one_is_the_window():
    window = ClientMark(12.5, 300, 1.5) - ClientMark(10.0, 100, 1.0)
    assert window == ClientWindow(2.5, 200, 0.5)


@pytest.mark.reference
def test_every_process_counts_its_requests_and_its_cpu(triton):
    before = _successes(triton)
    with ClientProcesses(PerfConfig(model_name="ident", url=triton.http_url), 4, 2) as clients:
        time.sleep(0.5)
        start = clients.mark()
        time.sleep(1.0)
        window = clients.mark() - start
    assert window.requests > 0 and window.cpu_s > 0
    assert 0.9 < window.seconds < 1.5
    # every request the clients counted reached the server (and none after the block)
    served = _successes(triton) - before
    assert served >= window.requests
    time.sleep(0.3)
    assert _successes(triton) - before == served


@pytest.mark.reference
def test_a_failing_request_fails_the_spread_load(triton):
    config = PerfConfig(model_name="broken", url=triton.http_url)
    with (
        pytest.raises(PerfError, match="broken on purpose"),
        ClientProcesses(config, 2, 2) as clients,
    ):
        time.sleep(0.3)
        clients.mark()


@pytest.mark.reference
def test_cpu_per_request_with_the_load_spread(triton):
    config = PerfConfig(
        model_name="ident", url=triton.http_url, measurement_interval_ms=300, warmup_s=0.3
    )
    share = measure_spread(config, 4, triton.session_id, 2)
    assert share.throughput > 0
    assert share.ms_per_request[CLIENT] > 0
    assert share.ms_per_request["tritonserver"] > 0


def _successes(triton) -> int:
    status, body = triton.request("GET", "/v2/models/ident/stats")
    assert status == 200
    stats = body["model_stats"]
    return sum(entry["inference_stats"]["success"]["count"] for entry in stats)
