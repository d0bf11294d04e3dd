"""What ``/metrics`` shows: every replica's model counters and custom metrics, the node's
CPU and GPU gauges and the response caches', as Triton's families.

Ray-free: :class:`MetricsCollector` gets an awaitable that returns one :class:`MetricsSnapshot`
per replica; the deployment (:mod:`deployments.apps.metrics_deployment`) gathers them over Serve.
Model counters are fetched at each scrape (so they match the statistics extension at that
moment); CPU and GPU gauges are sampled every ``metrics_interval_ms``, as Triton does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from cluster.memory_budget import BudgetUsage
from deployments.core.response_cache import CacheUsage
from deployments.metrics.cache_gauges import cache_families
from deployments.metrics.custom import custom_families, merge_custom
from deployments.metrics.exposition import Family, render
from deployments.metrics.families import LatencyOptions, merge_versions, model_families
from deployments.metrics.options import MetricsAppArgs
from deployments.metrics.replica_gauges import (
    ModelScaling,
    budget_families,
    replica_families,
    state_families,
)
from deployments.metrics.system import (
    CpuSampler,
    GpuSampler,
    cpu_families,
    gpu_families,
    memory_bytes,
)
from deployments.observability.statistics import VersionMetrics
from repo_adapter.live_repository import IndexEntry
from repo_adapter.python_backend.metrics import CustomFamily


@dataclass
class MetricsSnapshot:
    """One replica's metric counters: each served version's (see :meth:`deployments.core.
    model_slot.ModelSlot.metrics`) and its python models' own families (``collect_metrics``)."""

    versions: list[VersionMetrics] = field(default_factory=list)
    custom: list[CustomFamily] = field(default_factory=list)


ReplicaSnapshots = Callable[[], Awaitable[list[MetricsSnapshot]]]
# Every node's response cache (None: the server has no response cache).
CacheUsages = Callable[[], Awaitable[list[CacheUsage] | None]]
# Each served model's replicas (rayton_model_replicas*).
ModelScalings = Callable[[], Awaitable[list[ModelScaling]]]
# The memory budget of models loaded on demand (None: the server loads none on demand).
MemoryBudgets = Callable[[], Awaitable[BudgetUsage | None]]
# The repository index (rayton_model_state).
ModelStates = Callable[[], Awaitable[list[IndexEntry]]]


async def _no_cache() -> list[CacheUsage] | None:
    return None


async def _no_scaling() -> list[ModelScaling]:
    return []


async def _no_budget() -> BudgetUsage | None:
    return None


async def _no_states() -> list[IndexEntry]:
    return []


class MetricsCollector:
    """Builds the families of ``/metrics``; one per metrics endpoint."""

    def __init__(
        self,
        fetch: ReplicaSnapshots,
        args: MetricsAppArgs,
        caches: CacheUsages = _no_cache,
        scaling: ModelScalings = _no_scaling,
        budget: MemoryBudgets = _no_budget,
        states: ModelStates = _no_states,
    ) -> None:
        self._fetch = fetch
        self._caches = caches
        self._scaling = scaling
        self._budget = budget
        self._states = states
        self._latency = LatencyOptions(
            counter_latencies=args.setting("counter_latencies", True),
            summary_latencies=args.setting("summary_latencies", False),
            quantiles=args.quantiles(),
        )
        self._cpu = CpuSampler() if args.allow_cpu_metrics else None
        self._gpu = GpuSampler() if args.allow_gpu_metrics else None
        self._system: list[Family] = []
        self.sample_system()

    def sample_system(self) -> None:
        """Sample the per-interval gauges (call every ``metrics_interval_ms``)."""
        families: list[Family] = []
        if self._gpu is not None:
            samples = self._gpu.sample()
            if samples:
                families += gpu_families(samples)
        if self._cpu is not None:
            families += cpu_families(self._cpu.utilization(), memory_bytes())
        self._system = families

    async def snapshot(self) -> tuple[list[dict[str, Any]], list[CustomFamily]]:
        """(merged model versions, merged custom families) over every replica now."""
        replicas = await self._fetch()
        versions = merge_versions(v for replica in replicas for v in replica.versions)
        custom = merge_custom(replica.custom for replica in replicas)
        return versions, custom

    async def families(self) -> list[Family]:
        (versions, custom), caches, scaling, budget, states = await asyncio.gather(
            self.snapshot(), self._caches(), self._scaling(), self._budget(), self._states()
        )
        families = model_families(versions, self._latency) + custom_families(custom)
        families += self._system + ([] if caches is None else cache_families(caches))
        families += state_families(states) if states else []
        families += replica_families(scaling) if scaling else []
        return families + ([] if budget is None else budget_families(budget))

    async def text(self) -> str:
        """The ``/metrics`` page."""
        return render(await self.families())
