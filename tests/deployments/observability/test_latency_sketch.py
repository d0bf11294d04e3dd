import math

import numpy as np
import pytest

from deployments.observability.latency_sketch import (
    SLOT_S,
    WindowedSketch,
    bucket_of,
    bucket_value,
    merge_windows,
    quantile,
)


@pytest.mark.parametrize("value", [1.5, 7.0, 100.0, 1234.5, 98765.0, 3.2e7])
def test_a_bucket_reads_back_within_about_two_percent(value):
    assert abs(bucket_value(bucket_of(value)) - value) / value < 0.022


def test_quantiles_of_replicas_summed_match_numpy_within_the_bucket_precision():
    rng = np.random.default_rng(0)
    values = rng.lognormal(mean=7.0, sigma=1.0, size=4000)  # microseconds
    now = 1_000_000.0
    replicas = [WindowedSketch(), WindowedSketch()]
    for i, value in enumerate(values):
        replicas[i % 2].observe(value, now)
    merged = merge_windows([r.snapshot(now) for r in replicas], now)
    assert sum(merged.values()) == len(values)
    for q in (0.5, 0.9, 0.99):
        expected = np.quantile(values, q)
        assert abs(quantile(merged, q) - expected) / expected < 0.05, q


def test_only_the_last_minute_counts():
    sketch = WindowedSketch()
    now = 1_000_000.0
    sketch.observe(10.0, now - 5 * SLOT_S)  # a minute ago: out of the window
    sketch.observe(1000.0, now)
    merged = merge_windows([sketch.snapshot(now)], now)
    assert sum(merged.values()) == 1
    assert math.isnan(quantile({}, 0.5))
