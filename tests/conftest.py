"""Shared fixtures: one real local Ray cluster + Serve per test session, and generated repositories.

Cluster tests are marked ``cluster``; everything binds to 127.0.0.1 and test servers get
OS-assigned ports outside Ray's worker (10002-19999) and HAProxy (30000-31000,
40000-41000) ranges.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import free_port

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Ray 2.60 turns token auth on by default


@dataclass
class ServeCluster:
    """A running local Ray cluster with Serve's HTTP proxy on ``http_url``."""

    http_port: int
    ray_metrics_port: int  # the node's Ray metrics agent (Prometheus text on /metrics)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def deploy_repository(
        self,
        repository: Path,
        models: list[str] | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
    ) -> list[str]:
        """Deploy a repository's applications (server app included); returns app names.

        ``grpc_port`` / ``metrics_port``: also deploy the gRPC / metrics application,
        listening on 127.0.0.1 there.
        """
        from deployments.apps.builders import plan_applications

        plans, _ = plan_applications(
            repository, models, grpc_port=grpc_port, metrics=_metrics_args(metrics_port)
        )
        return self._run(plans)

    def _run(self, plans) -> list[str]:
        """Deploy the applications of ``plans`` and wait for the controller's start-up."""
        from ray import serve
        from ray.serve.api import RunTarget

        targets = [
            RunTarget(plan.build(), name=plan.name, route_prefix=plan.route_prefix)
            for plan in plans
        ]
        serve.run_many(targets, wait_for_applications_running=True)
        self.wait_for_repository()
        return [plan.name for plan in plans]

    def deploy_live(
        self,
        repository: Path,
        model_control_mode: str = "explicit",
        load_models: list[str] | None = None,
        grpc_port: int | None = None,
        poll_secs: float = 1.0,
        cpu_models: str = "shared",
        host_replicas: int = 1,
        python_instances: str = "stub-process",
        model_file_override_dir: str | None = None,
        backend_directory: str | None = None,
        backend_config: list[str] | None = None,
        metrics_port: int | None = None,
        log_file: str = "",
        trace: dict[str, Any] | None = None,
        http_max_input_size: int | None = None,
        cache_config: list[str] | None = None,
        allow_client_shm: bool = False,
        metrics_config: list[str] | None = None,
        server_options: dict[str, Any] | None = None,
    ) -> list[str]:
        """Deploy as ``rayton serve`` does: the repository controller deploys the models.

        ``trace``: start-up trace settings (``ServerAppArgs``' ``trace_*`` fields);
        ``server_options``: other ``ServerAppArgs`` fields.

        Returns the front applications' names; :meth:`delete_all` removes the models too.
        """

        from deployments.apps.builders import front_applications
        from deployments.apps.server_args import ServerAppArgs

        args = ServerAppArgs(
            model_repository=str(repository),
            model_control_mode=model_control_mode,
            load_models=load_models,
            repository_poll_secs=poll_secs,
            model_load_timeout_secs=120,
            deploy_models=True,
            cpu_models=cpu_models,
            host_replicas=host_replicas,
            python_instances=python_instances,
            model_file_override_dir=model_file_override_dir,
            **({"backend_directory": backend_directory} if backend_directory else {}),
            backend_config=backend_config,
            log_file=log_file,
            cache_config=cache_config,
            allow_client_shm=allow_client_shm,
            **(trace or {}),
            **({"http_max_input_size": http_max_input_size} if http_max_input_size else {}),
            **(server_options or {}),
        )
        return self._run(
            front_applications(
                args, grpc_port=grpc_port, metrics=_metrics_args(metrics_port, metrics_config)
            )
        )

    def wait_for_repository(self, timeout_s: float = 300.0) -> None:
        """Until the repository controller finished its start-up loads."""
        import time

        from ray import serve

        from deployments.apps.builders import SERVER_APP_NAME
        from deployments.apps.repository_access import CONTROLLER_DEPLOYMENT_NAME

        controller = serve.get_deployment_handle(CONTROLLER_DEPLOYMENT_NAME, SERVER_APP_NAME)
        deadline = time.monotonic() + timeout_s
        while not controller.started.remote().result(timeout_s=30):
            if time.monotonic() > deadline:
                raise TimeoutError("the repository controller did not finish loading")
            time.sleep(0.2)

    def delete_all(self, timeout_s: float = 60.0) -> None:
        """Delete every application (those the controller deployed included)."""
        from ray import serve

        self.delete(list(serve.status().applications), timeout_s)

    def delete(self, app_names: list[str], timeout_s: float = 60.0) -> None:
        """Delete applications concurrently (serve.delete one by one takes ~3 s each)."""
        import time

        from ray import serve

        for name in app_names:
            serve.delete(name, _blocking=False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not set(app_names) & set(serve.status().applications):
                return
            time.sleep(0.2)
        raise TimeoutError(f"applications not deleted within {timeout_s} s: {app_names}")


def _metrics_args(port: int | None, config: list[str] | None = None):
    from deployments.metrics.options import MetricsAppArgs

    if port is None:
        return None
    return MetricsAppArgs(metrics_port=port, metrics_config=list(config or ()))


@pytest.fixture(scope="session")
def serve_cluster() -> Iterator[ServeCluster]:
    """One Ray cluster and Serve instance for the whole test session."""
    import ray
    from ray import serve

    ray.init(
        # A cluster of the session's own: never one that RAY_ADDRESS or a ray_current_cluster
        # file (left by a killed `ray start` or `rayton cluster`, even a dead one) names.
        address="local",
        num_cpus=8,  # logical: replicas reserve fractions; the machine has 2 real cores
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        object_store_memory=256 * 1024**2,
        logging_level="WARNING",
        log_to_driver=bool(os.environ.get("RAYTON_TEST_RAY_LOGS")),
        _metrics_export_port=free_port(),
        _system_config={"metrics_report_interval_ms": 1000},  # Ray metrics tests wait less
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    (node,) = ray.nodes()
    try:
        yield ServeCluster(http_port=port, ray_metrics_port=node["MetricsExportPort"])
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="session")
def example_repository(tmp_path_factory) -> Path:
    """The example repository, generated the way the README's set-up generates it."""
    from examples.generate_repository import generate_repository, write_sample_images

    root = tmp_path_factory.mktemp("example") / "model_repository"
    generate_repository(root)
    write_sample_images(root.parent / "images")
    return root
