"""Models loaded on their first request, within a memory budget (``--load-on-demand``,
``--memory-budget``): the repository controller's part.

A request for a model that is in the repository but not loaded asks the controller for it
(:meth:`OnDemandLoads.ensure_loaded`) and waits, up to ``--load-on-demand-timeout-secs``. The
requests that arrive while a load runs are loaded together next, as one change of the
repository. Before a load, the least recently used idle models are unloaded until the new ones
fit the budget (:mod:`cluster.memory_budget`); models with requests in flight are waited for,
never unloaded. After it, the budget is checked again with what the replicas measured.

A model whose load failed is not tried again for each request: it answers its load error until
its files change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from cluster.memory_budget import (
    BudgetUsage,
    EvictionPlan,
    ModelResidency,
    Resident,
    budget_bytes,
    declared_footprint,
    plan_evictions,
)
from cluster.resources import node_resources
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
    ) -> None:
        """``load`` and ``unload`` apply a change of the repository (the caller holds
        ``changes``, the lock of every change); ``budget`` is ``--memory-budget`` (None:
        models load on demand and stay)."""
        self.repository = repository
        self.homes = homes
        self._changes = changes
        self._load = load
        self._unload = unload
        self._budget = budget
        self.timeout_s = timeout_s
        self._capacity: int | None = None  # the budget in bytes, once the nodes are known
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._wake = asyncio.Event()
        self._failed: dict[str, str] = {}  # model -> fingerprint of the files that failed
        self._per_replica: dict[str, int] = {}  # model -> bytes one replica took last time
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
            plan = plan_evictions(residents, 0, await self._capacity_bytes())
            await self._evict(plan.evict)

    # ------------------------------------------------------------------ the budget

    async def _capacity_bytes(self) -> int:
        if self._capacity is None:
            assert self._budget is not None
            nodes = await asyncio.to_thread(node_resources)
            self._capacity = budget_bytes(self._budget, nodes)
        return self._capacity

    async def _make_room(self, names: list[str]) -> list[str]:
        """The least recently used idle models to unload so ``names`` fit the budget, once
        the busy ones that must go finished (waited for within the timeout)."""
        needed = 0
        for name in names:
            needed += await self._estimate(name, set())
        capacity = await self._capacity_bytes()
        deadline = time.monotonic() + self.timeout_s
        plan: EvictionPlan = plan_evictions(await self._residents(set(names)), needed, capacity)
        try:
            while not plan.fits:
                self._busy = plan.busy
                if time.monotonic() > deadline:
                    raise InferenceServerError(
                        f"the memory budget ({capacity} bytes) has no room for "
                        f"{', '.join(sorted(names))}: models {', '.join(plan.busy)} would have "
                        f"to be unloaded, and their requests did not finish within "
                        f"{self.timeout_s:g} s",
                        StatusCode.UNAVAILABLE,
                    )
                await asyncio.sleep(_BUSY_POLL_S)
                plan = plan_evictions(await self._residents(set(names)), needed, capacity)
        finally:
            self._busy = []
        return plan.evict

    async def _evict(self, names: list[str]) -> None:
        if not names:
            return
        logger.info("unloading %s: least recently used, for the memory budget", names)
        await asyncio.gather(*(self._unload(name) for name in names))
        for name in names:
            self._evictions[name] = self._evictions.get(name, 0) + 1

    async def _estimate(self, name: str, seen: set[str]) -> int:
        """The bytes ``name`` (and the members it brings) will take once loaded: its declared
        footprint, else what it took last time, else the size of its files."""
        if self._serves(name) or name in seen:
            return 0
        seen.add(name)
        try:
            scan = await asyncio.to_thread(self.repository.scan, name)
        except InferenceServerError:
            return 0  # its load fails and says why
        if not scan.available:
            return 0
        if scan.is_ensemble:
            total = 0
            for member in member_names(scan.config):
                total += await self._estimate(member, seen)
            return total
        try:
            declared = declared_footprint(scan.config)
        except ValueError:
            return 0
        if declared is not None:
            return declared
        return self._per_replica.get(name) or await asyncio.to_thread(_files_bytes, scan.path)

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
        record = self.repository.records[name]
        files = _files_bytes(record.served.path) if record.served is not None else 0
        measured = sum(max(s.footprint_bytes, files) for s in replicas) or files
        self._per_replica[name] = measured // count
        return measured

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


def _files_bytes(path) -> int:
    """The size of the files under a model's directory."""
    total = 0
    try:
        for file in path.rglob("*"):
            if file.is_file() and "__pycache__" not in file.parts:
                total += file.stat().st_size
    except OSError:
        pass
    return total
