"""Triton's request tracing across the cluster: the controller's side and the replicas' side.

The repository controller holds one :class:`TraceControl`: it owns the trace settings
(:class:`~deployments.observability.trace_settings.TraceSettingsTable`) and where traces go:
the trace file (:class:`~deployments.observability.trace_file.TraceFileWriter`) or, in
``opentelemetry`` mode, a collector (:class:`~deployments.observability.trace_otlp.
OtlpTraceExporter`). A settings change is broadcast to every model replica
(``apply_trace_settings`` -> :func:`apply_in_this_replica`); a replica that starts later adopts
the table (:func:`adopt_trace_settings`). Each replica's tracer ships its finished traces to
the controller's ``record_traces``, which counts them against ``trace_count`` (broadcasting the
change when a count runs out) and writes or exports them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from ray import serve

from deployments.apps.handles import broadcast
from deployments.apps.replica_api import ReplicaControlApi
from deployments.apps.repository_access import CONTROLLER_APP_NAME, CONTROLLER_DEPLOYMENT_NAME
from deployments.apps.server_args import ServerAppArgs
from deployments.observability.trace_file import TraceFileWriter
from deployments.observability.trace_otlp import OtlpTraceExporter
from deployments.observability.trace_settings import (
    TRACE_MODE,
    TracePlan,
    TraceSettings,
    TraceSettingsDocument,
    TraceSettingsTable,
)
from deployments.observability.tracing import TRACER
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import JsonObject
from repo_adapter.request_trace import TraceRecord

logger = logging.getLogger(__name__)

_TIMEOUT_S = 10.0
Targets = Callable[[], Iterable[tuple[str, str]]]


def startup_exporter(spec: ServerAppArgs) -> OtlpTraceExporter | None:
    """The OpenTelemetry exporter ``--trace-config mode=opentelemetry`` asks for, or None."""
    if spec.trace_mode != "opentelemetry":
        return None
    return OtlpTraceExporter(spec.trace_otel_url, spec.trace_otel_resource)


def startup_trace_settings(spec: ServerAppArgs) -> TraceSettings:
    """The ``--trace-config`` settings the server starts with."""
    return TraceSettings(
        level=tuple(level for level in spec.trace_level if level != "OFF"),
        rate=spec.trace_rate,
        count=spec.trace_count,
        log_frequency=spec.trace_log_frequency,
        file=spec.trace_file,
        mode=spec.trace_mode,
    )


class TraceControl:
    """The trace settings and where traces go: Triton's trace file, or an OpenTelemetry
    collector in ``opentelemetry`` mode (the controller's)."""

    def __init__(
        self, startup: TraceSettings, targets: Targets, exporter: OtlpTraceExporter | None = None
    ) -> None:
        self.table = TraceSettingsTable(startup)
        self._targets = targets  # (deployment, application) of every model replica set
        triton_file = startup.mode == TRACE_MODE and startup.file
        self._writer = TraceFileWriter(startup.file) if triton_file else None
        self._exporter = exporter if startup.mode != TRACE_MODE else None

    async def settings(
        self, model: str | None, changes: JsonObject | None, served: Iterable[str]
    ) -> TraceSettingsDocument:
        """Triton's view of the server's or ``model``'s settings, changed first by
        ``changes``; INVALID_ARG for a model that is not served."""
        if model and model not in set(served):
            raise InferenceServerError(f"Request for unknown model : {model}")
        if changes is None:
            return self.table.view(model)
        frequency = self.table.server.log_frequency
        view = self.table.update(changes, model)
        if self._writer is not None and self.table.server.log_frequency != frequency:
            self._writer.flush()  # Triton writes the traces of the old frequency out
        await self._broadcast()
        return view

    async def record(self, records: list[TraceRecord]) -> None:
        """Traces from a replica: keep those ``trace_count`` allows and write them."""
        if self._writer is None and self._exporter is None:
            return
        kept: list[TraceRecord] = []
        exhausted = False
        by_model: dict[str, list[TraceRecord]] = {}
        for record in records:
            by_model.setdefault(record["model_name"], []).append(record)
        for model, traces in by_model.items():
            children = [t for t in traces if t.get("parent_key")]
            roots = [t for t in traces if not t.get("parent_key")]
            allowed = self.table.take(model, len(roots)) if roots else 0
            kept += roots[:allowed] + children  # a kept trace keeps its children
            owner = self.table.count_owner(model)
            exhausted |= bool(roots) and self.table.effective(owner or None).count == 0
        if self._writer is not None:
            self._writer.write(kept, self.table.server.log_frequency)
        elif self._exporter is not None and kept:
            await asyncio.to_thread(self._exporter.export, kept)
        if exhausted:
            await self._broadcast()  # the replicas stop tracing

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    async def _broadcast(self) -> None:
        plan = self.table.plan()
        await broadcast(list(self._targets()), ReplicaControlApi.apply_trace_settings, plan)


# --------------------------------------------------------------------- in each model replica


async def _ship(records: list[TraceRecord]) -> None:
    handle = serve.get_deployment_handle(CONTROLLER_DEPLOYMENT_NAME, app_name=CONTROLLER_APP_NAME)
    await asyncio.wait_for(handle.record_traces.remote(records), _TIMEOUT_S)


async def controller_trace_setting(model: str, changes: JsonObject | None) -> TraceSettingsDocument:
    """A model route's ``trace/setting``: the controller's answer for ``model``."""
    handle = serve.get_deployment_handle(CONTROLLER_DEPLOYMENT_NAME, app_name=CONTROLLER_APP_NAME)
    return await asyncio.wait_for(handle.trace_settings.remote(model, changes), _TIMEOUT_S)


def apply_in_this_replica(plan: TracePlan) -> None:
    """The model deployments' ``apply_trace_settings`` method body."""
    TRACER.configure(plan)
    TRACER.set_sink(_ship)


async def adopt_trace_settings() -> None:
    """A starting replica takes the controller's trace settings (tracing stays off without)."""
    TRACER.set_sink(_ship)
    try:
        handle = serve.get_deployment_handle(
            CONTROLLER_DEPLOYMENT_NAME, app_name=CONTROLLER_APP_NAME
        )
        plan = await asyncio.wait_for(handle.trace_table.remote(), _TIMEOUT_S)
    except Exception as err:  # no controller yet (a Serve config deploying)
        logger.debug("no trace settings from the controller: %s", err)
        return
    TRACER.configure(plan)
