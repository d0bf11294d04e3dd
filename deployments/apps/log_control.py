"""Triton's log settings across the cluster: every rayton replica follows the controller's.

The repository controller owns the settings (:class:`~deployments.observability.log_settings.
LogSettings`) through a :class:`LogControl`: a change is applied in the controller, then
broadcast to every replica of every rayton deployment, whose ``apply_log_settings`` runs
:func:`apply_in_this_replica`; a replica that starts later adopts them from the controller
(:func:`adopt_log_settings`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from ray import serve

from deployments.apps.handles import broadcast
from deployments.apps.replica_api import ReplicaControlApi
from deployments.apps.repository_access import CONTROLLER_APP_NAME, CONTROLLER_DEPLOYMENT_NAME
from deployments.observability.log_settings import (
    LogSettings,
    LogSettingsDocument,
    apply_log_settings,
    log_settings_error,
)
from repo_adapter.inference_types import JsonObject

logger = logging.getLogger(__name__)

_TIMEOUT_S = 10.0
Targets = Callable[[], Iterable[tuple[str, str]]]


class LogControl:
    """The controller's side: the settings every replica follows, and changing them."""

    def __init__(self, startup: LogSettings, targets: Targets) -> None:
        """``targets()``: the ``(deployment, application)`` of every rayton deployment now."""
        self._settings = startup
        self._targets = targets
        apply_log_settings(startup)

    def settings(self) -> LogSettingsDocument:
        """Triton's log settings document."""
        return self._settings.to_json()

    async def update(self, changes: JsonObject) -> LogSettingsDocument:
        """Change the settings here and in every replica; Triton's errors for a bad setting.

        Raises:
            InferenceServerError: INVALID_ARG for an unknown key, a wrong type, or a log file
                that cannot be opened (nothing changes then).
        """
        settings = self._settings.updated(changes)
        try:
            apply_log_settings(settings)
        except OSError as err:
            raise log_settings_error(err) from None
        self._settings = settings
        await broadcast(list(self._targets()), ReplicaControlApi.apply_log_settings, settings)
        return settings.to_json()


def apply_in_this_replica(settings: LogSettings) -> None:
    """The deployments' ``apply_log_settings`` method body."""
    try:
        apply_log_settings(settings)
    except OSError as err:  # the log file cannot be opened on this node
        logger.error("cannot apply log settings here: %s", err)


async def adopt_log_settings() -> None:
    """A starting replica takes the controller's settings (Triton's defaults without one)."""
    try:
        handle = serve.get_deployment_handle(
            CONTROLLER_DEPLOYMENT_NAME, app_name=CONTROLLER_APP_NAME
        )
        settings = LogSettings(**await asyncio.wait_for(handle.log_settings.remote(), _TIMEOUT_S))
    except Exception as err:  # no controller yet (a Serve config deploying): the defaults
        logger.debug("no log settings from the controller: %s", err)
        settings = LogSettings()
    apply_in_this_replica(settings)
