"""A replica's queue signals for Serve's autoscaling (:mod:`cluster.queue_autoscaling`).

Serve asks an autoscaled replica for its custom metrics a few times per look-back window
(``record_autoscaling_stats``). The answer is read from the same records as Triton's
statistics and metric families: the requests not yet executing now, and the mean time in
the queue of the requests that finished since the previous reading.
"""

from __future__ import annotations

from collections.abc import Sequence

from cluster.queue_autoscaling import PENDING_METRIC, QUEUE_TIME_METRIC
from deployments.observability.statistics import VersionMetrics


class QueueSignals:
    """Reads the signals from successive metric snapshots of one replica's models."""

    def __init__(self) -> None:
        self._queue_ns = 0
        self._finished = 0

    def read(self, versions: Sequence[VersionMetrics]) -> dict[str, float]:
        """Serve's custom autoscaling metrics (its hook takes a name -> number mapping)."""
        queue_ns = sum(v["queue_ns"] for v in versions)
        finished = sum(v["success"] for v in versions)
        if finished < self._finished or queue_ns < self._queue_ns:  # a reload started over
            self._queue_ns = self._finished = 0
        new = finished - self._finished
        queue_time_us = (queue_ns - self._queue_ns) / new / 1000 if new else 0.0
        self._queue_ns, self._finished = queue_ns, finished
        return {
            PENDING_METRIC: float(sum(v.get("pending", 0) for v in versions)),
            QUEUE_TIME_METRIC: queue_time_us,
        }
