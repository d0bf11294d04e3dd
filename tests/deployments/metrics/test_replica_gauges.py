"""rayton's per-model replica families on /metrics."""

from __future__ import annotations

from deployments.metrics.exposition import render
from deployments.metrics.replica_gauges import ModelScaling, replica_families


def test_a_sample_per_model_of_the_gauge_and_both_counters():
    text = render(replica_families([ModelScaling("m", 0, 3, 4), ModelScaling("n", 2, 1, 0)]))
    assert "# TYPE rayton_model_replicas gauge" in text
    assert 'rayton_model_replicas{model="m"} 0' in text
    assert 'rayton_model_replicas{model="n"} 2' in text
    assert "# TYPE rayton_model_replicas_added counter" in text
    assert 'rayton_model_replicas_added{model="m"} 3' in text
    assert 'rayton_model_replicas_removed{model="m"} 4' in text
