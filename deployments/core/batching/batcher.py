"""Triton's dynamic batcher for one model version in one replica.

Requests flow: ``submit`` checks the queue policy -> (an admission stage, if given) ->
:class:`PendingQueue` -> one executor task per instance that, whenever the instance is free,
takes the next batch the way Triton forms it: in arrival order, never mixing shapes, cutting
at preferred sizes, with timeouts and priorities, and the delay counted from each request's
arrival. An executor waiting for a batch to fill is woken only by an arrival that may make one
ready sooner (:meth:`PendingQueue.add`): waking it on every arrival cost more than the
batching saved (BENCHMARKS.md, "Tuning: kept and rejected").

By default requests go straight into the queue (``rayton serve --batch-admission direct``).
``--batch-admission serve-batch`` puts ``@serve.batch`` in front as the admission stage
(:mod:`deployments.apps.batch_admission`: counts rows with ``batch_size_fn``, caps a batch at
``max_batch_size`` rows, feeds the dashboard's batch metrics); it is passed in, so this module
stays Ray-free. Serve forms its batches eagerly (it closes the next batch while the previous
one still runs), so under load it hands on many one-request batches: admitted requests still
wait in the pending queue, and the executor merges them when the instance is free.

Where each batch runs (inline on the loop, or on the instance's own thread, which then takes
its next batches itself under the same rule and the queue's lock) is the scheduler's
(:mod:`deployments.core.batching.scheduling`); finished batches are handed back to the loop,
which alone resolves callers and records statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from deployments.core.batching.policy import BatchPolicy
from deployments.core.batching.queue import (
    BatchDecision,
    PendingQueue,
    PendingRequest,
    timeout_error,
)
from deployments.core.batching.scheduling import InstanceScheduler, ModelInstance
from deployments.observability.statistics import (
    CANCELED,
    REJECTED,
    ExecutionTiming,
    RequestOutcome,
    VersionStatistics,
)
from repo_adapter.backends.base import Execution
from repo_adapter.errors import InferenceServerError, ModelResponseError, StatusCode
from repo_adapter.inference_types import ComputeTimes, InferRequest, InferResponse
from repo_adapter.request_trace import BACKEND_OUTPUT, QUEUE_INPUT, RequestTrace

logger = logging.getLogger(__name__)

ExecuteFn = Callable[[Sequence[InferRequest]], Awaitable[Execution]]
Enqueue = Callable[[list[PendingRequest]], None]
Admit = Callable[[PendingRequest], Awaitable[Any]]
# (batcher name, policy, enqueue) -> the admission stage that calls enqueue with its batches.
AdmissionFactory = Callable[[str, BatchPolicy, Enqueue], Admit]


class _ExecuteOnly:
    """An instance given as its execute function alone: one batch per call, on the loop."""

    def __init__(self, execute: ExecuteFn) -> None:
        self.execute = execute


class _SharedQueue:
    """The admitted requests and their counts per priority level, shared under one lock by
    the event loop and the instance threads taking their next batch."""

    def __init__(self, policy: BatchPolicy) -> None:
        self._lock = threading.Lock()
        self._pending = PendingQueue(policy)
        self._queued_per_level: dict[int, int] = {}

    def count_in(self, level: int, max_queue_size: int) -> None:
        """Count a request of priority ``level`` in; UNAVAILABLE when that level is full."""
        with self._lock:
            queued = self._queued_per_level.get(level, 0)
            if max_queue_size and queued >= max_queue_size:
                # Never queued: Triton counts it in neither the statistics nor the metrics.
                raise InferenceServerError("Exceeds maximum queue size", StatusCode.UNAVAILABLE)
            self._queued_per_level[level] = queued + 1

    def count_out(self, items: list[PendingRequest]) -> None:
        with self._lock:
            self._count_out(items)

    def add(self, items: list[PendingRequest]) -> bool:
        """Queue ``items``; whether a batch may be ready sooner than before (see
        :meth:`PendingQueue.add`)."""
        sooner = False
        with self._lock:
            for item in items:
                item.enqueued = True
                sooner = self._pending.add(item) or sooner
        return sooner

    def take(self) -> BatchDecision:
        """The next batch by Triton's rule, out of the queue; any thread."""
        with self._lock:
            decision = self._pending.next_batch(time.monotonic())
            self._count_out(decision.rejected)
            self._count_out(decision.batch)
        return decision

    def drain(self) -> list[PendingRequest]:
        with self._lock:
            return self._pending.drain()

    @property
    def pending_count(self) -> int:
        with self._lock:
            return sum(self._queued_per_level.values())

    def _count_out(self, items: list[PendingRequest]) -> None:
        for item in items:
            self._queued_per_level[item.level] -= 1


class DynamicBatcher:
    """Queues requests of one model version and runs them in batches on its instances.

    ``instances``: the model's instances (backends), or one execute function per instance, or
    one alone: each instance takes the next batch whenever it is free, so instances of one
    model run batches in parallel; ``scheduler`` decides where each batch runs.
    """

    def __init__(
        self,
        name: str,
        policy: BatchPolicy,
        instances: ExecuteFn | Sequence[ExecuteFn | ModelInstance],
        statistics: VersionStatistics,
        admission: AdmissionFactory | None = None,
        scheduler: InstanceScheduler | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        given = [instances] if callable(instances) else list(instances)
        self._instances: list[ModelInstance] = [
            _ExecuteOnly(i) if callable(i) else i for i in given
        ]
        self._scheduler = scheduler or InstanceScheduler()
        self._results = _BatchResults(name, statistics)
        self._queue = _SharedQueue(policy)
        # Executors waiting for a batch to become ready, woken by an arrival that may make
        # one ready sooner (each arrival waking them costs more than the batching saves).
        self._waiting: list[asyncio.Future[None]] = []
        self._executor_tasks: list[asyncio.Task] = []
        self._admit: Admit | None = None
        if admission is not None and policy.batches_rows:
            self._admit = admission(name, policy, self._enqueue)

    async def submit(self, request: InferRequest, rows: int) -> InferResponse:
        """Queue ``request`` (``rows`` batch rows) and wait for its response."""
        policy = self.policy
        level = policy.priority_of(request)
        queue_policy = policy.queue_policy(level)
        arrival = time.monotonic_ns()
        timeout_us = queue_policy.timeout_us(request.timeout_us)
        loop = asyncio.get_running_loop()
        item = PendingRequest(
            request=request,
            rows=rows,
            key=policy.batch_key(request),
            arrival=arrival / 1e9,
            level=level,
            deadline=arrival / 1e9 + timeout_us / 1e6 if timeout_us else None,
            delay_on_timeout=queue_policy.delay_on_timeout,
            future=loop.create_future(),
        )
        self._queue.count_in(level, queue_policy.max_queue_size)
        if request.trace is not None:
            _trace_queued(request.trace, request, arrival)
        self._ensure_executor()
        if self._admit is None:
            self._enqueue([item])
        else:
            try:
                await self._admit(item)
            except BaseException as err:
                if not item.enqueued:  # cancelled inside admission: never reached the queue
                    self._queue.count_out([item])
                    if isinstance(err, asyncio.CancelledError):
                        self._results.record_failure(arrival, CANCELED)
                raise
        return await item.future

    def _ensure_executor(self) -> None:
        if self._executor_tasks and not any(t.done() for t in self._executor_tasks):
            return
        for task in self._executor_tasks:
            task.cancel()
        self._executor_tasks = [
            asyncio.create_task(self._run_executor(instance), name=f"rayton-executor-{self.name}")
            for instance in self._instances
        ]

    def _enqueue(self, items: list[PendingRequest]) -> None:
        if self._queue.add(items):
            for waiter in self._waiting:
                _wake(waiter)

    async def _wait(self, loop: asyncio.AbstractEventLoop, wait_until: float | None) -> None:
        """Until an arrival may make a batch ready, or ``wait_until`` (monotonic seconds)."""
        waiter = loop.create_future()
        timer = None
        if wait_until is not None:
            timer = loop.call_later(max(wait_until - time.monotonic(), 0.0), _wake, waiter)
        self._waiting.append(waiter)
        try:
            await waiter
        finally:
            self._waiting.remove(waiter)
            if timer is not None:
                timer.cancel()

    async def _run_executor(self, instance: ModelInstance) -> None:
        loop = asyncio.get_running_loop()
        chain = _InstanceChain(self._queue, self._results, loop)
        run = self._scheduler.runner_for(instance)
        while True:
            decision = self._queue.take()
            requests = chain.take(decision)
            if not decision.batch:
                await self._wait(loop, decision.wait_until)
                continue
            if requests:
                await run(requests, chain)
            # Let the loop send the responses and admit what arrived during the execution
            # (it may have run inline) before the next batch is formed.
            await asyncio.sleep(0)

    @property
    def pending_count(self) -> int:
        """Requests received and not yet executing (Triton's pending request count)."""
        return self._queue.pending_count

    async def close(self) -> None:
        """Stop the executor and fail whatever is still queued."""
        for task in self._executor_tasks:
            task.cancel()
        for item in self._queue.drain():
            _resolve(item, InferenceServerError("model is unloading", StatusCode.UNAVAILABLE))


class _BatchResults:
    """Resolves the callers of taken, failed and executed requests and records them in the
    version's statistics (on the event loop only)."""

    def __init__(self, name: str, statistics: VersionStatistics) -> None:
        self._name = name
        self._statistics = statistics

    def record_failure(self, arrival_ns: int, reason: str) -> None:
        self._statistics.record_failure(arrival_ns, reason)

    def reject(self, items: list[PendingRequest]) -> None:
        """Fail requests whose queue timeout expired."""
        for item in items:
            # A caller that already went away was cancelled, not rejected.
            reason = CANCELED if item.future.done() else REJECTED
            self._statistics.record_failure(int(item.arrival * 1e9), reason)
            _resolve(item, timeout_error())

    def cancelled(self, batch: list[PendingRequest], live: list[PendingRequest]) -> None:
        """Count the requests of ``batch`` left out of ``live`` as cancelled."""
        for item in batch:
            if item not in live:
                self._statistics.record_failure(int(item.arrival * 1e9), CANCELED)

    def complete(
        self,
        batch: list[PendingRequest],
        outcome: Execution | Exception,
        start_ns: int,
        executed_ns: int,
    ) -> None:
        """Resolve an executed batch's callers and record it."""
        phases = reports = None
        if isinstance(outcome, Exception):
            results = self._failed_batch(outcome, len(batch))
        else:
            phases, reports = outcome.compute, outcome.reports
            results = list(outcome.results)
            if len(results) != len(batch):
                error = InferenceServerError(
                    f"backend returned {len(results)} responses for {len(batch)} requests",
                    StatusCode.INTERNAL,
                )
                results = [error] * len(batch)
        for item, result in zip(batch, results, strict=True):
            _resolve(item, result)
        timing = _timing(start_ns, executed_ns, phases)
        # What an ensemble over this model sums; set before any waiter resumes (no await since
        # the futures were resolved), so every caller sees it.
        compute = timing.compute
        for result in results:
            if isinstance(result, InferResponse):
                result.compute = compute
        for item, result in zip(batch, results, strict=True):
            if item.request.trace is not None:
                _trace_executed(item.request.trace, timing, executed_ns, result)
        outcomes = [
            RequestOutcome(int(item.arrival * 1e9), item.rows, _failed(result))
            for item, result in zip(batch, results, strict=True)
        ]
        if reports is not None and len(reports.requests) == len(batch):
            self._statistics.record_reported(reports, outcomes)  # the backend's own numbers
        else:
            self._statistics.record_execution(timing, outcomes)

    def _failed_batch(self, error: Exception, size: int) -> list[InferenceServerError]:
        if not isinstance(error, InferenceServerError):
            # A backend bug must fail this batch, not the replica.
            logger.error("model '%s' failed to execute a batch", self._name, exc_info=error)
            error = InferenceServerError(str(error), StatusCode.INTERNAL)
        return [error] * size


class _InstanceChain:
    """One instance's :class:`~deployments.core.batching.scheduling.BatchChain`: its batches
    in flight, in order, and the way from the instance's thread back to the event loop."""

    def __init__(
        self, queue: _SharedQueue, results: _BatchResults, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._queue = queue
        self._results = results
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._running: deque[tuple[list[PendingRequest], int]] = deque()  # (batch, start ns)

    def take(self, decision: BatchDecision) -> list[InferRequest]:
        """Start ``decision``'s batch without the requests whose callers went away; those and
        the timed-out ones are failed and counted on the loop. Any thread."""
        live = [item for item in decision.batch if not item.future.done()]
        if decision.rejected:
            self._on_loop(self._results.reject, decision.rejected)
        if len(live) != len(decision.batch):
            self._on_loop(self._results.cancelled, decision.batch, live)
        if not live:
            return []
        self._running.append((live, time.monotonic_ns()))
        return [item.request for item in live]

    def next_batch(self) -> list[InferRequest]:
        return self.take(self._queue.take())

    def finished(self, requests: Sequence[InferRequest], outcome: Execution | Exception) -> None:
        batch, start_ns = self._running.popleft()
        self._on_loop(self._results.complete, batch, outcome, start_ns, time.monotonic_ns())

    def _on_loop(self, callback: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            callback(*args)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: its callers are gone
            self._loop.call_soon_threadsafe(callback, *args)


def _timing(start_ns: int, executed_ns: int, phases: ComputeTimes | None) -> ExecutionTiming:
    """The execution's phases: gathering inputs and the model itself as the backend measured
    them (:attr:`Execution.compute`); the rest, scattering outputs included, is compute output. A
    backend that reports nothing (or raised) counts as all inference."""
    end_ns = time.monotonic_ns()
    if phases is None:
        return ExecutionTiming(start_ns, start_ns, executed_ns, end_ns)
    infer_start_ns = min(start_ns + phases.input_ns, executed_ns)
    infer_end_ns = min(infer_start_ns + phases.infer_ns, executed_ns)
    return ExecutionTiming(start_ns, infer_start_ns, infer_end_ns, end_ns)


def _trace_queued(trace: RequestTrace, request: InferRequest, arrival_ns: int) -> None:
    trace.stamp("QUEUE_START", arrival_ns)
    for tensor in request.inputs:
        trace.tensor(QUEUE_INPUT, tensor.name, tensor.datatype, tensor.data)


def _trace_executed(
    trace: RequestTrace,
    timing: ExecutionTiming,
    executed_ns: int,
    result: InferResponse | BaseException,
) -> None:
    """The execution's compute stamps (shared by every request of the batch, as in Triton)."""
    trace.stamp("COMPUTE_START", timing.start_ns)
    trace.stamp("COMPUTE_INPUT_END", timing.infer_start_ns)
    trace.stamp("COMPUTE_OUTPUT_START", timing.infer_end_ns)
    trace.stamp("INFER_RESPONSE_COMPLETE", executed_ns)
    trace.stamp("COMPUTE_END", timing.end_ns)
    if isinstance(result, InferResponse):
        for tensor in result.outputs:
            trace.tensor(BACKEND_OUTPUT, tensor.name, tensor.datatype, tensor.data)


def _failed(result: InferResponse | BaseException) -> bool:
    # A model's per-request error response still came from a successful execution.
    return isinstance(result, BaseException) and not isinstance(result, ModelResponseError)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _resolve(item: PendingRequest, result: InferResponse | BaseException) -> None:
    if item.future is None or item.future.done():
        return
    if isinstance(result, BaseException):
        item.future.set_exception(result)
    else:
        item.future.set_result(result)
