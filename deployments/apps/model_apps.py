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

from ray import serve
from ray.serve.api import RunTarget
from ray.serve.handle import DeploymentHandle

from deployments.apps.handles import HOST_APP_NAME, HOST_DEPLOYMENT_NAME

logger = logging.getLogger(__name__)

# Serve logs a line per request by default: measurable CPU on the request path.
ACCESS_LOG_OFF = {"enable_access_log": False}
_POLL_S = 0.5
_STATUS_TIMEOUT_S = 10.0
_FAILED = ("DEPLOY_FAILED", "UNHEALTHY")


class _SharedSnapshot:
    """One fetch shared by every wait in flight, at most every half poll interval."""

    def __init__(self, fetch: Callable[[], Awaitable[Any]]) -> None:
        self._fetch = fetch
        self._value: Any = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> Any:
        async with self._lock:
            if self._value is None or time.monotonic() - self._at > _POLL_S / 2:
                self._value = await self._fetch()
                self._at = time.monotonic()
            return self._value


@dataclass
class LoadOutcome:
    """How a deploy ended: the replicas' version states, or why it failed."""

    ok: bool
    versions: dict[str, dict[str, str]]
    reason: str = ""


class ServeModelApps:
    """Applies model changes to Serve, one application per model (named after it)."""

    def __init__(self) -> None:
        self._serve_status = _SharedSnapshot(lambda: asyncio.to_thread(serve.status))
        self._hosted = _SharedSnapshot(self._fetch_hosted_statuses)

    async def deploy(self, targets: list[tuple[str, Any, str]]) -> None:
        """Deploy (or update) ``(name, application, route prefix)`` without waiting."""
        if not targets:
            return
        runs = [
            RunTarget(app, name=name, route_prefix=route, logging_config=ACCESS_LOG_OFF)
            for name, app, route in targets
        ]
        await asyncio.to_thread(serve._run_many, runs, wait_for_applications_running=False)

    async def delete(self, name: str) -> None:
        await asyncio.to_thread(serve.delete, name, _blocking=False)

    async def app_status(self, name: str) -> tuple[str, str]:
        """``(status, message)`` of application ``name``; ``("", "")`` when Serve has none."""
        status = await self._serve_status.get()
        app = status.applications.get(name)
        if app is None:
            return "", ""
        messages = [app.message] if app.message else []
        for deployment in app.deployments.values():
            if deployment.message:
                messages.append(deployment.message)
        return str(getattr(app.status, "value", app.status)), " ".join(messages)

    async def slot_statuses(self, name: str, deployment: str = "") -> list[dict[str, Any]]:
        """Every replica's :meth:`ServedModelDeployment.slot_status` of application ``name``'s
        ``deployment`` (default: the one named after it); empty if unreachable."""
        try:
            handle: DeploymentHandle = serve.get_deployment_handle(
                deployment or name, app_name=name
            )
            return await handle.broadcast("slot_status").results_async(timeout_s=_STATUS_TIMEOUT_S)
        except Exception as err:  # replicas starting or stopping
            logger.debug("no slot status from '%s': %s", name, err)
            return []

    async def hosted_statuses(self, model: str) -> list[dict[str, Any] | None]:
        """``model``'s slot status in every replica of the shared host (None: not there)."""
        return [statuses.get(model) for statuses in await self._hosted.get()]

    async def _fetch_hosted_statuses(self) -> list[dict[str, dict[str, Any]]]:
        try:
            handle: DeploymentHandle = serve.get_deployment_handle(
                HOST_DEPLOYMENT_NAME, app_name=HOST_APP_NAME
            )
            return await handle.broadcast("hosted_statuses").results_async(
                timeout_s=_STATUS_TIMEOUT_S
            )
        except Exception as err:  # replicas starting or stopping
            logger.debug("no hosted statuses: %s", err)
            return []

    async def wait_loaded(
        self,
        name: str,
        generation: str | None,
        timeout_s: float,
        hosted: bool = False,
        groups: list[str] | None = None,
    ) -> LoadOutcome:
        """Wait until every replica serves ``generation`` of ``name`` (None: any) or fails.

        ``hosted``: ``name`` is a model of the shared host, whose replicas are checked.
        ``groups``: the deployments of a routed model's replica groups: their replicas load
        the model, and the router (named after it) must have seen them ready.
        """
        app = HOST_APP_NAME if hosted else name
        deadline = time.monotonic() + timeout_s
        message = ""
        while time.monotonic() < deadline:
            status, message = await self.app_status(app)
            if status in _FAILED:
                return LoadOutcome(False, {}, message or f"application {status}")
            if status == "RUNNING":
                if groups:
                    outcome = await self._routed_outcome(name, groups, generation)
                else:
                    replicas = await (
                        self.hosted_statuses(name) if hosted else self.slot_statuses(name)
                    )
                    outcome = _settled(replicas, generation)
                if outcome is not None:
                    return outcome
            await asyncio.sleep(_POLL_S)
        return LoadOutcome(
            False, {}, f"not ready after {timeout_s:g} s" + (f": {message}" if message else "")
        )

    async def _routed_outcome(
        self, name: str, groups: list[str], generation: str | None
    ) -> LoadOutcome | None:
        per_group = await asyncio.gather(*(self.slot_statuses(name, g) for g in groups))
        if not all(per_group):
            return None
        outcome = _settled([r for replicas in per_group for r in replicas], generation)
        if outcome is None or not outcome.ok:
            return outcome
        routers = await self.slot_statuses(name)
        if not routers or any(_states(r["versions"]) != _states(outcome.versions) for r in routers):
            return None  # the router has not seen its groups ready yet
        return outcome

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


def _states(versions: dict[str, dict[str, str]]) -> dict[str, str]:
    return {v: s["state"] for v, s in versions.items()}


def _settled(replicas: list[dict[str, Any] | None], generation: str | None) -> LoadOutcome | None:
    """The outcome once every replica serves ``generation`` or gave up on it; else None."""
    if not replicas or any(replica is None for replica in replicas):
        return None
    versions: dict[str, dict[str, str]] = {}
    for replica in replicas:
        assert replica is not None
        wanted = generation if generation is not None else replica["target"]
        if replica["target"] != wanted:
            return None  # not reconfigured yet
        if replica["error"]:
            return LoadOutcome(False, replica["versions"], replica["error"])
        if replica["generation"] != wanted:
            return None  # still loading beside the serving generation
        versions = replica["versions"]
    return LoadOutcome(True, versions)
