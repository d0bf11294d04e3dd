"""Load generators against a fake ``send`` (no server; every loop is bounded)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from rayton_perf.config import PerfError
from rayton_perf.load import (
    ConcurrencyLoad,
    RequestRateLoad,
    intervals_rate,
    read_request_intervals,
)


class FakeServer:
    """Counts requests in flight; optionally fails request number ``fail_at``."""

    def __init__(self, delay_s: float = 0.002, fail_at: int | None = None):
        self.delay_s = delay_s
        self.fail_at = fail_at
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls: list[tuple[int, int]] = []

    async def send(self, worker: int, seq: int) -> str:
        self.calls.append((worker, seq))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            if seq == self.fail_at:
                raise RuntimeError("boom")
            return "ok"
        finally:
            self.in_flight -= 1


async def test_concurrency_load_keeps_n_in_flight():
    server = FakeServer()
    load = ConcurrencyLoad(server.send, concurrency=4)
    load.start()
    await asyncio.sleep(0.1)
    await load.stop(drain_timeout_s=2)
    records, sent = load.buffer.swap()
    assert server.max_in_flight == 4
    assert sent == len(records) > 20
    assert all(r.ok and r.latency_ns > 0 for r in records)
    assert {w for w, _ in server.calls} == {0, 1, 2, 3}
    assert server.in_flight == 0  # drained
    assert load.buffer.last_result == "ok"


async def test_concurrency_load_request_limit():
    server = FakeServer()
    load = ConcurrencyLoad(server.send, concurrency=3, request_limit=10)
    load.start()
    await asyncio.wait_for(load.finished.wait(), timeout=5)
    records, _ = load.buffer.swap()
    assert len(records) == 10
    assert sorted(seq for _, seq in server.calls) == list(range(10))
    await load.stop()


async def test_load_stops_at_first_error():
    server = FakeServer(fail_at=5)
    load = ConcurrencyLoad(server.send, concurrency=2)
    load.start()
    await asyncio.wait_for(load.finished.wait(), timeout=5)
    assert load.failed
    assert load.buffer.first_error == "RuntimeError: boom"
    assert len(server.calls) < 10  # no spinning on failures
    await load.stop()


@pytest.mark.parametrize("distribution", ["constant", "poisson"])
async def test_request_rate_load_follows_the_rate(distribution):
    server = FakeServer(delay_s=0.001)
    load = RequestRateLoad(server.send, rate=200, distribution=distribution, seed=3)
    load.start()
    await asyncio.sleep(0.5)
    await load.stop(drain_timeout_s=2)
    records, sent = load.buffer.swap()
    assert sent == len(records)
    assert 60 <= len(records) <= 140  # ~100 expected
    assert server.in_flight == 0


async def test_request_rate_load_is_open_loop_and_bounded():
    # Requests slower than the interval pile up (open loop) until max_outstanding.
    server = FakeServer(delay_s=0.2)
    load = RequestRateLoad(server.send, rate=500, max_outstanding=5)
    load.start()
    await asyncio.sleep(0.3)
    assert server.max_in_flight == 5
    await load.stop(drain_timeout_s=2)
    records, _ = load.buffer.swap()
    assert any(r.delayed for r in records)


async def test_request_rate_load_request_limit():
    server = FakeServer(delay_s=0.001)
    load = RequestRateLoad(server.send, rate=1000, request_limit=7)
    load.start()
    await asyncio.wait_for(load.finished.wait(), timeout=5)
    records, _ = load.buffer.swap()
    assert len(records) == 7
    await load.stop()


async def test_stop_cancels_requests_that_do_not_drain():
    server = FakeServer(delay_s=30)
    load = ConcurrencyLoad(server.send, concurrency=2)
    load.start()
    await asyncio.sleep(0.05)
    await asyncio.wait_for(load.stop(drain_timeout_s=0.1), timeout=5)
    assert load.finished.is_set()


def test_interval_distribution():
    constant = RequestRateLoad(FakeServer().send, rate=100)
    assert {constant.interval_ns() for _ in range(5)} == {10_000_000}
    poisson = RequestRateLoad(FakeServer().send, rate=100, distribution="poisson", seed=1)
    gaps = [poisson.interval_ns() for _ in range(4000)]
    assert len(set(gaps)) > 100
    assert 9_000_000 < sum(gaps) / len(gaps) < 11_000_000
    with pytest.raises(ValueError):
        RequestRateLoad(FakeServer().send, rate=0)


def test_custom_intervals_replace_the_rate():
    load = RequestRateLoad(FakeServer().send, rate=1, intervals_ns=[1_000_000, 5_000_000])
    assert [load.interval_ns() for _ in range(5)] == [1_000_000, 5_000_000] * 2 + [1_000_000]
    assert intervals_rate([1_000_000, 5_000_000]) == pytest.approx(2 / 0.006)


async def test_custom_intervals_schedule_requests():
    server = FakeServer(delay_s=0.001)
    # 60 ms then 0 ms: pairs of requests 60 ms apart (wide margins for a busy machine).
    load = RequestRateLoad(server.send, rate=100, intervals_ns=[60_000_000, 0], request_limit=6)
    load.start()
    await asyncio.wait_for(load.finished.wait(), timeout=5)
    records, _ = load.buffer.swap()
    starts = sorted(r.start_ns for r in records)
    gaps_ms = [(b - a) / 1e6 for a, b in itertools.pairwise(starts)]
    assert len(records) == 6
    # The first request goes at once, the next after 60 ms, then 0, 60, 0, ...
    assert all(gap > 30 for gap in gaps_ms[0::2])  # the 60 ms gaps
    assert all(gap < 30 for gap in gaps_ms[1::2])  # the 0 us gaps
    await load.stop()


def test_read_request_intervals(tmp_path):
    path = tmp_path / "intervals"
    path.write_text("100\n 250 \n\n0\n")
    assert read_request_intervals(path) == [100_000, 250_000, 0]  # usec in, nsec out
    path.write_text("")
    with pytest.raises(PerfError, match="is empty"):
        read_request_intervals(path)
    path.write_text("100\n1.5\n")
    with pytest.raises(PerfError, match=r"line 2: '1\.5' is not a whole number"):
        read_request_intervals(path)
    with pytest.raises(PerfError, match="failed to open file"):
        read_request_intervals(tmp_path / "missing")
