"""Triton's dynamic batcher for one model version in one replica.

Requests flow: ``submit`` checks the queue policy -> admission -> :class:`PendingQueue` -> one
executor task per instance that, whenever the instance is free, takes the next batch the way
Triton forms it. In a replica the admission stage is ``@serve.batch``
(:mod:`deployments.apps.batch_admission`: counts rows with ``batch_size_fn``, caps a batch at
``max_batch_size`` rows, feeds the dashboard's batch metrics); it is passed in, so this module
stays Ray-free and runs in unit tests without it (requests then go straight to the queue).

The admission window is ``max_queue_delay_microseconds`` (Serve's ``batch_wait_timeout_s``);
a full row budget closes it early. Serve's measured gap is closed around it rather than
inside it: Serve forms batches eagerly (it closes the next batch while the previous one still
runs), so under load it hands the model many one-request batches. Admitted requests
therefore wait in the pending queue, and the executor merges them up to the row budget only
when the instance is free: in arrival order, never mixing shapes, cutting at preferred
sizes, with timeouts and priorities, and the delay counted from each request's arrival.

Measured alternative: a zero admission window with the delay applied only by the pending
queue (Triton's exact timing) cost ~12% throughput at 32 concurrent 1-row requests (every
arrival woke the executor), so admission keeps Serve's window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from deployments.core.batching.policy import BatchPolicy
from deployments.core.batching.queue import PendingQueue, PendingRequest, timeout_error
from deployments.core.statistics import (
    CANCELED,
    REJECTED,
    ExecutionTiming,
    RequestOutcome,
    VersionStatistics,
)
from repo_adapter.errors import InferenceServerError, ModelResponseError, StatusCode
from repo_adapter.inference_types import ComputeTimes, InferRequest, InferResponse
from repo_adapter.request_trace import BACKEND_OUTPUT, QUEUE_INPUT, RequestTrace

logger = logging.getLogger(__name__)

ExecuteFn = Callable[
    [Sequence[InferRequest]], Awaitable[Sequence["InferResponse | InferenceServerError"]]
]
Enqueue = Callable[[list[PendingRequest]], None]
Admit = Callable[[PendingRequest], Awaitable[Any]]
# (batcher name, policy, enqueue) -> the admission stage that calls enqueue with its batches.
AdmissionFactory = Callable[[str, BatchPolicy, Enqueue], Admit]


class DynamicBatcher:
    """Queues requests of one model version and runs them in batches on its instances.

    ``execute`` is one instance's execute function, or one per instance: each instance takes
    the next batch whenever it is free, so instances of one model run batches in parallel.
    """

    def __init__(
        self,
        name: str,
        policy: BatchPolicy,
        execute: ExecuteFn | Sequence[ExecuteFn],
        statistics: VersionStatistics,
        admission: AdmissionFactory | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self._instances: list[ExecuteFn] = [execute] if callable(execute) else list(execute)
        self._statistics = statistics
        self._pending = PendingQueue(policy)
        self._queued_per_level: dict[int, int] = {}
        self._wakeup: asyncio.Event | None = None
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
        if queue_policy.max_queue_size and (
            self._queued_per_level.get(level, 0) >= queue_policy.max_queue_size
        ):
            # Never queued: Triton counts it in neither the statistics nor the metrics.
            raise InferenceServerError("Exceeds maximum queue size", StatusCode.UNAVAILABLE)
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
        self._queued_per_level[level] = self._queued_per_level.get(level, 0) + 1
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
                    self._dequeued([item])
                    if isinstance(err, asyncio.CancelledError):
                        self._statistics.record_failure(arrival, CANCELED)
                raise
        return await item.future

    def _ensure_executor(self) -> None:
        if self._executor_tasks and not any(t.done() for t in self._executor_tasks):
            return
        for task in self._executor_tasks:
            task.cancel()
        self._wakeup = asyncio.Event()
        self._executor_tasks = [
            asyncio.create_task(self._run_executor(execute), name=f"rayton-executor-{self.name}")
            for execute in self._instances
        ]

    def _enqueue(self, items: list[PendingRequest]) -> None:
        for item in items:
            item.enqueued = True
            self._pending.add(item)
        assert self._wakeup is not None
        self._wakeup.set()

    def _dequeued(self, items: list[PendingRequest]) -> None:
        for item in items:
            self._queued_per_level[item.level] -= 1

    async def _run_executor(self, execute: ExecuteFn) -> None:
        assert self._wakeup is not None
        while True:
            now = time.monotonic()
            decision = self._pending.next_batch(now)
            self._dequeued(decision.rejected)
            for item in decision.rejected:
                # A caller that already went away was cancelled, not rejected.
                reason = CANCELED if item.future.done() else REJECTED
                self._statistics.record_failure(int(item.arrival * 1e9), reason)
                _resolve(item, timeout_error())
            if not decision.batch:
                self._wakeup.clear()
                timeout = None if decision.wait_until is None else decision.wait_until - now
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                continue
            self._dequeued(decision.batch)
            await self._run_batch(decision.batch, execute)
            # Let the loop send the responses and admit what arrived during the execution
            # (it may have run inline) before the next batch is formed.
            await asyncio.sleep(0)

    @property
    def pending_count(self) -> int:
        """Requests received and not yet executing (Triton's pending request count)."""
        return sum(self._queued_per_level.values())

    async def _run_batch(self, batch: list[PendingRequest], execute: ExecuteFn) -> None:
        live = []
        for item in batch:
            if item.future.done():  # cancelled by the caller while it waited
                self._statistics.record_failure(int(item.arrival * 1e9), CANCELED)
            else:
                live.append(item)
        batch = live
        if not batch:
            return
        start_ns = time.monotonic_ns()
        requests = [item.request for item in batch]
        phases = None
        try:
            returned = await execute(requests)
            phases = getattr(returned, "compute", None)  # backends' report_compute
            results = list(returned)
            if len(results) != len(batch):
                raise InferenceServerError(
                    f"backend returned {len(results)} responses for {len(batch)} requests",
                    StatusCode.INTERNAL,
                )
        except InferenceServerError as err:
            results = [err] * len(batch)
        except Exception as err:  # a backend bug must fail this batch, not the replica
            logger.exception("model '%s' failed to execute a batch", self.name)
            results = [InferenceServerError(str(err), StatusCode.INTERNAL)] * len(batch)
        executed_ns = time.monotonic_ns()
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
        self._statistics.record_execution(
            timing,
            [
                RequestOutcome(int(item.arrival * 1e9), item.rows, _failed(result))
                for item, result in zip(batch, results, strict=True)
            ],
        )

    async def close(self) -> None:
        """Stop the executor and fail whatever is still queued."""
        for task in self._executor_tasks:
            task.cancel()
        for item in self._pending.drain():
            _resolve(item, InferenceServerError("model is unloading", StatusCode.UNAVAILABLE))


def _timing(start_ns: int, executed_ns: int, phases: ComputeTimes | None) -> ExecutionTiming:
    """The execution's phases: gathering inputs and the model itself as the backend measured
    them (``report_compute``); the rest, scattering outputs included, is compute output. A
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


def _resolve(item: PendingRequest, result: InferResponse | BaseException) -> None:
    if item.future is None or item.future.done():
        return
    if isinstance(result, BaseException):
        item.future.set_exception(result)
    else:
        item.future.set_result(result)
