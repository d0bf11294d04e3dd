"""Triton's log settings across the cluster: every rayton replica follows the controller's.

The repository controller owns the settings (:class:`~deployments.core.log_settings.
LogSettings`); a change is applied in the controller, then broadcast to every replica of every
rayton deployment, whose ``apply_log_settings`` runs :func:`apply_in_this_replica`; a replica
that starts later adopts them from the controller (:func:`adopt_log_settings`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve

from deployments.apps.repository_access import CONTROLLER_APP_NAME, CONTROLLER_DEPLOYMENT_NAME
from deployments.core.log_settings import LogSettings, apply_log_settings

logger = logging.getLogger(__name__)

_TIMEOUT_S = 10.0


def apply_in_this_replica(settings: dict[str, Any]) -> None:
    """The deployments' ``apply_log_settings`` method body (settings as JSON)."""
    try:
        apply_log_settings(LogSettings(**settings))
    except OSError as err:  # the log file cannot be opened on this node
        logger.error("cannot apply log settings here: %s", err)


async def adopt_log_settings() -> None:
    """A starting replica takes the controller's settings (Triton's defaults without one)."""
    try:
        handle = serve.get_deployment_handle(
            CONTROLLER_DEPLOYMENT_NAME, app_name=CONTROLLER_APP_NAME
        )
        settings = await asyncio.wait_for(handle.log_settings.remote(), _TIMEOUT_S)
    except Exception as err:  # no controller yet (a Serve config deploying): the defaults
        logger.debug("no log settings from the controller: %s", err)
        settings = LogSettings().to_json()
    apply_in_this_replica(settings)
