"""Each served model's replica count as Serve runs it, and the scale-ups and scale-downs seen
between two looks: what ``/metrics`` shows of autoscaling (down to zero) and recycling.

The repository controller owns the :class:`ReplicaScaling` and looks every time it reads
Serve's status for failed replicas; the metrics deployment asks it for
:class:`ModelScaling` records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from deployments.metrics.replica_gauges import ModelScaling

RunningReplicas = Callable[[list[tuple[str, str]]], Awaitable[int]]


class ReplicaScaling:
    """The controller's record of its models' replica counts."""

    def __init__(self, running: RunningReplicas) -> None:
        self._running = running
        self._records: dict[str, ModelScaling] = {}

    async def look(self, served: dict[str, list[tuple[str, str]]]) -> None:
        """Read the running replicas of ``served`` (model -> the deployments holding it);
        models no longer served are forgotten."""
        records = {}
        for model, targets in served.items():
            replicas = await self._running(targets)
            before = self._records.get(model)
            if before is None:
                records[model] = ModelScaling(model, replicas, 0, 0)
                continue
            delta = replicas - before.replicas
            records[model] = ModelScaling(
                model,
                replicas,
                before.added + max(delta, 0),
                before.removed + max(-delta, 0),
            )
        self._records = records

    def records(self) -> list[ModelScaling]:
        return list(self._records.values())
