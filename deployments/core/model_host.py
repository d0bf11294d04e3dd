"""Many models in one process, each in its own :class:`ModelSlot`, Ray-free.

A Serve replica costs ~150 MB before it loads anything (Ray's worker and Serve's replica), so a
zoo of small CPU models served one process per instance needs gigabytes that Triton, which
holds such a zoo in one process, does not. A *model host* is that one process: the shared host
deployment (:mod:`deployments.apps.host_deployment`) keeps one :class:`ModelHost` per replica.
Each model still has its own versions, instances, batcher and statistics; adding, reloading
or removing one model never touches the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from deployments.core.model_slot import BuildModel, ModelSlot, SlotStatus
from deployments.observability.statistics import VersionMetrics
from repo_adapter.request_validation import model_not_found

logger = logging.getLogger(__name__)

HostedModels = Mapping[str, tuple[str, BuildModel]]  # model -> (generation, how to build it)


@dataclass(frozen=True)
class HostedSet:
    """What a host's replicas are to serve, as its owner (the repository controller) sends it:
    each model's entry by name (the shared host's format: ``hosted_entry``). ``revision``
    orders the sets (wall-clock ns, so a restarted owner's come later): a replica ignores a
    set older than the one it applied, whichever arrives last."""

    revision: int
    models: dict[str, dict[str, Any]] = field(default_factory=dict)


class ModelHost:
    """The models one process hosts, by name."""

    def __init__(self) -> None:
        self.slots: dict[str, ModelSlot] = {}
        self._tasks: set[asyncio.Task] = set()

    async def apply(
        self, wanted: HostedModels, wait: bool = False, measured: Set[str] = frozenset()
    ) -> None:
        """Host exactly ``wanted``: load new models, reload changed ones, remove the rest.

        ``wait`` awaits every first load (a replica starting up); otherwise loads run in the
        background and the models already hosted keep serving meanwhile. The loads of
        ``measured`` models measure the memory they add (:class:`SlotStatus`).
        """
        for name in [n for n in self.slots if n not in wanted]:
            self._background(self._remove(name, self.slots.pop(name)))
        loads = []
        for name, (generation, build) in wanted.items():
            slot = self.slots.get(name)
            if slot is None:
                slot = self.slots[name] = ModelSlot(name)
            loads.append(slot.load(generation, build, name in measured))
        if wait:
            await asyncio.gather(*loads)
        else:
            for load in loads:
                self._background(load)

    def _background(self, coroutine) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove(self, name: str, slot: ModelSlot) -> None:
        await slot.drain()
        await slot.close()
        logger.info("model '%s' is no longer hosted here", name)

    def slot(self, name: str) -> ModelSlot:
        """The slot of ``name``; Triton's NOT_FOUND when this host does not have it."""
        slot = self.slots.get(name)
        if slot is None:
            raise model_not_found(name)
        return slot

    def statuses(self) -> dict[str, SlotStatus]:
        return {name: slot.status() for name, slot in self.slots.items()}

    def metrics(self) -> list[VersionMetrics]:
        """Every hosted model's metric counters in this process."""
        return [entry for slot in self.slots.values() for entry in slot.metrics()]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for slot in self.slots.values():
            await slot.close()  # closing swallows the models' own errors
        self.slots.clear()
