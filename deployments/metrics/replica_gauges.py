"""rayton's per-model replica families, beyond Triton: how many replicas serve each model
now, and how many were added and removed since it was served (autoscaling, scale to zero,
recycling), as the repository controller saw them in Serve's status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deployments.metrics.exposition import Family


@dataclass(frozen=True)
class ModelScaling:
    """One model's replicas now, and the replicas added and removed since it was served."""

    model: str
    replicas: int
    added: int
    removed: int


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
