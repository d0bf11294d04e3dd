"""Latency quantiles that add up over replicas: Triton's ``summary_latencies`` families.

Each replica counts its requests' durations in log-scale buckets (16 per power of two: a
quantile is known within about 2% of its value) per 12-second slot of the wall clock; a
quantile is read from the sum of every replica's last five slots, so, like Triton's summaries
(prometheus-cpp's 60 s window of 5 age buckets), it describes the last minute. Slots are wall
clock, so the replicas' slots line up when summed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

SLOT_S = 12.0
WINDOW_SLOTS = 5
_SUB_BUCKETS = 16  # per power of two


def bucket_of(value: float) -> int:
    """The bucket of a positive duration (anything up to 1 is bucket 0)."""
    if value <= 1.0:
        return 0
    mantissa, exponent = math.frexp(value)  # value = mantissa * 2**exponent, 0.5 <= m < 1
    return exponent * _SUB_BUCKETS + int((mantissa - 0.5) * 2 * _SUB_BUCKETS)


def bucket_value(bucket: int) -> float:
    """The middle of a bucket (what a quantile in it reads as)."""
    if bucket <= 0:
        return 1.0
    exponent, sub = divmod(bucket, _SUB_BUCKETS)
    low = (0.5 + sub / (2 * _SUB_BUCKETS)) * 2.0**exponent
    high = (0.5 + (sub + 1) / (2 * _SUB_BUCKETS)) * 2.0**exponent
    return (low + high) / 2


class WindowedSketch:
    """One replica's durations of one kind (request, queue, ...) over the recent slots."""

    def __init__(self) -> None:
        self._slots: dict[int, dict[int, int]] = {}

    def observe(self, value: float, now: float | None = None, count: int = 1) -> None:
        """Count ``count`` durations of ``value`` (the requests of one execution share its
        compute phases)."""
        slot = int((time.time() if now is None else now) // SLOT_S)
        buckets = self._slots.get(slot)
        if buckets is None:
            buckets = self._slots[slot] = {}
            for old in [s for s in self._slots if s <= slot - WINDOW_SLOTS]:
                del self._slots[old]
        key = bucket_of(value)
        buckets[key] = buckets.get(key, 0) + count

    def snapshot(self, now: float | None = None) -> dict[int, dict[int, int]]:
        """The slots still in the window: slot -> bucket -> count."""
        current = int((time.time() if now is None else now) // SLOT_S)
        return {s: dict(b) for s, b in self._slots.items() if s > current - WINDOW_SLOTS}


def merge_windows(
    snapshots: Iterable[dict[int, dict[int, int]]], now: float | None = None
) -> dict[int, int]:
    """Bucket counts of every snapshot's slots that are still in the window."""
    current = int((time.time() if now is None else now) // SLOT_S)
    total: dict[int, int] = {}
    for snapshot in snapshots:
        for slot, buckets in snapshot.items():
            if int(slot) <= current - WINDOW_SLOTS:
                continue
            for bucket, count in buckets.items():
                total[int(bucket)] = total.get(int(bucket), 0) + count
    return total


def quantile(buckets: dict[int, int], q: float) -> float:
    """The ``q`` quantile (0..1) of the counted durations; NaN when none (as Triton prints)."""
    count = sum(buckets.values())
    if not count:
        return math.nan
    rank = max(1, math.ceil(q * count))
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            return bucket_value(bucket)
    return bucket_value(max(buckets))
