"""Where a served model's replicas live, one object per kind, each with the same operations.

A model lives in one of three homes:

* :class:`OwnApplication`: a Serve application of its own, named after the model, with one
  deployment (a single model or an ensemble);
* :class:`RoutedGroups`: an application of its own whose router (named after the model) sends
  requests to a deployment per replica group (a model whose groups need different resources,
  see :mod:`cluster.placement`);
* :class:`SharedHost`: the shared host application, whose replicas serve many CPU models;
* :class:`WatchedApplication`: an application a Serve config deploys (``serve run`` of a
  ``rayton build`` config), which the controller only watches.

The repository controller picks the home from the model's placement and then only calls the
home's operations: deploy, wait until loaded, remove, wait until removed, and the deployments
whose replicas hold the model (for log and trace settings, metrics and ``rayton status``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from cluster.placement import ModelPlacement
from deployments.apps.handles import HOST_APP_NAME, HOST_DEPLOYMENT_NAME
from deployments.apps.host_deployment import HOST_ROUTE_PREFIX
from deployments.apps.model_applications import (
    host_application,
    hosted_model_entry,
    model_application,
)
from deployments.apps.model_apps import (
    DeployTarget,
    LoadOutcome,
    ServeModelApps,
    same_states,
    settled,
)
from deployments.apps.model_deployment import DEFAULT_INSTANCES, InstanceOptions
from deployments.core.model_host import HostedSet
from deployments.core.model_slot import SlotStatus
from deployments.http.body_limit import DEFAULT_MAX_INPUT_SIZE
from repo_adapter.repository import RepositoryModel
from repo_adapter.version_traffic import TrafficPolicy

logger = logging.getLogger(__name__)

_STEER_POLL_S = 0.2
ReplicaTarget = tuple[str, str]  # (deployment, application) whose replicas hold a model


@dataclass
class Placed:
    """A model to deploy: the scan, the generation it loads, and where its replicas go."""

    model: RepositoryModel
    generation: str
    placement: ModelPlacement
    nodes: list[dict[str, float]] = field(default_factory=list)
    traffic: TrafficPolicy | None = None  # the repository API's policy (None: the config's)
    recycle_round: int = 0  # how many times its replicas were recycled (cluster/recycling.py)
    measure_footprint: bool = False  # its replicas measure the memory its load adds


class ModelHome(ABC):
    """One kind of home; what the controller does with the models it holds."""

    def __init__(
        self,
        apps: ServeModelApps,
        max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
        instances: InstanceOptions = DEFAULT_INSTANCES,
    ):
        self.apps = apps
        self.max_input_size = max_input_size
        self.instances = instances  # how replicas run the models' instances
        self._held: dict[str, ModelPlacement] = {}  # model -> its placement when deployed

    def holds(self, name: str) -> bool:
        return name in self._held

    def forget(self, name: str) -> None:
        """Stop counting ``name`` as held here, leaving Serve as it is (the application it
        is in now serves it another way)."""
        self._held.pop(name, None)

    def placement_of(self, name: str) -> ModelPlacement | None:
        """Where ``name``'s replicas went when it was deployed here (None: not held)."""
        return self._held.get(name)

    @abstractmethod
    def application(self, name: str) -> str:
        """The Serve application that serves ``name`` here."""

    @abstractmethod
    async def replica_statuses(self, name: str) -> list[SlotStatus | None]:
        """Where each replica holding ``name`` stands with it (None: one not answering)."""

    async def wait_steered(self, name: str, traffic: dict[str, Any], timeout_s: float) -> bool:
        """Wait until every replica holding ``name`` follows ``traffic`` (a policy's JSON);
        whether they did in time."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            statuses = await self.replica_statuses(name)
            if statuses and all(s is not None and s.traffic == traffic for s in statuses):
                return True
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(_STEER_POLL_S)

    @abstractmethod
    async def deploy(self, placed: list[Placed]) -> None:
        """Deploy (or update) ``placed`` without waiting for their replicas."""

    @abstractmethod
    async def wait_loaded(self, name: str, generation: str | None, timeout_s: float) -> LoadOutcome:
        """Wait until every replica serves ``generation`` of ``name`` (None: any) or fails."""

    @abstractmethod
    async def remove(self, name: str) -> None:
        """Stop serving ``name`` here (returns once the change is sent to Serve)."""

    @abstractmethod
    async def wait_removed(self, name: str, timeout_s: float) -> bool:
        """Wait until no replica here holds ``name``; whether it happened in time."""

    @abstractmethod
    def replica_targets(self, name: str) -> list[ReplicaTarget]:
        """The deployments whose replicas hold ``name``."""


class OwnApplication(ModelHome):
    """Models with a Serve application of their own, named after the model."""

    async def deploy(self, placed: list[Placed]) -> None:
        targets = []
        for entry in placed:
            name = entry.model.name
            application = model_application(
                entry.model,
                entry.generation,
                self.max_input_size,
                entry.nodes,
                instances=self.instances,
                traffic=entry.traffic,
                recycle_round=entry.recycle_round,
                measure_footprint=entry.measure_footprint,
                placement=entry.placement,
            )
            targets.append(DeployTarget(name, application, f"/v2/models/{name}"))
            self._held[name] = entry.placement
        await self.apps.deploy(targets)

    async def wait_loaded(self, name: str, generation: str | None, timeout_s: float) -> LoadOutcome:
        async def outcome() -> LoadOutcome | None:
            return settled(await self.apps.slot_statuses(name), generation)

        return await self.apps.wait_loaded(name, outcome, timeout_s)

    async def remove(self, name: str) -> None:
        self._held.pop(name, None)
        await self.apps.delete(name)

    async def wait_removed(self, name: str, timeout_s: float) -> bool:
        return await self.apps.wait_deleted(name, timeout_s)

    def replica_targets(self, name: str) -> list[ReplicaTarget]:
        return [(name, name)]

    def application(self, name: str) -> str:
        return name

    async def replica_statuses(self, name: str) -> list[SlotStatus | None]:
        return list(await self.apps.slot_statuses(name))

    async def serves(self, name: str) -> bool:
        """Whether Serve runs an application for ``name`` (deployed by anyone)."""
        status, _ = await self.apps.app_status(name)
        return bool(status)


class WatchedApplication(OwnApplication):
    """Models a Serve config deploys, each in an application named after it: the controller
    waits for whatever generation the config runs (its own fingerprint may differ), and
    deploys and removes nothing."""

    async def deploy(self, placed: list[Placed]) -> None:
        for entry in placed:
            self._held[entry.model.name] = entry.placement

    async def wait_loaded(self, name: str, generation: str | None, timeout_s: float) -> LoadOutcome:
        return await super().wait_loaded(name, None, timeout_s)

    async def remove(self, name: str) -> None:
        self._held.pop(name, None)  # the config's to remove

    async def wait_removed(self, name: str, timeout_s: float) -> bool:
        return True


class RoutedGroups(OwnApplication):
    """Models whose own application is a router in front of a deployment per replica group:
    the groups' replicas load the model, and the router must have seen them ready."""

    def _groups(self, name: str) -> list[str]:
        placement = self._held.get(name)
        return [group.name for group in placement.groups] if placement is not None else []

    async def wait_loaded(self, name: str, generation: str | None, timeout_s: float) -> LoadOutcome:
        groups = self._groups(name)

        async def outcome() -> LoadOutcome | None:
            per_group = await asyncio.gather(
                *(self.apps.slot_statuses(name, group) for group in groups)
            )
            if not all(per_group):
                return None
            found = settled([r for replicas in per_group for r in replicas], generation)
            if found is None or not found.ok:
                return found
            routers = await self.apps.slot_statuses(name)
            if not routers or any(not same_states(r.versions, found.versions) for r in routers):
                return None  # the router has not seen its groups ready yet
            return found

        return await self.apps.wait_loaded(name, outcome, timeout_s)

    def replica_targets(self, name: str) -> list[ReplicaTarget]:
        return [(name, name), *((group, name) for group in self._groups(name))]

    async def replica_statuses(self, name: str) -> list[SlotStatus | None]:
        per_group = await asyncio.gather(
            *(self.apps.slot_statuses(name, group) for group in self._groups(name))
        )
        return [status for replicas in per_group for status in replicas]


class SharedHost(ModelHome):
    """CPU models served together by the shared host application, each of its ``replicas``
    holding them all. This home owns the hosted set (:class:`HostedSet`): the application is
    deployed once, its replicas take the set as they start, and each change goes straight to
    the running replicas, which apply it in place."""

    def __init__(
        self,
        apps: ServeModelApps,
        max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
        replicas: int = 1,
        instances: InstanceOptions = DEFAULT_INSTANCES,
        node: str | None = None,
    ):
        super().__init__(apps, max_input_size, instances)
        self.replicas = replicas
        self.node = node  # where its replicas run (None: Serve's choice)
        self._entries: dict[str, dict[str, Any]] = {}  # the hosted set, by model
        self._revision = 0
        self._deployed = False  # the host application, once deployed by this home
        # One change of the host at a time, each sent as the entries are then (replicas also
        # drop a set older than one they applied).
        self._publishing = asyncio.Lock()

    async def deploy(self, placed: list[Placed]) -> None:
        for entry in placed:
            self._entries[entry.model.name] = hosted_model_entry(
                entry.model,
                entry.generation,
                self.instances,
                entry.traffic,
                entry.measure_footprint,
            )
            self._held[entry.model.name] = entry.placement
        await self._publish()

    def hosted_set(self) -> HostedSet:
        """The models the host's replicas are to serve now."""
        return HostedSet(self._revision, dict(self._entries))

    async def _publish(self) -> None:
        """Send the hosted set to the running replicas (deploying the application first)."""
        async with self._publishing:
            self._revision = max(self._revision + 1, time.time_ns())
            if not self._deployed:
                host = host_application(self.max_input_size, self.replicas, self.node)
                await self.apps.deploy([DeployTarget(HOST_APP_NAME, host, HOST_ROUTE_PREFIX)])
                self._deployed = True  # its replicas ask for the set as they start
                return
            await self.apps.send_hosted_set(self.hosted_set())

    async def wait_loaded(self, name: str, generation: str | None, timeout_s: float) -> LoadOutcome:
        async def outcome() -> LoadOutcome | None:
            return settled(await self.apps.hosted_statuses(name), generation)

        return await self.apps.wait_loaded(HOST_APP_NAME, outcome, timeout_s)

    async def remove(self, name: str) -> None:
        self._held.pop(name, None)
        if self._entries.pop(name, None) is not None:
            await self._publish()

    async def wait_removed(self, name: str, timeout_s: float) -> bool:
        return await self.apps.wait_unhosted(name, timeout_s)

    def replica_targets(self, name: str) -> list[ReplicaTarget]:
        return [(HOST_DEPLOYMENT_NAME, HOST_APP_NAME)]

    def application(self, name: str) -> str:
        return HOST_APP_NAME

    async def replica_statuses(self, name: str) -> list[SlotStatus | None]:
        return list(await self.apps.hosted_statuses(name))


class ModelHomes:
    """The three homes, and which one a model lives in."""

    def __init__(
        self,
        apps: ServeModelApps,
        max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
        share_cpu_models: bool = True,
        deploys: bool = True,
        host_replicas: int = 1,
        instances: InstanceOptions = DEFAULT_INSTANCES,
        host_node: str | None = None,
    ) -> None:
        """``deploys`` False: a Serve config deploys the models (every model is watched).
        ``instances``: how replicas run the models' instances.
        ``host_node``: the node the shared host's replicas run on (None: Serve's choice)."""
        self.own = OwnApplication(apps, max_input_size, instances)
        self.routed = RoutedGroups(apps, max_input_size, instances)
        self.host = SharedHost(apps, max_input_size, host_replicas, instances, host_node)
        self.watched = WatchedApplication(apps, max_input_size, instances)
        self._share_cpu_models = share_cpu_models
        self._deploys = deploys

    @property
    def all(self) -> tuple[ModelHome, ...]:
        return (self.own, self.routed, self.host, self.watched)

    def home_for(self, placement: ModelPlacement) -> ModelHome:
        """Where a model placed so is deployed: CPU models with a fixed count in the shared
        host when sharing is on (a GPU, autoscaled or isolated model, one with an environment
        of its own, needs deployments of its own); else in an application of its own, behind
        a router when its groups need different resources. Watched, when a Serve config
        deploys the models."""
        if not self._deploys:
            return self.watched
        if (
            self._share_cpu_models
            and not placement.uses_gpu
            and not placement.isolated
            and placement.groups[0].autoscaling_config is None
        ):
            return self.host
        return self.routed if placement.routed else self.own

    def home_of(self, name: str) -> ModelHome | None:
        """The home holding ``name`` now (None: none of these deployed it)."""
        return next((home for home in self.all if home.holds(name)), None)

    def replica_targets(self, served: list[str]) -> list[ReplicaTarget]:
        """The deployments whose replicas hold ``served`` (each once): a model this server did
        not deploy (a Serve config owns it) has an application named after it."""
        targets: dict[ReplicaTarget, None] = {}
        for name in served:
            home = self.home_of(name) or self.own
            targets.update(dict.fromkeys(home.replica_targets(name)))
        return list(targets)
