"""Models loaded on their first request, within a memory budget (``--load-on-demand``,
``--memory-budget``): the repository controller's part.

A request for a model that is in the repository but not loaded asks the controller for it
(:meth:`OnDemandLoads.ensure_loaded`) and waits, up to ``--load-on-demand-timeout-secs``. The
requests that arrive while a load runs are loaded together next, as one change of the
repository. Before a load, each new model is given a node (the head for the shared host's
models, the worker with the most room for the others: :mod:`cluster.memory_budget`), and the
least recently used idle models there are unloaded until it fits; models with requests in
flight are waited for, never unloaded. After it, each node's budget is checked again with
what the replicas measured.

A model whose load failed is not tried again for each request: it answers its load error until
its files change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from cluster.memory_budget import (
    BudgetNode,
    BudgetUsage,
    ModelResidency,
    Resident,
    budget_nodes,
    node_for,
    plan_evictions,
)
from cluster.placement import ModelPlacement, placement_for
from cluster.resources import live_nodes
from deployments.apps.model_homes import ModelHomes
from deployments.core.model_slot import SlotStatus
from repo_adapter.ensemble import member_names
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.live_repository import UNLOADING, LiveRepository

logger = logging.getLogger(__name__)

# How often a load waiting for busy models to finish looks at them again
_BUSY_POLL_S = 0.1


class OnDemandLoads:
    """Loads on demand and unloads least recently used models to fit the budget."""

    def __init__(
        self,
        repository: LiveRepository,
        homes: ModelHomes,
        changes: asyncio.Lock,
        load: Callable[[list[str]], Awaitable[None]],
        unload: Callable[[str], Awaitable[None]],
        budget: str | None,
        timeout_s: float,
        head_node: str = "",
        nodes: Callable[[], list[tuple[str, dict[str, float]]]] = live_nodes,
    ) -> None:
        """``load`` and ``unload`` apply a change of the repository (the caller holds
        ``changes``, the lock of every change); ``budget`` is ``--memory-budget`` (None:
        models load on demand and stay); ``head_node`` the node id of the head, where the
        shared host runs; ``nodes`` lists the live nodes (id, resources)."""
        self.repository = repository
        self.homes = homes
        self._changes = changes
        self._load = load
        self._unload = unload
        self._budget = budget
        self.timeout_s = timeout_s
        self.head_node = head_node
        self._live_nodes = nodes
        self._node_of: dict[str, str] = {}  # model -> the node whose budget it counts against
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._failed: dict[str, str] = {}  # model -> fingerprint of the files that failed
        self._per_replica: dict[str, int] = {}  # model -> bytes one replica took last time
        self._files_size: dict[str, tuple[str, int]] = {}  # model -> (generation, bytes)
        self._loaded_at: dict[str, float] = {}  # model -> wall time it loaded
        self._loads: dict[str, int] = {}
        self._evictions: dict[str, int] = {}
        self._busy: list[str] = []  # models the load running now waits for (the budget)
        self._task = asyncio.get_event_loop().create_task(self._run())

    # ------------------------------------------------------------------ requests

    async def ensure_loaded(self, name: str) -> bool:
        """Return once ``name`` serves, loading it (and what it needs) first; whether it
        serves (False: its load failed).

        Returns False without loading a model whose last load failed and whose files did not
        change since: the caller answers its load error.

        Raises:
            InferenceServerError: NOT_FOUND for a model the repository does not have;
                UNAVAILABLE when it did not load within the timeout (its load goes on).
        """
        if self._serves(name):
            return True
        if name not in self.repository.records and name not in self.repository.model_names():
            raise InferenceServerError(
                f"Request for unknown model: '{name}' is not found", StatusCode.NOT_FOUND
            )
        failed = self._failed.get(name)
        if failed is not None:
            if failed == await asyncio.to_thread(self.repository.fingerprint, name):
                return False
            del self._failed[name]
        future = self._pending.get(name)
        if future is None:
            future = self._pending[name] = asyncio.get_running_loop().create_future()
            future.add_done_callback(_retrieved)
            self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except asyncio.TimeoutError:
            why = (
                f": the memory budget has no room until {', '.join(self._busy)} finish their "
                "requests"
                if self._busy
                else "; its load goes on"
            )
            raise InferenceServerError(
                f"model '{name}' is loading on demand and was not ready within "
                f"{self.timeout_s:g} s (--load-on-demand-timeout-secs){why}",
                StatusCode.UNAVAILABLE,
            ) from None
        return self._serves(name)

    def _serves(self, name: str) -> bool:
        """Whether ``name`` serves and goes on serving (not being unloaded)."""
        record = self.repository.records.get(name)
        return record is not None and record.served is not None and record.pending is not UNLOADING

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = dict(self._pending)
            error: InferenceServerError | None = None
            try:
                async with self._changes:
                    await self._load_batch([n for n in batch if not self._serves(n)])
            except InferenceServerError as err:
                error = err
            except Exception as err:  # a bug: answer it rather than leave requests waiting
                logger.exception("loading %s on demand failed", sorted(batch))
                error = InferenceServerError(
                    f"loading on demand failed: {type(err).__name__}: {err}", StatusCode.INTERNAL
                )
            for name, future in batch.items():
                self._pending.pop(name, None)
                if future.done():
                    continue
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(None)

    async def _load_batch(self, names: list[str]) -> None:
        if not names:
            return
        began = time.monotonic()
        evict = await self._make_room(names) if self._budget is not None else []
        room_at = time.monotonic()
        # The evicted models' unloads and the new loads are sent together (the shared host
        # gets one hosted set with both): an evicted model's memory is freed while the new
        # ones load, instead of a wait for each in turn.
        await asyncio.gather(self._evict(evict), self._load(names))
        now = time.time()
        logger.info(
            "loaded on demand: %s in %.2f s (%.2f s finding room; evicted %s)",
            ", ".join(names),
            time.monotonic() - began,
            room_at - began,
            ", ".join(evict) or "none",
        )
        for name in names:
            if self._serves(name):
                self._loads[name] = self._loads.get(name, 0) + 1
                self._loaded_at[name] = now
            else:
                fingerprint = await asyncio.to_thread(self.repository.fingerprint, name)
                self._failed[name] = fingerprint
        if self._budget is not None:  # measured footprints may exceed the estimates
            residents = await self._residents(set(names))
            for node in await self._budget_nodes():
                here = [r for r in residents if r.node == node.node_id]
                await self._evict(plan_evictions(here, 0, node.capacity).evict)

    # ------------------------------------------------------------------ the budget

    async def _budget_nodes(self) -> list[BudgetNode]:
        assert self._budget is not None
        return budget_nodes(self._budget, await asyncio.to_thread(self._live_nodes))

    async def _capacity_bytes(self) -> int:
        """The smallest node's budget (what ``usage`` reports)."""
        nodes = await self._budget_nodes()
        return min((node.capacity for node in nodes), default=0)

    async def _make_room(self, names: list[str]) -> list[str]:
        """Pick each model's node and the least recently used idle models to unload there so
        ``names`` fit, once the busy ones that must go finished (waited for within the
        timeout)."""
        nodes = await self._budget_nodes()
        capacity = {node.node_id: node.capacity for node in nodes}
        residents = await self._residents(set(names))
        used: dict[str, int] = {}
        for resident in residents:
            used[resident.node] = used.get(resident.node, 0) + resident.footprint
        needed: dict[str, int] = {}
        for name in names:
            for model, size, hosted in await self._wanted(name, set()):
                room = {n: used.get(n, 0) + needed.get(n, 0) for n in capacity}
                chosen = node_for(nodes, room)
                node = self.head_node if hosted or chosen is None else chosen.node_id
                self._node_of[model] = node
                needed[node] = needed.get(node, 0) + size
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                plans = [
                    plan_evictions(
                        [r for r in residents if r.node == node],
                        size,
                        capacity.get(node, 0),
                    )
                    for node, size in needed.items()
                ]
                busy = [name for plan in plans for name in plan.busy]
                if not busy:
                    return [name for plan in plans for name in plan.evict]
                self._busy = busy
                if time.monotonic() > deadline:
                    raise InferenceServerError(
                        f"the memory budget has no room for {', '.join(sorted(names))}: "
                        f"models {', '.join(busy)} would have to be unloaded, and their "
                        f"requests did not finish within {self.timeout_s:g} s",
                        StatusCode.UNAVAILABLE,
                    )
                await asyncio.sleep(_BUSY_POLL_S)
                residents = await self._residents(set(names))
        finally:
            self._busy = []

    def node_of(self, name: str) -> str | None:
        """The node a model loading now was given (None: no budget, or Serve's choice)."""
        return self._node_of.get(name) if self._budget is not None else None

    async def _evict(self, names: list[str]) -> None:
        if not names:
            return
        logger.info("unloading %s: least recently used, for the memory budget", names)
        await asyncio.gather(*(self._unload(name) for name in names))
        for name in names:
            self._evictions[name] = self._evictions.get(name, 0) + 1
            self._node_of.pop(name, None)

    async def _wanted(self, name: str, seen: set[str]) -> list[tuple[str, int, bool]]:
        """The models a load of ``name`` brings (it, and an ensemble's members not served):
        each with the bytes it will take (its declared footprint, else what it took last
        time, else the size of its files) and whether the shared host will hold it."""
        if self._serves(name) or name in seen:
            return []
        seen.add(name)
        try:
            scan = await asyncio.to_thread(self.repository.scan, name)
        except InferenceServerError:
            return []  # its load fails and says why
        if not scan.available:
            return []
        if scan.is_ensemble:
            members = []
            for member in member_names(scan.config):
                members += await self._wanted(member, seen)
            return members
        try:
            placement = placement_for(scan.config)
        except ValueError:
            return []  # its load fails and says why
        hosted = self.homes.home_for(placement) is self.homes.host
        # A hosted model is in each of the host's replicas; another has replicas of its own.
        replicas = self.homes.host.replicas if hosted else _replicas(placement)
        if placement.footprint is not None:
            return [(name, placement.footprint * replicas, hosted)]
        size = self._per_replica.get(name) or await asyncio.to_thread(_files_bytes, scan.path)
        return [(name, size * replicas, hosted)]

    async def _residents(self, requested: set[str]) -> list[Resident]:
        """Every loaded model with its footprint, last use and requests in flight; those
        requested now and the members of loaded ensembles pinned."""
        served = [self.repository.records[n] for n in self.repository.served_names()]
        pinned = set(requested)
        for record in served:
            if record.served is not None and record.served.is_ensemble:
                pinned.update(self.repository.uses_of(record.name))
        singles = [r for r in served if r.served is not None and not r.served.is_ensemble]
        statuses = await asyncio.gather(*(self._statuses(r.name) for r in singles))
        residents = []
        for record, replicas in zip(singles, statuses, strict=True):
            name = record.name
            residents.append(
                Resident(
                    name,
                    self._footprint(name, replicas),
                    max((s.last_used for s in replicas), default=0.0)
                    or self._loaded_at.get(name, 0.0),
                    sum(s.in_flight for s in replicas),
                    name in pinned,
                    self._node_of.get(name, self.head_node),
                )
            )
        return residents

    async def _statuses(self, name: str) -> list[SlotStatus]:
        home = self.homes.home_of(name)
        if home is None:
            return []
        return [s for s in await home.replica_statuses(name) if s is not None]

    def _footprint(self, name: str, replicas: list[SlotStatus]) -> int:
        """The bytes a loaded model takes over its replicas: declared per replica, else
        measured by each, at least the size of its files per replica."""
        home = self.homes.home_of(name)
        placement = home.placement_of(name) if home is not None else None
        count = max(len(replicas), 1)
        if placement is not None and placement.footprint is not None:
            return placement.footprint * count
        files = self._served_files_bytes(name)
        measured = sum(max(s.footprint_bytes, files) for s in replicas) or files
        self._per_replica[name] = measured // count
        return measured

    def _served_files_bytes(self, name: str) -> int:
        """The size of the served model's files, walked once per loaded generation: the
        budget reads footprints on every plan and scrape."""
        record = self.repository.records[name]
        if record.served is None:
            return 0
        cached = self._files_size.get(name)
        if cached is not None and cached[0] == record.generation:
            return cached[1]
        size = _files_bytes(record.served.path)
        self._files_size[name] = (record.generation, size)
        return size

    # ------------------------------------------------------------------ views

    async def usage(self) -> BudgetUsage:
        """The budget, what the loaded models take, and each model loaded on demand."""
        residents = {r.name: r for r in await self._residents(set())}
        capacity = await self._capacity_bytes() if self._budget is not None else 0
        models = [
            ModelResidency(
                name,
                name in residents,
                residents[name].footprint if name in residents else self._per_replica.get(name, 0),
                self._loads.get(name, 0),
                self._evictions.get(name, 0),
                residents[name].node if name in residents else "",
            )
            for name in sorted(set(self._loads) | set(residents))
        ]
        return BudgetUsage(capacity, sum(r.footprint for r in residents.values()), models)

    def close(self) -> None:
        self._task.cancel()


def _retrieved(future: asyncio.Future[None]) -> None:
    """Mark a load's failure seen even when every request waiting for it timed out."""
    if not future.cancelled():
        future.exception()


def _files_bytes(path: Path) -> int:
    """The size of the files under a model's directory."""
    total = 0
    try:
        for file in path.rglob("*"):
            if file.is_file() and "__pycache__" not in file.parts:
                total += file.stat().st_size
    except OSError:
        pass
    return total


def _replicas(placement: ModelPlacement) -> int:
    return max(sum(group.num_replicas for group in placement.groups), 1)
