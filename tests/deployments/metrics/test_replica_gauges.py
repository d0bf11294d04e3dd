"""rayton's per-model replica families on /metrics."""

from __future__ import annotations

from cluster.memory_budget import BudgetUsage, ModelResidency
from deployments.metrics.exposition import render
from deployments.metrics.replica_gauges import (
    ModelScaling,
    budget_families,
    replica_families,
    state_families,
)


def test_a_sample_per_model_of_the_gauge_and_both_counters():
    text = render(replica_families([ModelScaling("m", 0, 3, 4), ModelScaling("n", 2, 1, 0)]))
    assert "# TYPE rayton_model_replicas gauge" in text
    assert 'rayton_model_replicas{model="m"} 0' in text
    assert 'rayton_model_replicas{model="n"} 2' in text
    assert "# TYPE rayton_model_replicas_added counter" in text
    assert 'rayton_model_replicas_added{model="m"} 3' in text
    assert 'rayton_model_replicas_removed{model="m"} 4' in text


def test_each_versions_state_is_one_of_tritons_states():
    index = [
        {"name": "m", "version": "1", "state": "READY"},
        {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "never"},  # listed, never loaded: no version, no state
    ]
    text = render(state_families(index))
    assert "# TYPE rayton_model_state gauge" in text
    assert 'rayton_model_state{model="m",version="1",state="READY"} 1' in text
    assert 'rayton_model_state{model="m",version="1",state="LOADING"} 0' in text
    assert 'rayton_model_state{model="m",version="2",state="UNAVAILABLE"} 1' in text
    assert 'rayton_model_state{model="never",version="",state="UNAVAILABLE"} 1' in text
    assert text.count("} 1") == 3 and text.count("rayton_model_state{") == 12


def test_a_gpu_budget_adds_its_gauges_and_each_gpu_models_bytes_on_its_gpu():
    usage = BudgetUsage(
        10**6,
        5 * 10**5,
        [
            ModelResidency("g", True, 10**5, 2, 1, "n1", "n1/gpu0", 7 * 10**8),
            ModelResidency("old", False, 10**5, 1, 1, "", "n1/gpu1", 0),
        ],
        10**9,
        7 * 10**8,
    )
    text = render(budget_families(usage))
    assert "rayton_memory_budget_bytes 1000000" in text
    assert "rayton_gpu_memory_budget_bytes 1000000000" in text
    assert "rayton_gpu_memory_budget_used_bytes 700000000" in text
    assert 'rayton_model_gpu_resident_bytes{model="g",gpu="n1/gpu0"} 700000000' in text
    assert 'rayton_model_gpu_resident_bytes{model="old"' not in text
    plain = render(budget_families(BudgetUsage(10**6, 0, [])))
    assert "rayton_gpu_memory_budget" not in plain
