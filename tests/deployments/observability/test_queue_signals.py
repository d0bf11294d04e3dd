"""A replica's queue signals for Serve's autoscaling, from successive metric snapshots."""

from __future__ import annotations

from cluster.queue_autoscaling import PENDING_METRIC, QUEUE_TIME_METRIC
from deployments.observability.queue_signals import QueueSignals


def snapshot(success: int, queue_ns: int, pending: int) -> dict:
    return {
        "model": "m",
        "version": "1",
        "success": success,
        "queue_ns": queue_ns,
        "pending": pending,
    }


def test_pending_now_and_the_mean_queue_time_since_the_last_reading():
    signals = QueueSignals()
    first = signals.read([snapshot(10, 20_000_000, 3)])
    assert first == {PENDING_METRIC: 3.0, QUEUE_TIME_METRIC: 2000.0}
    # 5 more finished, waiting 40 ms in all: 8 ms each
    assert signals.read([snapshot(15, 60_000_000, 0)])[QUEUE_TIME_METRIC] == 8000.0


def test_nothing_finished_means_no_queue_time_and_versions_add_up():
    signals = QueueSignals()
    signals.read([snapshot(4, 4_000_000, 0)])
    again = signals.read([snapshot(4, 4_000_000, 2), snapshot(0, 0, 5)])
    assert again == {PENDING_METRIC: 7.0, QUEUE_TIME_METRIC: 0.0}


def test_a_reloaded_model_starts_its_counts_over():
    signals = QueueSignals()
    signals.read([snapshot(100, 500_000_000, 0)])
    assert signals.read([snapshot(2, 6_000_000, 1)])[QUEUE_TIME_METRIC] == 3000.0
