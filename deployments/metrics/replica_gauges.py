"""rayton's per-model families, beyond Triton: each model version's state in the repository
index; how many replicas serve each model now, and how many were added and removed since it
was served (autoscaling, scale to zero, recycling), as the repository controller saw them in
Serve's status; and, where models load on demand, the memory budget and each model's
residency, loads and evictions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cluster.memory_budget import BudgetUsage
from deployments.metrics.exposition import Family
from repo_adapter.live_repository import IndexEntry

# Triton's model states, as the repository index names them.
MODEL_STATES = ("READY", "LOADING", "UNLOADING", "UNAVAILABLE")


@dataclass(frozen=True)
class ModelScaling:
    """One model's replicas now, and the replicas added and removed since it was served."""

    model: str
    replicas: int
    added: int
    removed: int


def state_families(index: Sequence[IndexEntry]) -> list[Family]:
    """``rayton_model_state``: per model version of the index, 1 for the state it is in and 0
    for the others (a model never loaded has no version: version "", UNAVAILABLE)."""
    state = Family(
        "rayton_model_state",
        "gauge",
        "Whether the model version is in the state named (1) or not (0), as the index shows it",
    )
    for entry in index:
        now = entry.get("state", "UNAVAILABLE")
        for name in MODEL_STATES:
            labels = {"model": entry["name"], "version": entry.get("version", ""), "state": name}
            state.add(labels, 1 if name == now else 0)
    return [state]


def replica_families(records: Sequence[ModelScaling]) -> list[Family]:
    """The gauge and the two counters, a sample per served model."""
    replicas = Family("rayton_model_replicas", "gauge", "Number of replicas serving the model")
    added = Family(
        "rayton_model_replicas_added", "counter", "Number of replicas the model scaled up by"
    )
    removed = Family(
        "rayton_model_replicas_removed", "counter", "Number of replicas the model scaled down by"
    )
    for record in records:
        labels = {"model": record.model}
        replicas.add(labels, record.replicas)
        added.add(labels, record.added)
        removed.add(labels, record.removed)
    return [replicas, added, removed]


def budget_families(usage: BudgetUsage) -> list[Family]:
    """The budget and its use (gauges), and per model loaded on demand: the bytes it takes
    now (0: not resident), its loads and its evictions (counters)."""
    capacity = Family(
        "rayton_memory_budget_bytes", "gauge", "Memory budget of the models loaded on demand"
    )
    used = Family("rayton_memory_budget_used_bytes", "gauge", "Memory the models loaded now take")
    resident = Family(
        "rayton_model_resident_bytes", "gauge", "Memory the model takes (0: not loaded)"
    )
    loads = Family(
        "rayton_model_loads_on_demand", "counter", "Number of times the model loaded on demand"
    )
    evictions = Family(
        "rayton_model_evictions",
        "counter",
        "Number of times the model was unloaded for the memory budget",
    )
    if usage.capacity_bytes:
        capacity.add({}, usage.capacity_bytes)
    used.add({}, usage.used_bytes)
    for model in usage.models:
        labels = {"model": model.model}
        resident.add(labels, model.footprint_bytes if model.resident else 0)
        loads.add(labels, model.loads)
        evictions.add(labels, model.evictions)
    families = [used, resident, loads, evictions]
    if usage.capacity_bytes:
        families.insert(0, capacity)
    if usage.gpu_capacity_bytes:
        families += _gpu_budget_families(usage)
    return families


def _gpu_budget_families(usage: BudgetUsage) -> list[Family]:
    """The GPU budget (per GPU), what GPU models take on all GPUs, and each resident GPU
    model's bytes on its GPU (``gpu``: ``<node id>/gpu<i>``)."""
    capacity = Family("rayton_gpu_memory_budget_bytes", "gauge", "GPU memory budget of each GPU")
    used = Family(
        "rayton_gpu_memory_budget_used_bytes", "gauge", "GPU memory the models loaded now take"
    )
    resident = Family(
        "rayton_model_gpu_resident_bytes", "gauge", "GPU memory the model takes on its GPU"
    )
    capacity.add({}, usage.gpu_capacity_bytes)
    used.add({}, usage.gpu_used_bytes)
    for model in usage.models:
        if model.resident and model.gpu:
            resident.add({"model": model.model, "gpu": model.gpu}, model.gpu_bytes)
    return [capacity, used, resident]
