"""Load generators on asyncio: closed-loop concurrency and open-loop request rate.

Both call a ``send(worker, seq)`` coroutine supplied by the caller (which picks the client
and the prepared request) and time it with ``time.perf_counter_ns``. Completed requests go
to a :class:`RecordBuffer` the measurer swaps out at every window boundary. Every loop is
bounded: it ends when stopped, at the first failed request (as perf_analyzer does), or
after ``request_limit`` requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rayton_perf.config import POISSON, PerfError

SendFn = Callable[[int, int], Awaitable[Any]]

# Rate mode: a request sent more than this after its scheduled time counts as delayed
# (asyncio wakes up a little late every time; sub-millisecond lateness is not a backlog).
DELAY_TOLERANCE_NS = 1_000_000
# Rate mode: a request due within this much is sent now rather than after another sleep.
_EARLY_NS = 500_000
# Longest single sleep, so a stop request is noticed promptly.
_MAX_SLEEP_S = 0.05


@dataclass(slots=True)
class Record:
    """One finished request: perf_counter_ns timestamps and outcome."""

    start_ns: int
    end_ns: int
    ok: bool
    delayed: bool = False

    @property
    def latency_ns(self) -> int:
        return self.end_ns - self.start_ns


class RecordBuffer:
    """Where workers put finished requests; swapped out once per window."""

    def __init__(self) -> None:
        self._records: list[Record] = []
        self._sent = 0
        self.completed = 0
        self.errors = 0
        self.first_error: str | None = None
        self.last_result: Any = None

    def sent(self) -> None:
        """Count a request that was just started."""
        self._sent += 1

    def add(self, record: Record, result: Any = None, error: BaseException | None = None) -> None:
        """Store a finished request (and the first error message)."""
        self._records.append(record)
        self.completed += 1
        if record.ok:
            self.last_result = result
        else:
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{type(error).__name__}: {error}" if error else "failed"

    def swap(self) -> tuple[list[Record], int]:
        """Take the records finished and the count of requests started since the last swap."""
        records, sent = self._records, self._sent
        self._records, self._sent = [], 0
        return records, sent


class Load:
    """Common lifecycle of a load generator: start, run until stopped, drain.

    Args:
        send: coroutine sending request number ``seq`` for worker ``worker``.
        request_limit: stop after starting this many requests (0 = unlimited).
        stop_on_error: stop everything at the first failed request.
    """

    def __init__(self, send: SendFn, request_limit: int = 0, stop_on_error: bool = True):
        self._send = send
        self.request_limit = request_limit
        self.stop_on_error = stop_on_error
        self.buffer = RecordBuffer()
        self.finished = asyncio.Event()  # set once no more requests will complete
        self._stopping = False
        self._issued = 0
        self._tasks: set[asyncio.Task] = set()

    @property
    def failed(self) -> bool:
        return self.buffer.errors > 0 and self.stop_on_error

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _take_ticket(self) -> int | None:
        """The next request number, or None once stopped or the limit is reached."""
        if self._stopping or (self.request_limit and self._issued >= self.request_limit):
            return None
        seq = self._issued
        self._issued += 1
        return seq

    async def _timed_send(self, worker: int, seq: int, delayed: bool = False) -> None:
        self.buffer.sent()
        start = time.perf_counter_ns()
        try:
            result = await self._send(worker, seq)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self.buffer.add(Record(start, time.perf_counter_ns(), False, delayed), error=err)
            if self.stop_on_error:
                self._stopping = True
            return
        self.buffer.add(Record(start, time.perf_counter_ns(), True, delayed), result)

    def start(self) -> None:
        """Begin sending (returns immediately)."""
        raise NotImplementedError

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Stop sending, wait up to ``drain_timeout_s`` for requests in flight, cancel the rest."""
        self._stopping = True
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=drain_timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        self.finished.set()

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


class ConcurrencyLoad(Load):
    """Closed loop: ``concurrency`` workers, each sending its next request when one returns.

    Args:
        send: see :class:`Load`.
        concurrency: requests kept in flight.
        request_limit: see :class:`Load`.
        stop_on_error: see :class:`Load`.
    """

    def __init__(
        self, send: SendFn, concurrency: int, request_limit: int = 0, stop_on_error: bool = True
    ):
        super().__init__(send, request_limit, stop_on_error)
        self.concurrency = concurrency
        self._running = 0

    def start(self) -> None:
        self._running = self.concurrency
        for worker in range(self.concurrency):
            self._spawn(self._worker(worker))

    async def _worker(self, worker: int) -> None:
        try:
            while (seq := self._take_ticket()) is not None:
                await self._timed_send(worker, seq)
        finally:
            self._running -= 1
            if self._running == 0:
                self.finished.set()


class RequestRateLoad(Load):
    """Open loop: requests start on a schedule, whether or not earlier ones have returned.

    Args:
        send: see :class:`Load`.
        rate: requests per second.
        distribution: ``constant`` intervals or ``poisson`` (exponential) intervals.
        max_outstanding: most requests in flight; a due request waits for a free slot and
            is then counted as delayed.
        seed: seed for Poisson intervals.
        request_limit: see :class:`Load`.
        stop_on_error: see :class:`Load`.
        intervals_ns: perf_analyzer's ``--request-intervals``: the gaps to use, cycled,
            instead of ones drawn from ``rate`` and ``distribution``.
    """

    def __init__(
        self,
        send: SendFn,
        rate: float,
        distribution: str = "constant",
        max_outstanding: int = 1024,
        seed: int = 0,
        request_limit: int = 0,
        stop_on_error: bool = True,
        intervals_ns: Sequence[int] | None = None,
    ):
        super().__init__(send, request_limit, stop_on_error)
        if rate <= 0:
            raise ValueError("request rate must be > 0")
        self.rate = rate
        self.distribution = distribution
        self.max_outstanding = max_outstanding
        self._rng = random.Random(seed)
        self._slots = asyncio.Semaphore(max_outstanding)
        self._scheduler: asyncio.Task | None = None
        self._custom = itertools.cycle(intervals_ns) if intervals_ns else None

    def interval_ns(self) -> int:
        """Gap before the next request."""
        if self._custom is not None:
            return next(self._custom)
        mean = 1e9 / self.rate
        if self.distribution == POISSON:
            return int(self._rng.expovariate(1.0 / mean))
        return int(mean)

    def start(self) -> None:
        self._scheduler = asyncio.ensure_future(self._schedule())

    async def _schedule(self) -> None:
        next_ns = time.perf_counter_ns()
        try:
            while not self._stopping:
                wait_ns = next_ns - time.perf_counter_ns()
                if wait_ns > _EARLY_NS:
                    # Aim a little early: the loop's timers fire up to ~1 ms late.
                    await asyncio.sleep(min((wait_ns - _EARLY_NS) / 1e9, _MAX_SLEEP_S))
                    continue
                seq = self._take_ticket()
                if seq is None:
                    break
                # Past its slot: acquire waits only when max_outstanding are in flight.
                await self._slots.acquire()
                delayed = time.perf_counter_ns() - next_ns > DELAY_TOLERANCE_NS
                self._spawn(self._one(seq, delayed))
                next_ns += self.interval_ns()
                if wait_ns < -DELAY_TOLERANCE_NS:
                    # Behind schedule: yield so responses can be processed between sends.
                    await asyncio.sleep(0)
        finally:
            if not self._tasks:
                self.finished.set()

    async def _one(self, seq: int, delayed: bool) -> None:
        try:
            await self._timed_send(seq, seq, delayed)
        finally:
            self._slots.release()
            if self._stopping or (self.request_limit and self._issued >= self.request_limit):
                if all(t.done() or t is asyncio.current_task() for t in self._tasks):
                    self.finished.set()

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        self._stopping = True
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
        await super().stop(drain_timeout_s)


def read_request_intervals(path: str | Path) -> list[int]:
    """Read perf_analyzer's ``--request-intervals`` file: one gap in µs per line, as ns.

    Blank lines are skipped (perf_analyzer would stop at one with an exception).

    Raises:
        PerfError: unreadable or empty file, or a line that is not a whole number.
    """
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        raise PerfError(f"failed to open file '{path}'") from None
    intervals = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            intervals.append(int(line.strip()) * 1000)
        except ValueError:
            raise PerfError(
                f"--request-intervals {path} line {number}: {line.strip()!r} is not a whole "
                "number of microseconds"
            ) from None
    if not intervals:
        raise PerfError(f"file '{path}' is empty")
    return intervals


def intervals_rate(intervals_ns: Sequence[int]) -> float:
    """Requests per second of a custom schedule (perf_analyzer's ``GetCustomRequestRate``)."""
    return len(intervals_ns) * 1e9 / sum(intervals_ns)
