"""Model applications on Serve: deploy, reconfigure, delete, and wait until a change took.

Used by the repository controller only. Serve's client calls block, so they run in worker
threads; one status snapshot (Serve's, and the shared host's) is shared by every wait in
flight (40 models loading at once ask once per poll, not 40 times).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ray.serve import Application

from cluster.serve_internals import (
    delete_without_waiting,
    run_many_without_waiting,
    serve_applications,
)
from deployments.apps.handles import HOST_APP_NAME, HOST_DEPLOYMENT_NAME, broadcast
from deployments.apps.replica_api import ModelReplicaApi, SharedHostApi
from deployments.core.model_host import HostedSet
from deployments.core.model_slot import SlotStatus
from repo_adapter.model_state import ModelState, VersionStates

logger = logging.getLogger(__name__)

# Serve logs a line per request by default: measurable CPU on the request path.
ACCESS_LOG_OFF = {"enable_access_log": False}
# How often a wait for replicas reads their state (a load on demand waits on it)
_POLL_S = 0.2
# Serve's status costs its caller a few ms of CPU and Serve's controller more: read at most
# once a second, however many waits poll.
_SERVE_STATUS_MAX_AGE_S = 1.0
_STATUS_TIMEOUT_S = 10.0
_FAILED = ("DEPLOY_FAILED", "UNHEALTHY")


class _SharedSnapshot:
    """One fetch shared by every wait in flight, at most every ``max_age_s``."""

    def __init__(self, fetch: Callable[[], Awaitable[Any]], max_age_s: float) -> None:
        self._fetch = fetch
        self._max_age_s = max_age_s
        self._value: Any = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> Any:
        async with self._lock:
            if self._value is None or time.monotonic() - self._at > self._max_age_s:
                self._value = await self._fetch()
                self._at = time.monotonic()
            return self._value


@dataclass(frozen=True)
class DeployTarget:
    """One application to deploy (or update): its name, the application, its route prefix."""

    name: str
    application: Application
    route_prefix: str


@dataclass
class LoadOutcome:
    """How a deploy ended: the replicas' version states, or why it failed."""

    ok: bool
    versions: VersionStates
    reason: str = ""


class ServeModelApps:
    """Applies model changes to Serve, one application per model (named after it)."""

    def __init__(self) -> None:
        self._serve_status = _SharedSnapshot(
            lambda: asyncio.to_thread(serve_applications), _SERVE_STATUS_MAX_AGE_S
        )
        # Each deployment's (status, trigger) at the last replica_failures call.
        self._deployment_states: dict[tuple[str, str], tuple[str, str]] = {}
        self._hosted = _SharedSnapshot(self._fetch_hosted_statuses, _POLL_S / 2)

    async def deploy(self, targets: list[DeployTarget]) -> None:
        """Deploy (or update) ``targets`` together, without waiting for them to run."""
        if not targets:
            return
        applications = [(t.name, t.application, t.route_prefix) for t in targets]
        await asyncio.to_thread(
            run_many_without_waiting, applications, logging_config=ACCESS_LOG_OFF
        )

    async def delete(self, name: str) -> None:
        await asyncio.to_thread(delete_without_waiting, name)

    async def app_status(self, name: str) -> tuple[str, str]:
        """``(status, message)`` of application ``name``; ``("", "")`` when Serve has none."""
        app = (await self._serve_status.get()).get(name)
        if app is None:
            return "", ""
        messages = [app.message] if app.message else []
        for deployment in app.deployments.values():
            if deployment.message:
                messages.append(deployment.message)
        return app.status, " ".join(messages)

    async def running_replicas(self, targets: list[tuple[str, str]]) -> int:
        """How many replicas of ``targets`` (deployment, application) run now."""
        applications = await self._serve_status.get()
        running = 0
        for deployment_name, app_name in targets:
            app = applications.get(app_name)
            deployment = app.deployments.get(deployment_name) if app is not None else None
            if deployment is not None:
                running += int(deployment.replica_states.get("RUNNING", 0))
        return running

    async def replica_failures(self) -> dict[str, str]:
        """Applications where a replica failed since the last call -> Serve's message: a
        deployment Serve marks UNHEALTHY now (a replica stopped or failed its health check,
        until Serve's replacement runs), or one that recovered from that since the last call
        (the replacement can start between two calls: Serve's status then says HEALTHY with
        no trigger, which only a recovery leaves)."""
        applications = await self._serve_status.get()
        states: dict[tuple[str, str], tuple[str, str]] = {}
        failures: dict[str, str] = {}
        for name, app in applications.items():
            for deployment_name, deployment in app.deployments.items():
                state = (deployment.status, deployment.status_trigger)
                before = self._deployment_states.get((name, deployment_name))
                states[(name, deployment_name)] = state
                if state[0] == _UNHEALTHY and (before is None or before[0] != _UNHEALTHY):
                    failures[name] = deployment.message or "a replica failed its health check"
                elif state == _RECOVERED and before not in (None, _RECOVERED):
                    if before[0] != _UNHEALTHY:  # the UNHEALTHY time fell between two calls
                        failures[name] = "a replica failed and was replaced"
        self._deployment_states = states
        return failures

    async def slot_statuses(self, name: str, deployment: str = "") -> list[SlotStatus]:
        """Every replica's slot status of model ``name`` in application ``name``'s
        ``deployment`` (default: the one named after it); empty if unreachable (replicas
        starting or stopping)."""
        target = (deployment or name, name)
        return await broadcast([target], ModelReplicaApi.slot_status, name)

    async def hosted_statuses(self, model: str) -> list[SlotStatus | None]:
        """``model``'s slot status in every replica of the shared host (None: not there)."""
        return [statuses.get(model) for statuses in await self._hosted.get()]

    async def send_hosted_set(self, hosted: HostedSet) -> None:
        """``hosted`` to every running replica of the shared host (one starting now takes it
        from the controller)."""
        target = (HOST_DEPLOYMENT_NAME, HOST_APP_NAME)
        await broadcast([target], SharedHostApi.host_models, hosted)

    async def _fetch_hosted_statuses(self) -> list[dict[str, SlotStatus]]:
        target = (HOST_DEPLOYMENT_NAME, HOST_APP_NAME)
        return await broadcast([target], SharedHostApi.hosted_statuses)

    async def wait_loaded(
        self, app: str, read_outcome: Callable[[], Awaitable[LoadOutcome | None]], timeout_s: float
    ) -> LoadOutcome:
        """Wait until application ``app`` runs and ``read_outcome()`` (what its replicas
        report) has an outcome, or the application failed, or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        message = ""
        while time.monotonic() < deadline:
            status, message = await self.app_status(app)
            if status in _FAILED:
                return LoadOutcome(False, {}, message or f"application {status}")
            if status == "RUNNING":
                outcome = await read_outcome()
                if outcome is not None:
                    return outcome
            await asyncio.sleep(_POLL_S)
        return LoadOutcome(
            False, {}, f"not ready after {timeout_s:g} s" + (f": {message}" if message else "")
        )

    async def wait_unhosted(self, name: str, timeout_s: float) -> bool:
        """Wait until no replica of the shared host has ``name`` any more."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not any(await self.hosted_statuses(name)):
                return True
            await asyncio.sleep(_POLL_S)
        return False

    async def wait_deleted(self, name: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, _ = await self.app_status(name)
            if not status:
                return True
            await asyncio.sleep(_POLL_S)
        return False


def same_states(first: VersionStates, second: VersionStates) -> bool:
    """Whether two replicas report the same state for each version (reasons aside)."""
    return _states(first) == _states(second)


def _states(versions: VersionStates) -> dict[str, ModelState]:
    return {v: s.state for v, s in versions.items()}


_UNHEALTHY = "UNHEALTHY"
# Serve's status of a deployment that recovered from UNHEALTHY (and of nothing else).
_RECOVERED = ("HEALTHY", "UNSPECIFIED")


def settled(replicas: list[SlotStatus | None], generation: str | None) -> LoadOutcome | None:
    """The outcome once every replica serves ``generation`` or gave up on it; else None."""
    if not replicas or any(replica is None for replica in replicas):
        return None
    versions: VersionStates = {}
    for replica in replicas:
        assert replica is not None
        wanted = generation if generation is not None else replica.target
        if replica.target != wanted:
            return None  # not reconfigured yet
        if replica.error:
            return LoadOutcome(False, replica.versions, replica.error)
        if replica.generation != wanted:
            return None  # still loading beside the serving generation
        versions = replica.versions
    return LoadOutcome(True, versions)
