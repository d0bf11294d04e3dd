"""Models loaded on their first request, within a memory budget (``--load-on-demand``,
``--memory-budget``): the repository controller's part.

A request for a model that is in the repository but not loaded asks the controller for it
(:meth:`OnDemandLoads.ensure_loaded`) and waits, up to ``--load-on-demand-timeout-secs``. The
requests that arrive while a load runs are loaded together next, as one change of the
repository. Before a load, each new model is given a node (the head for the shared host's
models, the worker with the most room for the others: :mod:`cluster.memory_budget`), and the
least recently used idle models there are unloaded until it fits; models with requests in
flight are waited for, never unloaded. After it, each node's budget is checked again with
what the replicas measured. Under a GPU budget (``--gpu-memory-budget``) each GPU model is
given one GPU the same way, and the least recently used idle GPU models there make room.

A model whose load failed is not tried again for each request: it answers its load error until
its files change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from pathlib import Path

from cluster.memory_budget import (
    GPU_FOOTPRINT_PARAMETER,
    BudgetNode,
    BudgetUsage,
    GpuSlot,
    ModelResidency,
    Resident,
    budget_nodes,
    declared_footprint,
    gpu_budget_bytes,
    gpu_instances,
    gpu_slots,
    node_for,
    on_one_gpu,
    plan_evictions,
    slot_for,
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
_NO_GPU_SLOTS = (
    "--gpu-memory-budget gives GPU models the GPUs nodes declare by their rayton_gpu_<i> "
    "resources, and no live node declares one ('rayton cluster' does; on your own nodes: "
    "ray start --resources '{\"rayton_gpu_0\": 1}' for each GPU)"
)


class LoadCause(Enum):
    """Why a load runs (its value: what the log says). Only loads on demand are counted."""

    ON_DEMAND = "on demand"
    START_UP = "at start-up"
    REPOSITORY_API = "by the repository API"


@dataclass(frozen=True)
class GpuPlace:
    """Where the GPU budget put a GPU model: its GPU, and its GPU bytes over its
    ``instances`` GPU instances."""

    slot: GpuSlot
    size: int
    instances: int

    @property
    def share(self) -> float:
        """Each instance's share of the GPU's budget (what it asks Ray for)."""
        return self.size / max(self.instances, 1) / self.slot.capacity


@dataclass(frozen=True)
class WantedModel:
    """A model a load brings, as the budgets see it before it loads: the bytes it will take
    over its replicas, whether the shared host holds it, and the GPU bytes over its GPU
    instances (0: not a GPU model, or no GPU budget)."""

    name: str
    size: int
    hosted: bool
    gpu_size: int = 0
    gpu_instances: int = 0


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
        gpu_budget: str | None = None,
    ) -> None:
        """``load`` and ``unload`` apply a change of the repository (the caller holds
        ``changes``, the lock of every change); ``budget`` is ``--memory-budget`` and
        ``gpu_budget`` ``--gpu-memory-budget`` (None both: models load on demand and stay);
        ``head_node`` the node id of the head, where the shared host runs; ``nodes`` lists
        the live nodes (id, resources)."""
        self.repository = repository
        self.homes = homes
        self._changes = changes
        self._load = load
        self._unload = unload
        self._budget = budget
        self._gpu_budget = gpu_budget
        self.timeout_s = timeout_s
        self.head_node = head_node
        self._live_nodes = nodes
        self._node_of: dict[str, str] = {}  # model -> the node a budget gave it
        self._gpu_of: dict[str, GpuPlace] = {}  # GPU model -> where the GPU budget put it
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

    async def preload(self, names: list[str]) -> None:
        """Load ``names`` now (``--load-model`` at start-up), placed by the budgets as a
        load on demand is, without counting as loads on demand."""
        async with self._changes:
            names = [n for n in names if not self._serves(n)]
            await self._load_batch(names, LoadCause.START_UP, partial(self._load, names))

    async def load_requested(self, name: str, load: Callable[[], Awaitable[None]]) -> None:
        """A repository API ``load`` of ``name``, applied by ``load``: placed by the budgets
        and made room for as a load on demand is, without counting as one (a reload of a
        served model keeps its place). The caller holds the lock of every change.

        Raises:
            InferenceServerError: what ``load`` raises; UNAVAILABLE when only busy models
                could make room and their requests did not finish within the timeout.
        """
        await self._load_batch([name], LoadCause.REPOSITORY_API, load)

    def forget(self, name: str) -> None:
        """Drop the place the budgets gave ``name``, which a repository API ``unload``
        took down."""
        self._node_of.pop(name, None)
        self._gpu_of.pop(name, None)

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
                    names = [n for n in batch if not self._serves(n)]
                    await self._load_batch(names, LoadCause.ON_DEMAND, partial(self._load, names))
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

    async def _load_batch(
        self, names: list[str], cause: LoadCause, load: Callable[[], Awaitable[None]]
    ) -> None:
        """Make room for ``names`` under the budgets, then ``load`` them."""
        if not names:
            return
        began = time.monotonic()
        evict = await self._make_room(names) if self._budgeted else []
        room_at = time.monotonic()
        # The evicted models' unloads and the new loads are sent together (the shared host
        # gets one hosted set with both): an evicted model's memory is freed while the new
        # ones load, instead of a wait for each in turn. Both finish before a failed load's
        # error is raised, so no unload outlives the caller's lock.
        outcomes = await asyncio.gather(self._evict(evict), load(), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        now = time.time()
        logger.info(
            "loaded %s: %s in %.2f s (%.2f s finding room; evicted %s)",
            cause.value,
            ", ".join(names),
            time.monotonic() - began,
            room_at - began,
            ", ".join(evict) or "none",
        )
        for name in names:
            if self._serves(name):
                if cause is LoadCause.ON_DEMAND:
                    self._loads[name] = self._loads.get(name, 0) + 1
                self._loaded_at[name] = now
                self._failed.pop(name, None)
            else:
                fingerprint = await asyncio.to_thread(self.repository.fingerprint, name)
                self._failed[name] = fingerprint
        # Measured footprints may exceed the estimates (GPU bytes are not measured: the plan's
        # estimates stand, and the GPUs need no second look).
        if self._budget is not None:
            nodes, _ = await self._budgets()
            residents = await self._residents(set(names))
            for node in nodes:
                here = [r for r in residents if r.node == node.node_id]
                await self._evict(plan_evictions(here, 0, node.capacity).evict)

    # ------------------------------------------------------------------ the budget

    @property
    def _budgeted(self) -> bool:
        return self._budget is not None or self._gpu_budget is not None

    async def _budgets(self) -> tuple[list[BudgetNode], list[GpuSlot]]:
        """Each node's budget (none without ``--memory-budget``) and each GPU's (none
        without ``--gpu-memory-budget``), from one listing of the live nodes."""
        live = await asyncio.to_thread(self._live_nodes)
        nodes = budget_nodes(self._budget, live) if self._budget is not None else []
        slots = gpu_slots(self._gpu_budget, live) if self._gpu_budget is not None else []
        return nodes, slots

    def _gpu_residents(self, residents: list[Resident]) -> list[Resident]:
        """The loaded GPU models as the GPU budget sees them: their GPU bytes, on their GPU
        (``node``: the slot's key)."""
        return [
            Resident(r.name, place.size, r.last_used, r.in_flight, r.pinned, place.slot.key)
            for r in residents
            if (place := self._gpu_of.get(r.name)) is not None
        ]

    async def _capacity_bytes(self) -> int:
        """The smallest node's budget (what ``usage`` reports)."""
        nodes, _ = await self._budgets()
        return min((node.capacity for node in nodes), default=0)

    async def _make_room(self, names: list[str]) -> list[str]:
        """Pick each model's node and the least recently used idle models to unload there so
        ``names`` fit, once the busy ones that must go finished (waited for within the
        timeout)."""
        nodes, slots = await self._budgets()
        capacity = {node.node_id: node.capacity for node in nodes}
        gpu_capacity = {slot.key: slot.capacity for slot in slots}
        residents = await self._residents(set(names))
        used: dict[str, int] = {}
        for resident in residents:
            used[resident.node] = used.get(resident.node, 0) + resident.footprint
        needed: dict[str, int] = {}
        gpu_needed: dict[str, int] = {}
        for name in names:
            for wanted in await self._wanted(name, set()):
                node = None
                if wanted.gpu_size:
                    on_gpus = self._gpu_residents(residents)
                    slot = slot_for(slots, on_gpus, wanted.gpu_size, gpu_needed)
                    if slot is None:
                        raise InferenceServerError(
                            f"model '{wanted.name}' needs a GPU: {_NO_GPU_SLOTS}",
                            StatusCode.UNAVAILABLE,
                        )
                    self._gpu_of[wanted.name] = GpuPlace(
                        slot, wanted.gpu_size, wanted.gpu_instances
                    )
                    gpu_needed[slot.key] = gpu_needed.get(slot.key, 0) + wanted.gpu_size
                    node = slot.node_id
                elif nodes:
                    room = {n: used.get(n, 0) + needed.get(n, 0) for n in capacity}
                    chosen = node_for(nodes, room)
                    node = self.head_node if wanted.hosted or chosen is None else chosen.node_id
                if node is None:
                    continue  # no budget places it: Serve's choice
                self._node_of[wanted.name] = node
                needed[node] = needed.get(node, 0) + wanted.size
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                plans = [
                    plan_evictions(
                        [r for r in residents if r.node == node],
                        size,
                        capacity[node],
                    )
                    for node, size in needed.items()
                    if node in capacity
                ]
                on_gpus = self._gpu_residents(residents)
                plans += [
                    plan_evictions([r for r in on_gpus if r.node == key], size, gpu_capacity[key])
                    for key, size in gpu_needed.items()
                ]
                busy = list(dict.fromkeys(name for plan in plans for name in plan.busy))
                if not busy:
                    return list(dict.fromkeys(name for plan in plans for name in plan.evict))
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
        return self._node_of.get(name)

    def gpu_of(self, name: str) -> GpuPlace | None:
        """Where the GPU budget put a GPU model loading now (None: no GPU budget)."""
        return self._gpu_of.get(name)

    async def _evict(self, names: list[str]) -> None:
        if not names:
            return
        logger.info("unloading %s: least recently used, for the memory budget", names)
        await asyncio.gather(*(self._unload(name) for name in names))
        for name in names:
            self._evictions[name] = self._evictions.get(name, 0) + 1
            self._node_of.pop(name, None)
            self._gpu_of.pop(name, None)

    async def _wanted(self, name: str, seen: set[str]) -> list[WantedModel]:
        """The models a load of ``name`` brings (it, and an ensemble's members not served):
        each with the bytes it will take (its declared footprint, else what it took last
        time, else the size of its files), whether the shared host will hold it, and under
        a GPU budget its GPU bytes (declared per GPU instance, else its files' size)."""
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
        config = scan.config
        on_gpu = self._gpu_budget is not None and gpu_instances(config) > 0
        if on_gpu:  # its GPU instances all go to one GPU
            config = on_one_gpu(config, 0)
        try:
            placement = placement_for(config)
            gpu_size = declared_footprint(config, GPU_FOOTPRINT_PARAMETER)
        except ValueError:
            return []  # its load fails and says why
        hosted = self.homes.home_for(placement) is self.homes.host
        # A hosted model is in each of the host's replicas; another has replicas of its own.
        replicas = self.homes.host.replicas if hosted else _replicas(placement)
        files = 0
        if placement.footprint is None or (on_gpu and gpu_size is None):
            files = await asyncio.to_thread(_files_bytes, scan.path)
        size = placement.footprint
        if size is None:
            size = self._per_replica.get(name) or files
        if not on_gpu:
            return [WantedModel(name, size * replicas, hosted)]
        instances = gpu_instances(config)
        per_instance = gpu_size if gpu_size is not None else files
        return [WantedModel(name, size * replicas, hosted, per_instance * instances, instances)]

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
        on_gpus = {r.name: r for r in self._gpu_residents(list(residents.values()))}
        capacity = await self._capacity_bytes() if self._budget is not None else 0
        models = [
            ModelResidency(
                name,
                name in residents,
                residents[name].footprint if name in residents else self._per_replica.get(name, 0),
                self._loads.get(name, 0),
                self._evictions.get(name, 0),
                residents[name].node if name in residents else "",
                on_gpus[name].node if name in on_gpus else "",
                on_gpus[name].footprint if name in on_gpus else 0,
            )
            for name in sorted(set(self._loads) | set(residents))
        ]
        return BudgetUsage(
            capacity,
            sum(r.footprint for r in residents.values()),
            models,
            gpu_budget_bytes(self._gpu_budget) if self._gpu_budget is not None else 0,
            sum(r.footprint for r in on_gpus.values()),
        )

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
