"""Where an instance runs each batch: inline on the event loop, or on its own thread.

Framework backends (:class:`ThreadedInstance`) give the scheduler the pieces of an execution
(gathering inputs, the forward pass) and a thread of their own; the scheduler decides per
batch where it runs:

* inline on the caller's event loop when the model is known to be short: a thread hop costs
  a GIL round trip per execution, more than such a model's run (BENCHMARKS.md, "Tuning: kept
  and rejected");
* on the instance's thread otherwise (a long model, or one whose duration is not known yet),
  where batches then follow each other: the thread takes the next batch from the batcher
  itself the moment it is free, as Triton's instance threads dequeue their next payload, so
  the event loop never sits between two executions;
* on the thread as well for a short batch that is not full when a request asks for it
  (:attr:`InferRequest.offload_execution`: gRPC's server admits one call per loop turn, so an
  inline batch would stop admission while it runs); a full batch was not limited by
  admission and stays inline.

Instances that keep their own threading (the python backend: :class:`ChainedInstance`) run
a batch and its followers themselves: a synchronous python model stays on the thread its
``initialize`` ran on, taking the next batch from the chain there. Plain execute functions
(:class:`AsyncInstance`) run on the loop, one batch per call. Ray-free.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from repo_adapter.backends.base import BatchChain, Execution, PreparedBatch, request_rows
from repo_adapter.inference_types import InferRequest

# Executions averaging under this run inline (seconds).
INLINE_MAX_EXECUTION_S = 0.01


@runtime_checkable
class ThreadedInstance(Protocol):
    """A backend instance the scheduler runs inline or on the instance's one thread
    (frameworks with thread-local state always see the same thread)."""

    thread: concurrent.futures.Executor
    max_batch_size: int

    @property
    def mean_execution_s(self) -> float | None:
        """The recent mean duration of an execution (None before the first one)."""

    def prepare(self, requests: list[InferRequest]) -> PreparedBatch:
        """Gather the batch's inputs (a failure is kept and raised by :meth:`run_prepared`)."""

    def run_prepared(self, requests: list[InferRequest], prepared: PreparedBatch) -> Execution:
        """Run the model on a prepared batch and split its outputs per request."""


@runtime_checkable
class ChainedInstance(Protocol):
    """A backend instance that decides where its batches run: it reports ``requests`` to
    ``chain`` and goes on with the chain's next batches while it has them."""

    async def run_batches(self, requests: list[InferRequest], chain: BatchChain) -> None: ...


class AsyncInstance(Protocol):
    """A backend instance that runs a batch on the event loop itself."""

    async def execute(self, requests: Sequence[InferRequest]) -> Execution: ...


ModelInstance = ThreadedInstance | ChainedInstance | AsyncInstance
# Runs a batch of requests and reports it (and, on a thread, its followers) to the chain.
RunBatch = Callable[[list[InferRequest], BatchChain], Awaitable[None]]


@dataclass(frozen=True)
class InstanceScheduler:
    """Runs an instance's batches where they belong and reports each to the batcher."""

    inline_max_execution_s: float = INLINE_MAX_EXECUTION_S

    def runner_for(self, instance: ModelInstance) -> RunBatch:
        """How ``instance`` runs a batch taken from ``chain`` (decided once per instance)."""
        if isinstance(instance, ThreadedInstance):
            return functools.partial(self.run_threaded, instance)
        if isinstance(instance, ChainedInstance):
            return instance.run_batches
        return functools.partial(_run_async, instance)

    async def run_threaded(
        self, instance: ThreadedInstance, requests: list[InferRequest], chain: BatchChain
    ) -> None:
        """Run ``requests`` inline or on the instance's thread; there, go on with
        ``chain``'s next batches while they belong on the thread."""
        if self.runs_inline(instance, requests):
            chain.finished(requests, _run_here(instance, requests))
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(instance.thread, self._run_chain, instance, requests, chain)

    def runs_inline(self, instance: ThreadedInstance, requests: list[InferRequest]) -> bool:
        mean = instance.mean_execution_s
        short = mean is not None and mean < self.inline_max_execution_s
        return short and not _offloaded(instance, requests)

    def _run_chain(
        self, instance: ThreadedInstance, requests: list[InferRequest], chain: BatchChain
    ) -> None:
        prepared = instance.prepare(requests)
        while requests:
            outcome = _run_here(instance, requests, prepared)
            # A short batch not marked for the thread belongs inline on the loop (a thread hop
            # costs more than it saves): the loop forms the next one then.
            following = [] if self.runs_inline(instance, requests) else list(chain.next_batch())
            # Handing a batch back wakes the event loop, which then holds the GIL for a while:
            # the next batch's inputs are gathered first, so the thread goes straight on to
            # the model, which releases the GIL while the loop answers.
            prepared = instance.prepare(following) if following else None
            chain.finished(requests, outcome)
            requests = following


def _run_here(
    instance: ThreadedInstance,
    requests: list[InferRequest],
    prepared: PreparedBatch | None = None,
) -> Execution | Exception:
    try:
        return instance.run_prepared(requests, prepared or instance.prepare(requests))
    except Exception as err:  # the batcher fails the batch with it
        return err


async def _run_async(
    instance: AsyncInstance, requests: list[InferRequest], chain: BatchChain
) -> None:
    try:
        outcome: Execution | Exception = await instance.execute(requests)
    except Exception as err:  # the batcher fails the batch with it
        outcome = err
    chain.finished(requests, outcome)


def _offloaded(instance: ThreadedInstance, requests: list[InferRequest]) -> bool:
    """Whether a short batch runs off the loop all the same: a request asks for it and the
    batch is not full, i.e. admission, not the model, is what limits it."""
    if not any(request.offload_execution for request in requests):
        return False
    limit = instance.max_batch_size
    return limit <= 0 or sum(request_rows(request) for request in requests) < limit
