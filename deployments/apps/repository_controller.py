"""The repository controller: the one owner of what the server serves, as a Serve deployment.

It holds the :class:`~repo_adapter.live_repository.LiveRepository` (the Ray-free state) and
applies its changes to Serve through :class:`~deployments.apps.model_apps.ServeModelApps`. The
server's HTTP routes, the gRPC frontend and ``rayton serve`` ask it for the repository index,
the served models and the reasons of unavailable ones, and send it ``load`` / ``unload``.

Two ways to own the model applications, never mixed (Serve does not stop an imperative deploy
from overwriting an application a config owns, nor the reverse):

* ``deploy_models=True`` (``rayton serve``): the controller deploys the model applications
  itself, in every control mode: ``none`` and ``poll`` load the whole repository (``poll``
  then reloads what changes on disk every ``repository_poll_secs``), ``explicit`` loads
  ``load_models`` and then what the repository API asks for.
* ``deploy_models=False`` (``serve run`` / ``serve deploy`` of a ``rayton build`` config): the
  config owns them and the controller only watches them; ``load`` / ``unload`` answer that the
  config is where models change. Only ``model_control_mode: none`` is accepted there.

Reloads keep serving: a changed model reaches its running replicas as a new ``user_config``
generation that loads beside the serving one (:mod:`deployments.core.model_slot`).

Where a model runs (``deploy_models=True``): CPU models in the shared host application
(:mod:`deployments.apps.host_deployment`, one process for many models) unless
``cpu_models`` is "dedicated"; GPU models, and every model otherwise, in an application of
their own named after the model.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from functools import partial

import ray
from ray import serve

from cluster.memory_budget import BudgetUsage, on_one_gpu, pin_to_node
from cluster.placement import ModelPlacement, placement_for, share_gpus
from cluster.resources import cluster_gpu_ids, live_nodes, node_resources, unplaceable_reason
from deployments.apps.grpc_deployment import GRPC_APP_NAME, GRPC_DEPLOYMENT_NAME
from deployments.apps.handles import broadcast
from deployments.apps.log_control import LogControl
from deployments.apps.metrics_deployment import METRICS_APP_NAME, METRICS_DEPLOYMENT_NAME
from deployments.apps.model_apps import LoadOutcome, ServeModelApps
from deployments.apps.model_deployment import InstanceOptions
from deployments.apps.model_homes import ModelHome, ModelHomes, Placed, ReplicaTarget
from deployments.apps.node_response_cache import NodeCaches
from deployments.apps.on_demand import OnDemandLoads
from deployments.apps.replica_api import ReplicaControlApi
from deployments.apps.replica_recycling import RecycleCandidate, ReplicaRecycler
from deployments.apps.replica_scaling import ReplicaScaling
from deployments.apps.repository_access import CONTROLLER_APP_NAME
from deployments.apps.server_args import ServerAppArgs
from deployments.apps.server_deployment import SERVER_DEPLOYMENT_NAME
from deployments.apps.trace_control import (
    TraceControl,
    startup_exporter,
    startup_trace_settings,
)
from deployments.core.model_host import HostedSet
from deployments.core.response_cache import CacheUsage
from deployments.core.server_core import RepositoryView
from deployments.core.shared_memory import CLIENT_SHM_DISABLED, MemoryKind, Region, RegionTable
from deployments.metrics.replica_gauges import ModelScaling
from deployments.observability.log_settings import LogSettingsDocument
from deployments.observability.status import StatusDocument, status_document
from deployments.observability.trace_settings import TracePlan, TraceSettingsDocument
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import JsonObject
from repo_adapter.live_repository import IndexEntry, LiveRepository, load_failed_error
from repo_adapter.model_state import VersionStates
from repo_adapter.repository import RepositoryModel
from repo_adapter.request_trace import TraceRecord
from repo_adapter.version_traffic import TrafficPolicy

logger = logging.getLogger(__name__)

_UNLOAD_TIMEOUT_S = 120.0
_STEER_TIMEOUT_S = 30.0

NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"
CONFIG_OWNED = (
    "this server's models are deployed by a Serve config (serve run / serve deploy): change "
    "the config and deploy it again, or serve the repository with 'rayton serve "
    "--model-control-mode explicit' to load and unload models through this API"
)


# How often the controller reads Serve's view of the models' replica health
REPLICA_WATCH_INTERVAL_S = 2.0
RECYCLE_CHECK_INTERVAL_S = 1.0


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class RepositoryController:
    """Owns the repository state and applies it to Serve (one replica, by design)."""

    def __init__(self, spec: ServerAppArgs) -> None:
        self.spec = spec
        self.repository = LiveRepository(
            spec.model_repository,
            cluster_gpu_ids(),
            spec.model_file_override_dir,
            spec.backend_settings(),
        )
        self._apps = ServeModelApps()
        head_node = ray.get_runtime_context().get_node_id()  # the controller runs on the head
        self.homes = ModelHomes(
            self._apps,
            spec.http_max_input_size,
            share_cpu_models=spec.cpu_models == "shared",
            host_replicas=spec.host_replicas,
            instances=InstanceOptions.from_settings(spec.python_instances, spec.batch_admission),
            deploys=spec.deploy_models,
            # Under a memory budget the hosted models count against the head node's
            host_node=head_node if spec.memory_budget is not None else None,
        )
        self._changes = asyncio.Lock()  # one repository change at a time
        self._logs = LogControl(
            spec.log_settings(),
            lambda: [*front_deployments(), *self.model_deployments()],
        )
        self._traces = TraceControl(
            startup_trace_settings(spec), self.model_deployments, startup_exporter(spec)
        )
        self._caches = NodeCaches(spec.response_cache_bytes())
        self._regions = RegionTable(ray.get_runtime_context().get_node_id())
        self._started = False
        self._unplaceable: set[str] = set()
        self._traffic: dict[str, TrafficPolicy] = {}  # set through the repository API
        self._recycler = ReplicaRecycler(self._apps.app_status)
        self._scaling = ReplicaScaling(self._apps.running_replicas)
        self._on_demand = (
            OnDemandLoads(
                self.repository,
                self.homes,
                self._changes,
                self._load_many,
                lambda name: self._unload_one(name, evicted=True),
                spec.memory_budget,
                spec.load_on_demand_timeout_secs,
                head_node,
                gpu_budget=spec.gpu_memory_budget,
            )
            if spec.load_on_demand
            else None
        )
        loop = asyncio.get_event_loop()
        self._tasks = [
            loop.create_task(self._run()),
            loop.create_task(self._watch_replicas()),
            loop.create_task(self._recycle_replicas()),
        ]

    # ------------------------------------------------------------------ start-up and poll

    def _startup_models(self) -> list[str]:
        spec = self.spec
        names = self.repository.model_names()
        if spec.models is not None:
            return [n for n in names if n in spec.models]
        if spec.model_control_mode == "explicit" or spec.load_on_demand:
            wanted = spec.load_models or []
            return names if "*" in wanted else [n for n in names if n in wanted]
        return names

    async def _run(self) -> None:
        try:
            if self._on_demand is not None:  # placed by the memory budgets
                await self._on_demand.preload(self._startup_models())
            else:
                async with self._changes:
                    await self._load_many(self._startup_models())
        except Exception:
            logger.exception("loading the repository failed")
        self._started = True
        if self.spec.model_control_mode == "poll" and self.spec.deploy_models:
            while True:
                await asyncio.sleep(self.spec.repository_poll_secs)
                try:
                    await self.poll()
                except Exception:
                    logger.exception("polling the repository failed")

    async def _watch_replicas(self) -> None:
        """Note in the index when a serving model's replica stops unexpectedly (a crash in
        a backend, a killed process): Serve marks its deployment UNHEALTHY until the
        replica it starts in its place runs."""
        while True:
            await asyncio.sleep(REPLICA_WATCH_INTERVAL_S)
            try:
                await self.note_stopped_replicas()
            except Exception:
                logger.exception("reading Serve's replica health failed")

    async def note_stopped_replicas(self) -> None:
        """Record a replica stop for each served model whose application had a replica fail
        since the last look while no change of this server's was under way; and every served
        model's replica count (scale-ups and scale-downs)."""
        served = self.repository.served_names()
        await self._scaling.look({name: self.homes.replica_targets([name]) for name in served})
        unhealthy = await self._apps.replica_failures()
        newly = set(unhealthy)
        if not newly:
            return
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        for name in served:
            apps = {app for _, app in self.homes.replica_targets([name])} & newly
            if apps:
                serve_says = unhealthy[min(apps)].split(". ")[0].rstrip(".")
                self.repository.replica_stopped(
                    name,
                    f"a replica stopped unexpectedly at {at} and Serve replaces it "
                    f"(Serve: {serve_says})",
                )

    async def _recycle_replicas(self) -> None:
        """Replace the replicas of models whose config asks for it when they are due
        (cluster/recycling.py)."""
        while True:
            await asyncio.sleep(RECYCLE_CHECK_INTERVAL_S)
            try:
                await self.recycle_due_replicas()
            except Exception:
                logger.exception("recycling replicas failed")

    async def recycle_due_replicas(self) -> list[str]:
        """Start replacing the replicas of every model that is due; their names."""
        candidates = []
        for name in self.repository.served_names():
            home = self.homes.home_of(name)
            placement = home.placement_of(name) if home is not None else None
            if home is None or home is self.homes.watched or placement is None:
                continue  # a Serve config's models are its to roll out
            if placement.recycling is not None:
                targets = home.replica_targets(name)
                candidates.append(
                    RecycleCandidate(name, placement.recycling, targets, home.application(name))
                )
        due = await self._recycler.due(candidates)
        for name in due:
            async with self._changes:
                await self._recycle(name)
        return due

    async def _recycle(self, name: str) -> None:
        """Deploy ``name`` as it serves with the next round's code version: Serve replaces
        its replicas one at a time, each new one running before an old one stops."""
        if self._served_home(name) is not None:  # not unloaded meanwhile
            self._recycler.advance(name)
            await self._redeploy(name)

    def _placed(
        self,
        model: RepositoryModel,
        generation: str,
        placement: ModelPlacement,
        nodes: list[dict[str, float]],
    ) -> Placed:
        """``model`` to deploy with what this controller keeps for it: the traffic policy the
        repository API set, and its recycling round (a deploy keeps the replicas' code
        version unless the round changed); under a memory budget, whether its replicas
        measure its footprint (it declares none)."""
        name = model.name
        measure = self.spec.memory_budget is not None and placement.footprint is None
        return Placed(
            model,
            generation,
            placement,
            nodes,
            self._traffic.get(name),
            self._recycler.round(name),
            measure,
        )

    def _served_home(self, name: str) -> tuple[ModelHome, ModelPlacement] | None:
        """Where served model ``name`` was deployed by this server (None: it was not)."""
        record = self.repository.records.get(name)
        home = self.homes.home_of(name)
        if record is None or record.served is None or home is None:
            return None
        placement = home.placement_of(name)
        return None if placement is None else (home, placement)

    async def _redeploy(self, name: str) -> ModelHome:
        """Deploy served model ``name`` again as it serves, with this controller's traffic
        policy and recycling round for it (Serve reconfigures its replicas in place unless
        the round changed)."""
        found = self._served_home(name)
        if found is None:
            raise InferenceServerError(
                f"model '{name}' is not deployed by this server", StatusCode.UNAVAILABLE
            )
        home, placement = found
        record = self.repository.records[name]
        assert record.served is not None
        nodes = await asyncio.to_thread(node_resources)
        await home.deploy([self._placed(record.served, record.generation, placement, nodes)])
        return home

    async def poll(self) -> dict[str, str]:
        """Apply what changed on disk since the last poll: loads, reloads, unloads."""
        async with self._changes:
            changes = await asyncio.to_thread(self.repository.changed_since_served)
            loads = [n for n, change in changes.items() if change == "load"]
            for name in (n for n, change in changes.items() if change == "unload"):
                await self._unload_one(name)
            await self._load_many(loads)
            self.repository.forget_removed()
            return changes

    async def _load_many(
        self,
        names: list[str],
        config: str | None = None,
        files: dict[str, bytes] | None = None,
        strict: bool = False,
    ) -> None:
        """Load ``names``: models first, then ensembles (whose members must have loaded).

        ``config`` is the override of a single ``load``; ``strict`` raises what a repository
        API ``load`` answers (unknown model) instead of logging it.
        """
        plans: dict[str, RepositoryModel] = {}
        for name in names:
            try:
                plan = await asyncio.to_thread(self.repository.plan_load, name, config, files)
            except InferenceServerError as err:
                if strict:
                    raise
                logger.error("cannot load '%s': %s", name, err)
                continue
            for model in plan.models:
                plans.setdefault(model.name, model)
        await self._apply([m for m in plans.values() if not m.is_ensemble])
        ensembles = [m for m in plans.values() if m.is_ensemble]
        for ensemble in ensembles:  # nested ensembles: members listed before their users
            self._check_members(ensemble)
        await self._apply(ensembles)

    def _check_members(self, ensemble: RepositoryModel) -> None:
        """Triton fails an ensemble whose member did not load, naming the member's error."""
        if not ensemble.available:
            return
        for member in self.repository.members_of(ensemble):
            record = self.repository.records.get(member)
            if record is None or record.served is not None or not record.error:
                continue
            failure = load_failed_error(member, record.failed_versions, record.error).message
            ensemble.error = (
                f"ensemble '{ensemble.name}' depends on '{member}' which has no loaded version. "
                f"Model '{member}' loading failed with error: {failure}"
            )
            return

    # ------------------------------------------------------------------ applying changes

    async def _apply(self, models: list[RepositoryModel]) -> None:
        """Deploy ``models`` together (each in its home) and wait for each one's outcome."""
        nodes = await asyncio.to_thread(node_resources)
        by_home: dict[ModelHome, list[Placed]] = {}
        waits: list[tuple[Placed, ModelHome]] = []
        for model in models:
            generation = self.repository.begin_load(model)
            placement = self._placement(model, nodes)
            if placement is None:
                continue
            placed = self._placed(model, generation, placement, nodes)
            home = self.homes.home_for(placement)
            by_home.setdefault(home, []).append(placed)
            waits.append((placed, home))
        try:
            await asyncio.gather(*(home.deploy(placed) for home, placed in by_home.items()))
        except Exception as err:
            logger.exception("deploying failed")
            for placed, _ in waits:
                self.repository.load_failed(placed.model.name, f"deploying failed: {err}")
            return
        await asyncio.gather(*(self._settle(placed, home) for placed, home in waits))

    def _placement(
        self, model: RepositoryModel, nodes: list[dict[str, float]]
    ) -> ModelPlacement | None:
        """Where ``model``'s replicas go on ``nodes``; None (its load failed) where it cannot
        be placed."""
        if not model.available:
            if model.needs_device:
                self._unplaceable.add(model.name)
            self.repository.load_failed(model.name, model.error)
            return None
        gpu = self._on_demand.gpu_of(model.name) if self._on_demand is not None else None
        config = on_one_gpu(model.config, gpu.slot.gpu) if gpu is not None else model.config
        try:
            placement = placement_for(config, nodes)
        except ValueError as err:  # a placement parameter Serve would refuse
            self.repository.load_failed(model.name, f"model '{model.name}': {err}")
            return None
        if gpu is not None:
            share_gpus(placement, gpu.share)
        groups = placement.groups
        reason = next(
            filter(None, (unplaceable_reason(g.ray_actor_options, nodes) for g in groups)), ""
        )
        if reason:
            self._unplaceable.add(model.name)
            self.repository.load_failed(model.name, reason)
            return None
        self._unplaceable.discard(model.name)
        node = self._on_demand.node_of(model.name) if self._on_demand is not None else None
        if node is not None and self.homes.home_for(placement) is not self.homes.host:
            for group in placement.groups:  # the node (and GPU) the memory budgets gave it
                pin_to_node(group.ray_actor_options, node)
        return placement

    async def _settle(self, placed: Placed, home: ModelHome) -> None:
        name = placed.model.name
        record = self.repository.records[name]
        was_serving = record.served is not None
        outcome: LoadOutcome = await home.wait_loaded(
            name, placed.generation, self.spec.model_load_timeout_secs
        )
        if outcome.ok and _any_ready(outcome.versions):
            versions = _with_notes(outcome.versions, placed.placement.notes)
            self.repository.load_succeeded(name, placed.generation, versions)
            await self._leave_other_homes(name, home)
            return
        reason = outcome.reason or _version_reasons(outcome.versions)
        failed = {v: s for v, s in outcome.versions.items() if not s.ready}
        self.repository.load_failed(name, reason, failed)
        if not was_serving:
            await self._remove(name, home)  # nothing to keep: free it

    async def _leave_other_homes(self, name: str, home: ModelHome) -> None:
        """A model that moved (shared host <-> an application of its own) stops being served
        where it was."""
        for other in self.homes.all:
            if other is home or not other.holds(name):
                continue
            if other.application(name) == home.application(name):
                other.forget(name)  # the same application now serves it the new way
            elif other is self.homes.host:
                await self._remove(name, other)
            else:
                await other.remove(name)
        if home is self.homes.host and await self.homes.own.serves(name):
            await self.homes.own.remove(name)  # an application of its own left from before

    async def _remove(self, name: str, home: ModelHome) -> None:
        """Stop serving ``name`` in ``home`` and wait until its replicas let it go."""
        await home.remove(name)
        if not await home.wait_removed(name, _UNLOAD_TIMEOUT_S):
            logger.error(
                "model '%s' still in application '%s' %g s after its removal",
                name,
                home.application(name),
                _UNLOAD_TIMEOUT_S,
            )

    async def _unload_one(
        self, name: str, with_member: bool = False, evicted: bool = False
    ) -> None:
        """Unload ``name``; ``evicted`` (for the memory budget) keeps its traffic policy and
        recycling round for its next load on demand."""
        record = self.repository.records.get(name)
        if record is None or record.served is None:
            return
        self.repository.begin_unload(name)
        if not evicted:
            self._traffic.pop(name, None)  # a model loaded again follows its config
            self._recycler.forget(name)
        await self._remove(name, self.homes.home_of(name) or self.homes.own)
        self.repository.unload_finished(name, with_member)

    # ------------------------------------------------------------------ repository API

    def _refusal(self) -> str:
        if not self.spec.deploy_models:
            return CONFIG_OWNED
        if self.spec.model_control_mode != "explicit":
            return NOT_ALLOWED
        return ""

    async def load(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Triton's ``load``: load ``name`` (an ensemble with its members), or reload it.

        ``config`` (a ModelConfig as JSON) replaces ``config.pbtxt`` from now on, as in
        Triton; a load without it keeps an earlier override.
        """
        refusal = self._refusal()
        if refusal:
            raise InferenceServerError(refusal, StatusCode.UNAVAILABLE)
        async with self._changes:
            load_it = partial(self._load_many, [name], config=config, files=files, strict=True)
            if self._on_demand is not None:  # placed by the memory budgets, room made
                await self._on_demand.load_requested(name, load_it)
            else:
                await load_it()
            record = self.repository.records[name]
            if record.error:
                raise load_failed_error(name, record.failed_versions, record.error)
            # Ensembles that went with this model's unload come back with it, as in Triton.
            while returning := self.repository.returning_ensembles():
                await self._load_many(returning)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Triton's ``unload``: stop serving ``name`` and every ensemble that uses it (those
        load again when ``name`` does).

        ``unload_dependents`` also unloads what ``name`` uses (an ensemble's members). An
        unknown or unloaded model is not an error, as in Triton.
        """
        refusal = self._refusal()
        if refusal:
            raise InferenceServerError(refusal, StatusCode.UNAVAILABLE)
        async with self._changes:
            dependents = self.repository.dependents_of(name)
            names = [name, *(self.repository.uses_of(name) if unload_dependents else [])]
            await asyncio.gather(
                *(self._unload_one(n, with_member=True) for n in dependents),
                *(self._unload_one(n) for n in dict.fromkeys(names) if n not in dependents),
            )
            if self._on_demand is not None:
                for unloaded in [*dependents, *names]:
                    self._on_demand.forget(unloaded)

    def version_traffic(self, name: str) -> TrafficPolicy:
        """The traffic policy loaded model ``name`` follows (the repository API's, else its
        config's)."""
        model = self._served(name)
        return self._traffic.get(name) or TrafficPolicy.from_config(model.config)

    async def set_version_traffic(self, name: str, policy: TrafficPolicy) -> TrafficPolicy:
        """The repository API's ``traffic`` extension: loaded model ``name`` spreads the
        requests that name no version as ``policy`` says, from when this returns on (every
        replica follows it then), until it is unloaded. Nothing reloads: replicas apply it
        in place, so no request fails on the way.

        Raises:
            InferenceServerError: UNAVAILABLE where a Serve config deploys the models, or the
                replicas did not follow it in time; INVALID_ARG for a policy the model cannot
                follow (a version not ready, a sequence model); NOT_FOUND for a model that is
                not loaded.
        """
        if not self.spec.deploy_models:
            raise InferenceServerError(CONFIG_OWNED, StatusCode.UNAVAILABLE)
        async with self._changes:
            model = self._served(name)
            record = self.repository.records[name]
            ready = [int(v) for v, state in record.versions.items() if state.ready]
            policy.check(model.config, ready)
            if self._served_home(name) is None:
                raise InferenceServerError(
                    f"model '{name}' is not deployed by this server", StatusCode.UNAVAILABLE
                )
            self._traffic[name] = policy
            home = await self._redeploy(name)
            if not await home.wait_steered(name, policy.to_json(), _STEER_TIMEOUT_S):
                raise InferenceServerError(
                    f"model '{name}': the replicas did not take the traffic policy within "
                    f"{_STEER_TIMEOUT_S:g} s (they will once they answer)",
                    StatusCode.UNAVAILABLE,
                )
            return policy

    async def ensure_loaded(self, name: str) -> bool:
        """``--load-on-demand``: return once ``name`` serves, loading it first (within the
        memory budget); whether it serves (False: its load failed). See
        :class:`~deployments.apps.on_demand.OnDemandLoads`.

        Raises:
            InferenceServerError: UNAVAILABLE on a server that does not load on demand, or
                when the load did not finish in time; NOT_FOUND for an unknown model.
        """
        if self._on_demand is None:
            raise InferenceServerError(
                "this server does not load models on demand (--load-on-demand)",
                StatusCode.UNAVAILABLE,
            )
        return await self._on_demand.ensure_loaded(name)

    async def memory_budget(self) -> BudgetUsage | None:
        """The memory budget and what each model loaded on demand takes (None: this server
        does not load on demand)."""
        return await self._on_demand.usage() if self._on_demand is not None else None

    def _served(self, name: str) -> RepositoryModel:
        record = self.repository.records.get(name)
        if record is None or record.served is None or record.served.config is None:
            raise InferenceServerError(
                f"Request for unknown model: '{name}' is not loaded", StatusCode.NOT_FOUND
            )
        return record.served

    # ------------------------------------------------------------------ views

    async def response_cache(self, node_id: str) -> str | None:
        """Where the response cache the replicas on ``node_id`` share answers (its Unix
        socket; None: the server has no response cache, ``--cache-config``)."""
        return await self._caches.socket_for_node(node_id)

    def _client_shm_allowed(self) -> None:
        if not self.spec.allow_client_shm:
            raise InferenceServerError(CLIENT_SHM_DISABLED, StatusCode.UNSUPPORTED)

    def register_system_region(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register a client's system shared-memory region (checked on this node: clients
        that use shared memory run on the node of the controller, the head node)."""
        self._client_shm_allowed()
        self._regions.register(name, key, offset, byte_size)

    async def register_cuda_region(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """Register a client's CUDA shared-memory region (of a GPU of this node, the head
        node, as system regions)."""
        self._client_shm_allowed()
        nodes = dict(await asyncio.to_thread(live_nodes))
        gpus = int(nodes.get(self._regions.node_id, {}).get("GPU", 0))
        self._regions.register_cuda(name, raw_handle, device_id, byte_size, gpus)

    async def unregister_regions(self, kind: MemoryKind, name: str) -> None:
        """Forget the regions of ``kind`` named ``name`` (every one when empty), in every
        model replica first."""
        self._client_shm_allowed()
        names = self._regions.unregister(name, kind)
        if names:
            await broadcast(self.model_deployments(), ReplicaControlApi.forget_regions, names)

    def region_status(self, kind: MemoryKind, name: str) -> list[Region]:
        return self._regions.status(name, kind)

    def regions(self) -> list[Region]:
        """Every registered region, of both kinds (what a replica maps)."""
        return self._regions.regions()

    def hosted_set(self) -> HostedSet:
        """The models the shared host's replicas are to serve (a replica takes it as it
        starts)."""
        return self.homes.host.hosted_set()

    def hosted_revision(self) -> int:
        """The revision of that set (a host replica that missed a change sees it is behind)."""
        return self.homes.host.hosted_set().revision

    def model_scaling(self) -> list[ModelScaling]:
        """Each served model's replicas and the scale-ups and scale-downs seen (``/metrics``)."""
        return self._scaling.records()

    async def response_cache_usage(self) -> list[CacheUsage] | None:
        """Every node cache's size and counters (None: the server has no response cache)."""
        if not self._caches.capacity_bytes:
            return None
        return await self._caches.usage()

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Triton's repository index: versions as the replicas reported them when loaded."""
        self.repository.refresh_names()
        return self.repository.index(ready_only)

    def view(self) -> RepositoryView:
        repository = self.repository
        unavailable = {}
        for name in repository.records:
            reason = repository.unavailable_reason(name)
            if reason is not None:
                unavailable[name] = reason
        # Ready once the start-up loads settled; a later load or reload does not take
        # readiness away (Triton's explicit mode does, and probes restart servers during
        # long loads: triton-inference-server/server#7014).
        ready = self._started
        if self.spec.strict_readiness:
            # Triton's strict readiness: a model that failed to load makes the server not
            # ready. One this cluster has no hardware for does not: readiness probes would
            # restart the server forever over a placement fact (its reason is in the index).
            failed = [
                n
                for n, r in repository.records.items()
                if r.served is None and r.error and n not in self._unplaceable
            ]
            ready = ready and not failed
        return RepositoryView(
            served=repository.served_names(),
            unavailable=unavailable,
            ready=ready,
            config_owned=not self.spec.deploy_models,
            on_demand=self._on_demand is not None,
        )

    # ------------------------------------------------------------------ log settings

    def log_settings(self) -> LogSettingsDocument:
        """Triton's log settings, as every replica applies them."""
        return self._logs.settings()

    async def update_log_settings(self, changes: JsonObject) -> LogSettingsDocument:
        """Change the log settings everywhere; Triton's errors for a bad setting."""
        return await self._logs.update(changes)

    # ------------------------------------------------------------------ trace settings

    async def trace_settings(
        self, model: str | None, changes: JsonObject | None
    ) -> TraceSettingsDocument:
        """Triton's trace settings of the server or of ``model`` (changed by ``changes``)."""
        return await self._traces.settings(model, changes, self.repository.served_names())

    def trace_table(self) -> TracePlan:
        """The settings every model replica's tracer follows."""
        return self._traces.table.plan()

    async def record_traces(self, records: list[TraceRecord]) -> None:
        """Finished traces from a model replica, for the trace file."""
        await self._traces.record(records)

    def model_deployments(self) -> list[ReplicaTarget]:
        """``(deployment, application)`` of every served model's replicas: each model with a
        deployment of its own (named after it), and the shared host when it runs some."""
        return self.homes.replica_targets(self.repository.served_names())

    async def status(self) -> StatusDocument:
        """``rayton status``: the repository index and where every served model's replicas
        run (node, GPU ids); the traffic policies the repository API set and how many times
        models' replicas were recycled."""
        replicas = await broadcast(self.model_deployments(), ReplicaControlApi.replica_info)
        return status_document(
            self.spec.model_repository,
            self.spec.model_control_mode,
            self.index(),
            replicas,
            {name: policy.to_json() for name, policy in self._traffic.items()},
            self._recycler.rounds(),
            await self.memory_budget(),
        )

    def __del__(self) -> None:
        self._traces.flush()  # a part of fewer than log_frequency traces, as Triton at exit

    def started(self) -> bool:
        """Whether the start-up loads all finished (each model READY or UNAVAILABLE)."""
        return self._started


def _with_notes(versions: VersionStates, notes: list[str]) -> VersionStates:
    """Version states with what the cluster could not honour in a ready version's reason (the
    index shows it; Triton leaves a ready version's reason empty)."""
    if not notes:
        return versions
    note = "; ".join(notes)
    return {v: replace(s, reason=s.reason or note) if s.ready else s for v, s in versions.items()}


def _any_ready(versions: VersionStates) -> bool:
    return any(state.ready for state in versions.values())


def _version_reasons(versions: VersionStates) -> str:
    reasons = sorted({s.reason for s in versions.values() if s.reason})
    return "; ".join(reasons) or "no version could be loaded"


def front_deployments() -> list[ReplicaTarget]:
    """``(deployment, application)`` of the front applications (those deployed answer)."""
    return [
        (SERVER_DEPLOYMENT_NAME, CONTROLLER_APP_NAME),
        (GRPC_DEPLOYMENT_NAME, GRPC_APP_NAME),
        (METRICS_DEPLOYMENT_NAME, METRICS_APP_NAME),
    ]
