"""Linear sweep and binary search over load levels (perf_analyzer's search modes)."""

from __future__ import annotations

from collections.abc import Callable

from rayton_perf.sweep import Sweep, binary_sweep, linear_sweep


def _drive(sweep: Sweep, meets: Callable[[float], bool]) -> list[float]:
    """The levels a sweep asks for when ``meets`` says which pass the latency limit."""
    visited = [next(sweep)]
    while True:
        try:
            visited.append(sweep.send(meets(visited[-1])))
        except StopIteration:
            return visited


def test_linear_sweep_stops_after_first_miss():
    assert _drive(linear_sweep([1, 2, 3, 4]), lambda level: True) == [1, 2, 3, 4]
    assert _drive(linear_sweep([1, 2, 3, 4]), lambda level: level < 3) == [1, 2, 3]
    assert _drive(linear_sweep([5]), lambda level: False) == [5]


def test_binary_search_halves_towards_the_limit():
    # Levels up to 5 meet the limit: start, end, then halves in integers (size_t).
    assert _drive(binary_sweep(1, 16, 1), lambda level: level <= 5) == [1, 16, 8, 4, 6, 5]
    # A wider step stops earlier.
    assert _drive(binary_sweep(1, 16, 4), lambda level: level <= 5) == [1, 16, 8, 4]


def test_binary_search_ends_early_like_perf_analyzer():
    assert _drive(binary_sweep(4, 64, 1), lambda level: False) == [4]  # start misses
    assert _drive(binary_sweep(4, 64, 1), lambda level: True) == [4, 64]  # end meets
    assert _drive(binary_sweep(8, 8, 1), lambda level: True) == [8]  # one level, once


def test_binary_search_on_request_rates_uses_floats():
    visited = _drive(binary_sweep(10.0, 20.0, 2.0), lambda level: level <= 13)
    assert visited == [10.0, 20.0, 15.0, 12.5, 13.75]
