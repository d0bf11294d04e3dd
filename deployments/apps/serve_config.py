"""``serve_config.yaml`` for a repository: what ``serve run`` / ``serve deploy`` accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cluster.local import REPLICA_MESSAGE_ENV
from deployments.apps.builders import AppPlan
from deployments.apps.model_apps import ACCESS_LOG_OFF

__all__ = ["ACCESS_LOG_OFF", "serve_config", "write_serve_config"]


def serve_config(
    plans: list[AppPlan],
    http_host: str = "127.0.0.1",
    http_port: int = 8000,
    proxy_location: str = "EveryNode",
) -> dict[str, Any]:
    """A ``ServeDeploySchema`` dict: one application per plan, deployments named per model."""
    applications = []
    for plan in plans:
        app: dict[str, Any] = {
            "name": plan.name,
            "route_prefix": plan.route_prefix,
            "import_path": plan.import_path,
            "args": plan.args,
            # Every replica of every application: tensors over 4 MiB between replicas.
            "runtime_env": {"env_vars": dict(REPLICA_MESSAGE_ENV)},
        }
        if plan.deployments:
            app["deployments"] = [dict(d) for d in plan.deployments]
        applications.append(app)
    return {
        "proxy_location": proxy_location,
        "http_options": {"host": http_host, "port": http_port},
        "logging_config": dict(ACCESS_LOG_OFF),
        "applications": applications,
    }


def write_serve_config(path: Path, config: dict[str, Any], header: str = "") -> None:
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    path.write_text(header + text)
