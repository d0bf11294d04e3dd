"""The requests a model instance has admitted but not yet executed, and Triton's batch formation.

This is the part of Triton's ``DynamicBatchScheduler::GetDynamicBatch`` that decides, when an
instance is free, which queued requests run together: arrival order within priority levels,
row budget, equal shapes on shape-sensitive inputs, preferred sizes, the queue delay and
per-request timeouts.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field

from deployments.core.batching.policy import BatchPolicy
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest

_sequence = itertools.count()


@dataclass(eq=False)
class PendingRequest:
    """A request waiting for execution, with everything batch formation needs."""

    request: InferRequest
    rows: int
    key: tuple
    arrival: float  # monotonic seconds
    level: int = 0
    deadline: float | None = None  # monotonic seconds; None = no timeout
    delay_on_timeout: bool = False
    future: asyncio.Future | None = None
    enqueued: bool = False
    seq: int = field(default_factory=lambda: next(_sequence))

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline


@dataclass
class BatchDecision:
    """What an idle instance should do: run ``batch`` now, or wait until ``wait_until``."""

    batch: list[PendingRequest]
    rejected: list[PendingRequest]
    wait_until: float | None = None


class PendingQueue:
    """Admitted requests, one FIFO per priority level (level 1 is served first)."""

    def __init__(self, policy: BatchPolicy) -> None:
        self.policy = policy
        self._levels: dict[int, deque[PendingRequest]] = {}
        self._delayed: deque[PendingRequest] = deque()  # timed out under the DELAY action
        self._rows = 0  # rows of every queued request
        # Queued rows from which a batch may be ready before its delay ends.
        ready_rows = [policy.max_rows, *policy.preferred_rows]
        self._ready_rows = min(rows for rows in ready_rows if rows > 0) if policy.max_rows else 1

    def __len__(self) -> int:
        return sum(len(q) for q in self._levels.values()) + len(self._delayed)

    def add(self, item: PendingRequest) -> bool:
        """Queue ``item``. Returns whether the next batch may now be ready earlier than it was
        before ``item`` came (an executor waiting on the delay should look again): the first
        request starts the delay, and so does anything that can close a batch early (enough
        rows, another shape or priority than the head's, a timeout of its own)."""
        policy = self.policy
        # The head is looked up only when the cheaper tests leave the answer open.
        head = None
        sooner = (
            not policy.batches_rows or policy.max_queue_delay_us == 0 or item.deadline is not None
        )
        if not sooner:
            head = self._head()
        self._levels.setdefault(item.level, deque()).append(item)
        self._rows += item.rows
        return (
            sooner
            or head is None
            or self._rows >= self._ready_rows
            or item.key != head.key
            or item.level != head.level
        )

    def _head(self) -> PendingRequest | None:
        for queue in self._ordered():
            if queue:
                return queue[0]
        return None

    def _ordered(self) -> list[deque[PendingRequest]]:
        return [self._levels[level] for level in sorted(self._levels)] + [self._delayed]

    def next_batch(self, now: float) -> BatchDecision:
        """Form the batch to execute now, following Triton's dynamic batcher."""
        rejected = self._expire(now)
        policy = self.policy
        if not policy.batches_rows:
            head = self._pop_first()
            return BatchDecision([head] if head else [], rejected)

        batch: list[PendingRequest] = []
        rows = 0
        preferred_cut = 0
        can_grow = True
        for queue in self._ordered():
            for item in queue:
                if batch and (item.key != batch[0].key or rows + item.rows > policy.max_rows):
                    can_grow = False
                    break
                batch.append(item)
                rows += item.rows
                if rows in policy.preferred_rows:
                    preferred_cut = len(batch)
            if not can_grow:
                break
        if not batch:
            return BatchDecision([], rejected)

        full = rows >= policy.max_rows or (
            policy.preferred_rows and rows >= policy.preferred_rows[-1]
        )
        oldest = min(item.arrival for item in batch)
        delay_s = policy.max_queue_delay_us / 1e6
        if preferred_cut and not full and now - oldest < delay_s:
            batch = batch[:preferred_cut]  # a preferred size is ready: send it now
        elif not (full or not can_grow or delay_s == 0 or now - oldest >= delay_s):
            return BatchDecision([], rejected, wait_until=self._wake_time(oldest + delay_s))
        self._remove(batch)
        return BatchDecision(batch, rejected)

    def _wake_time(self, delay_end: float) -> float:
        deadlines = [
            item.deadline
            for queue in self._ordered()
            for item in queue
            if item.deadline is not None and not item.delay_on_timeout
        ]
        return min([delay_end, *deadlines])

    def _pop_first(self) -> PendingRequest | None:
        for queue in self._ordered():
            if queue:
                item = queue.popleft()
                self._rows -= item.rows
                return item
        return None

    def _remove(self, batch: list[PendingRequest]) -> None:
        # Batches are always a prefix of the ordered queues, so popping from the left suffices.
        remaining = len(batch)
        self._rows -= sum(item.rows for item in batch)
        for queue in self._ordered():
            while remaining and queue:
                queue.popleft()
                remaining -= 1

    def _expire(self, now: float) -> list[PendingRequest]:
        """Remove timed-out requests: REJECT ones are returned, DELAY ones move to the back."""
        rejected: list[PendingRequest] = []
        for level, queue in self._levels.items():
            if not any(item.expired(now) for item in queue):
                continue
            kept: deque[PendingRequest] = deque()
            for item in queue:
                if not item.expired(now):
                    kept.append(item)
                elif item.delay_on_timeout:
                    item.deadline = None
                    self._delayed.append(item)
                else:
                    rejected.append(item)
                    self._rows -= item.rows
            self._levels[level] = kept
        return rejected

    def drain(self) -> list[PendingRequest]:
        """Remove and return everything (shutdown)."""
        items = [item for queue in self._ordered() for item in queue]
        self._levels.clear()
        self._delayed.clear()
        self._rows = 0
        return items


TIMEOUT_ERROR = "Request timeout expired"


def timeout_error() -> InferenceServerError:
    return InferenceServerError(TIMEOUT_ERROR, StatusCode.UNAVAILABLE)
