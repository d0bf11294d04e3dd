"""The order load levels are measured in: perf_analyzer's linear and binary search.

A sweep is a generator: it yields the next level, is sent back whether that level met the
latency limit (``-l``), and returns when the search is over.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

Sweep = Generator[float, bool, None]


def linear_sweep(levels: Sequence[float]) -> Sweep:
    """Every level in order, ending after the first that misses the limit (perf_analyzer's
    linear search; with no limit every level meets it)."""
    for level in levels:
        met = yield level
        if not met:
            return


def binary_sweep(start: float, end: float, step: float) -> Sweep:
    """perf_analyzer's binary search for the highest level within the limit.

    Measures ``start`` (stop if it misses), then ``end`` (stop if it meets), then halves
    the bracket until it is no wider than ``step``. Concurrency levels halve in integers,
    as perf_analyzer's ``size_t`` arithmetic does.
    """
    if not (yield start) or end == start:
        return
    if (yield end):
        return
    low, high = start, end
    while high - low > step:
        middle = _midpoint(low, high)
        if (yield middle):
            low = middle
        else:
            high = middle


def _midpoint(low: float, high: float) -> float:
    if isinstance(low, int) and isinstance(high, int):
        return (low + high) // 2
    return round((low + high) / 2, 9)
