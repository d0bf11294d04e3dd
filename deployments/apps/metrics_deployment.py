"""The ``rayton-metrics`` application: Triton's Prometheus endpoint (``:8002/metrics``).

One replica serves ``GET /metrics`` on ``metrics_host:metrics_port`` from its own small
HTTP server (Serve's proxy has one port per cluster; Triton's metrics have their own). Each
scrape asks every model replica for its counters through Serve handles: the shared host's
replicas in one broadcast, each dedicated model's replicas in another (the repository
controller says which exist), and sums them (:mod:`deployments.metrics.collector`).

The application has no HTTP route. It binds its port in the constructor, so a port in use
fails the deployment with the reason, as tritonserver refuses to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import Any

from ray import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from cluster.memory_budget import BudgetUsage
from cluster.serve_internals import ray_metrics_report_interval_s, session_dir
from deployments.apps.handles import broadcast
from deployments.apps.replica_api import ReplicaControlApi
from deployments.apps.replica_control import ControlledReplica, ReplicaControl
from deployments.apps.repository_access import ControllerRepository
from deployments.core.response_cache import CacheUsage
from deployments.metrics.collector import MetricsCollector, MetricsSnapshot
from deployments.metrics.exposition import CONTENT_TYPE
from deployments.metrics.grafana import install_for_ray
from deployments.metrics.options import MetricsAppArgs
from deployments.metrics.ray_export import RayMetricsMirror
from deployments.metrics.replica_gauges import ModelScaling
from repo_adapter.live_repository import IndexEntry

logger = logging.getLogger(__name__)

METRICS_APP_NAME = "rayton-metrics"
METRICS_DEPLOYMENT_NAME = "metrics"
_SNAPSHOT_TIMEOUT_S = 10.0


class _QuietServer:
    """uvicorn's server without its signal handlers: the replica process belongs to Ray."""

    def __init__(self, app: Starlette, sock: socket.socket) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):
                yield

        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = Server(config)
        self.task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[sock]))

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.task, 5)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class TritonMetrics(ControlledReplica):
    """Hosts ``/metrics``; receives no Serve requests itself."""

    async def __init__(self, args: MetricsAppArgs | dict[str, Any]) -> None:
        self.args = MetricsAppArgs.model_validate(args)
        self._controller = ControllerRepository()
        self.collector = MetricsCollector(
            self._replica_snapshots,
            self.args,
            self._cache_usage,
            self._model_scaling,
            self._memory_budget,
            self._model_states,
        )
        self._ray_metrics = RayMetricsMirror()
        sock = socket.socket(socket.AF_INET6 if ":" in self.args.metrics_host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.args.metrics_host, self.args.metrics_port))
        except OSError as err:
            sock.close()
            raise RuntimeError(
                f"failed to start the metrics service: {self.args.metrics_host}:"
                f"{self.args.metrics_port}: {err.strerror}"
            ) from None
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/metrics", self._metrics, methods=["GET"])])
        self._server = _QuietServer(app, sock)
        self._sampler = asyncio.get_running_loop().create_task(self._sample_every_interval())
        logger.info("Triton metrics on http://%s:%d/metrics", self.args.metrics_host, self.port)
        if session_dir():  # the families this exports to Ray, beside Ray's own dashboards
            install_for_ray(session_dir())
        self.control = ReplicaControl(held_models=list, traces=False)
        self.control.adopt_controller_settings()

    async def _metrics(self, request: Request) -> Response:
        try:
            text = await self.collector.text()
        except Exception as err:  # never a traceback page: the scraper logs the error
            logger.exception("metrics collection failed")
            return PlainTextResponse(f"metrics collection failed: {err}\n", status_code=500)
        return Response(text, media_type=CONTENT_TYPE)

    async def _sample_every_interval(self) -> None:
        """Triton's per-interval gauges; and the same families into Ray's metrics, as often
        as Ray reports them: each export asks every replica for its counters, and values set
        between two of Ray's reports are overwritten unread."""
        interval = self.args.metrics_interval_ms / 1000
        export_every = max(interval, ray_metrics_report_interval_s())
        exported_at = float("-inf")
        while True:
            await asyncio.sleep(interval)
            try:
                self.collector.sample_system()
                if time.monotonic() - exported_at >= export_every - interval / 2:
                    exported_at = time.monotonic()
                    self._ray_metrics.export(await self.collector.families())
            except Exception:
                logger.exception("sampling or exporting metrics failed")

    async def _replica_snapshots(self) -> list[MetricsSnapshot]:
        # Bounded: a controller that does not answer must not hang scrapes or the Ray export.
        targets = await asyncio.wait_for(
            self._controller.handle.model_deployments.remote(), _SNAPSHOT_TIMEOUT_S
        )
        return await broadcast(
            targets, ReplicaControlApi.metrics_snapshot, timeout_s=_SNAPSHOT_TIMEOUT_S
        )

    async def _cache_usage(self) -> list[CacheUsage] | None:
        return await asyncio.wait_for(
            self._controller.handle.response_cache_usage.remote(), _SNAPSHOT_TIMEOUT_S
        )

    async def _model_scaling(self) -> list[ModelScaling]:
        return await asyncio.wait_for(
            self._controller.handle.model_scaling.remote(), _SNAPSHOT_TIMEOUT_S
        )

    async def _model_states(self) -> list[IndexEntry]:
        return await self._controller.index(ready_only=False)

    async def _memory_budget(self) -> BudgetUsage | None:
        return await asyncio.wait_for(
            self._controller.handle.memory_budget.remote(), _SNAPSHOT_TIMEOUT_S
        )

    def metrics_port(self) -> int:
        return self.port

    async def __del__(self) -> None:
        sampler = getattr(self, "_sampler", None)
        if sampler is not None:
            sampler.cancel()
        server = getattr(self, "_server", None)
        if server is not None:
            await server.stop()
