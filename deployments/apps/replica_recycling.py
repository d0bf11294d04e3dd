"""Replica recycling across the cluster (:mod:`cluster.recycling`): the repository controller's
:class:`ReplicaRecycler` knows how many times each model's replicas were replaced and when
they are due again; the controller replaces them by deploying the model with the next round's
code version, which Serve rolls out one replica at a time, new before old.

A model's replicas are as old as the last time its application was seen RUNNING after a
rollout (or its first load); a model whose application is not RUNNING (loading, rolling out)
is not due. Request counts are each replica's own (its counters start with the process).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from cluster.recycling import ReplicaRecycling
from deployments.apps.handles import broadcast
from deployments.apps.replica_api import ReplicaControlApi
from deployments.metrics.collector import MetricsSnapshot

logger = logging.getLogger(__name__)

AppStatus = Callable[[str], Awaitable[tuple[str, str]]]


@dataclass(frozen=True)
class RecycleCandidate:
    """A served model whose replicas are recycled: its policy, the deployments holding it and
    its application."""

    name: str
    policy: ReplicaRecycling
    targets: list[tuple[str, str]]
    application: str


class ReplicaRecycler:
    """Each recycled model's round and the age of its replicas (one owner: the controller)."""

    def __init__(self, app_status: AppStatus) -> None:
        self._app_status = app_status
        self._rounds: dict[str, int] = {}
        self._since: dict[str, float] = {}  # model -> when its replicas were seen running

    def round(self, name: str) -> int:
        """How many times ``name``'s replicas were replaced (its code version's suffix)."""
        return self._rounds.get(name, 0)

    def rounds(self) -> dict[str, int]:
        return dict(self._rounds)

    def forget(self, name: str) -> None:
        """``name`` was unloaded: a later load starts afresh."""
        self._rounds.pop(name, None)
        self._since.pop(name, None)

    async def due(self, candidates: list[RecycleCandidate]) -> list[str]:
        """The candidates whose replicas are to be replaced now."""
        now = time.monotonic()
        due = []
        for candidate in candidates:
            status, _ = await self._app_status(candidate.application)
            if status != "RUNNING":
                continue  # loading or rolling out: its replicas' age starts once it runs
            since = self._since.setdefault(candidate.name, now)
            most = 0
            if candidate.policy.max_requests is not None:
                snapshots = await broadcast(candidate.targets, ReplicaControlApi.metrics_snapshot)
                most = max((_requests(s, candidate.name) for s in snapshots), default=0)
            if candidate.policy.due(now - since, most):
                logger.info(
                    "recycling the replicas of model '%s' (round %d): %.0f s old, the busiest "
                    "answered %d requests",
                    candidate.name,
                    self.round(candidate.name) + 1,
                    now - since,
                    most,
                )
                due.append(candidate.name)
        return due

    def advance(self, name: str) -> int:
        """Start ``name``'s next round; its number."""
        self._rounds[name] = self.round(name) + 1
        self._since.pop(name, None)
        return self._rounds[name]


def _requests(snapshot: MetricsSnapshot, model: str) -> int:
    """The requests one replica answered for ``model`` (successes and failures)."""
    return sum(
        entry["success"] + sum(entry["failures"].values())
        for entry in snapshot.versions
        if entry["model"] == model
    )
