"""The control surface of every rayton replica, written once and composed into each deployment.

The repository controller and the metrics deployment ask every replica the same things
(:class:`~deployments.apps.replica_api.ReplicaControlApi`): follow these log and trace
settings, say where you run and what you hold, hand over your metric counters. A deployment
class holds a :class:`ReplicaControl` built from what it serves and inherits
:class:`ControlledReplica`, whose methods Serve exposes and which answer from that component.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from deployments.apps.log_control import adopt_log_settings
from deployments.apps.log_control import apply_in_this_replica as apply_log_table
from deployments.apps.replica_info import replica_info
from deployments.apps.shared_memory_access import replica_regions
from deployments.apps.trace_control import adopt_trace_settings
from deployments.apps.trace_control import apply_in_this_replica as apply_trace_plan
from deployments.metrics.collector import MetricsSnapshot
from deployments.observability.log_settings import LogSettings
from deployments.observability.statistics import VersionMetrics
from deployments.observability.status import ReplicaInfo
from deployments.observability.trace_settings import TracePlan
from deployments.observability.tracing import TRACER
from repo_adapter.python_backend import collect_metrics

MetricsOf = Callable[[], list[VersionMetrics]]


def _no_metrics() -> list[VersionMetrics]:
    return []


class ReplicaControl:
    """One replica's answers to the control plane.

    ``held_models()`` names the models this replica holds (for ``rayton status``);
    ``version_metrics()`` returns their per-version counters; ``traces``: whether this replica
    runs models and so follows the trace settings (the front deployments only log);
    ``ingress_address()`` where the replica's own HTTP port listens ("": none).
    """

    def __init__(
        self,
        held_models: Callable[[], list[str]],
        version_metrics: MetricsOf = _no_metrics,
        traces: bool = True,
        ingress_address: Callable[[], str] = str,
    ) -> None:
        self._held_models = held_models
        self._ingress_address = ingress_address
        self._version_metrics = version_metrics
        self._traces = traces
        self._adopting: asyncio.Task | None = None

    def adopt_controller_settings(self) -> None:
        """A starting replica takes the controller's settings (in the background: the
        controller may itself be starting)."""
        if self._adopting is None:
            adopt = [adopt_log_settings(), *([adopt_trace_settings()] if self._traces else [])]
            self._adopting = asyncio.get_running_loop().create_task(_gather(adopt))

    def apply_log_settings(self, settings: LogSettings) -> None:
        apply_log_table(settings)

    def apply_trace_settings(self, plan: TracePlan) -> None:
        apply_trace_plan(plan)

    def replica_info(self) -> ReplicaInfo:
        return replica_info(self._held_models(), self._ingress_address())

    def metrics_snapshot(self) -> MetricsSnapshot:
        return MetricsSnapshot(self._version_metrics(), collect_metrics())

    def forget_regions(self, names: list[str]) -> None:
        replica_regions().forget(names)

    async def close(self) -> None:
        """Ship the traces still buffered (a replica stopping)."""
        if self._traces:
            await TRACER.flush()


async def _gather(adopting: list) -> None:
    await asyncio.gather(*adopting)


class ControlledReplica:
    """The :class:`~deployments.apps.replica_api.ReplicaControlApi` methods of a deployment
    class, answered by its ``control``."""

    control: ReplicaControl

    def apply_log_settings(self, settings: LogSettings) -> None:
        """Triton's log settings, from the controller."""
        self.control.apply_log_settings(settings)

    def apply_trace_settings(self, plan: TracePlan) -> None:
        """Triton's trace settings, from the controller."""
        self.control.apply_trace_settings(plan)

    def replica_info(self) -> ReplicaInfo:
        """Where this replica runs and the models it holds (for ``rayton status``)."""
        return self.control.replica_info()

    def metrics_snapshot(self) -> MetricsSnapshot:
        """This replica's metric counters and its python models' own metrics."""
        return self.control.metrics_snapshot()

    def forget_regions(self, names: list[str]) -> None:
        """Stop using these shared-memory regions (the client unregistered them)."""
        self.control.forget_regions(names)
