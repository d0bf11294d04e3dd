"""``@serve.batch`` as the admission stage of rayton's dynamic batcher.

Admission counts rows with ``batch_size_fn``, closes a batch at ``max_batch_size`` rows or after
``max_queue_delay_microseconds``, and hands what it admitted to the batcher's pending queue.
Going through ``@serve.batch`` puts each model version's batch metrics on the Ray dashboard
(tagged ``rayton_batch_<model>_<version>``). It needs a replica context, so it lives here in
the Serve wiring; the batcher itself (:mod:`deployments.core.batching`) is Ray-free.
"""

from __future__ import annotations

import inspect

from ray import serve

from deployments.core.batching.batcher import Admit, Enqueue
from deployments.core.batching.policy import BatchPolicy
from deployments.core.batching.queue import PendingRequest


def _total_rows(items: list[PendingRequest]) -> int:
    return sum(item.rows for item in items)


def serve_batch_admission(name: str, policy: BatchPolicy, enqueue: Enqueue) -> Admit:
    """An ``AdmissionFactory`` on ``@serve.batch`` (call it inside a Serve replica)."""

    async def admit(items: list[PendingRequest]) -> list[None]:
        enqueue(items)
        return [None] * len(items)

    # The function name tags Serve's batch metrics on the dashboard.
    admit.__name__ = admit.__qualname__ = f"rayton_batch_{name}"
    # @serve.batch validates each call's arguments against inspect.signature(admit), which
    # builds the signature anew unless the function carries one (BENCHMARKS.md, tuning).
    admit.__signature__ = inspect.signature(admit)
    return serve.batch(
        max_batch_size=policy.max_rows,
        batch_wait_timeout_s=policy.max_queue_delay_us / 1e6,
        max_concurrent_batches=1,
        batch_size_fn=_total_rows,
    )(admit)
