"""Request tracing in one process: which requests are traced, and where finished traces go.

Each replica's :data:`TRACER` follows the controller's trace settings
(:mod:`deployments.observability.trace_settings`, applied with :meth:`Tracer.configure`). An entry
point (the HTTP and gRPC inference routes, a model's handle ``infer``) asks :meth:`Tracer.start`
for a trace, which samples every ``rate``-th request of a model (one counter per set of
settings, as Triton), and hands it to :meth:`Tracer.finish` when the response is out. Finished
traces are shipped in small batches to the trace file's writer (the repository controller,
:mod:`deployments.observability.trace_file`), which also enforces ``count`` across replicas; this
replica counts its own traces down too, so it never sends more than ``count``.

With tracing off, :meth:`start` is one attribute test. Ray-free: the shipping function is
injected (:meth:`set_sink`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from deployments.observability.trace_settings import TracePlan, TraceSettings
from repo_adapter.inference_types import InferRequest
from repo_adapter.request_trace import RequestTrace, TraceRecord

logger = logging.getLogger(__name__)

Sink = Callable[[list[TraceRecord]], Awaitable[Any]]
SHIP_DELAY_S = 0.2  # finished traces wait this long for company before they are shipped


class Tracer:
    """Samples requests by the trace settings and ships the finished traces."""

    def __init__(self) -> None:
        self._server = TraceSettings()
        self._models: dict[str, TraceSettings] = {}
        self._any_on = False
        self._counters: dict[str, int] = {}
        self._left: dict[str, int] = {}  # settings owner -> traces this replica may still start
        self._keys = itertools.count(1)
        self._prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._sink: Sink | None = None
        self._outbox: list[TraceRecord] = []
        self._ship_task: asyncio.Task | None = None

    def configure(self, plan: TracePlan) -> None:
        """Follow the controller's trace settings (``TraceSettingsTable.plan``)."""
        server, models = plan.server, plan.models
        self._server, self._models = server, models
        self._any_on = server.tracing or any(s.tracing for s in models.values())
        self._left = {}  # the controller's counts are the truth again
        self._counters = {}

    def set_sink(self, sink: Sink | None) -> None:
        """Where finished traces go (an async callable taking a list of trace records)."""
        self._sink = sink

    def settings(self, model: str) -> TraceSettings:
        return self._models.get(model, self._server)

    def start(self, model: str, request_id: str = "", parent: str = "") -> RequestTrace | None:
        """A trace for this request of ``model`` if it is sampled (or made for a traced one)."""
        if not self._any_on and not parent:
            return None
        settings = self.settings(model)
        levels = settings.level
        if parent:  # traced because its parent is, even where this model's tracing is off
            levels = levels or ("TIMESTAMPS",)
        elif not levels:
            return None
        owner = model if model in self._models else ""
        if not parent:
            counter = self._counters.get(owner, 0) + 1
            self._counters[owner] = counter
            if counter % settings.rate:
                return None
            if settings.count >= 0:
                left = self._left.get(owner, settings.count)
                if left <= 0:
                    return None
                self._left[owner] = left - 1
        return RequestTrace(
            key=f"{self._prefix}-{next(self._keys)}",
            model_name=model,
            levels=frozenset(levels),
            parent_key=parent,
            request_id=request_id,
        )

    def finish(self, trace: RequestTrace | None) -> None:
        """``trace`` is complete: queue it for the writer (called on the event loop)."""
        if trace is None or self._sink is None:
            return
        self._outbox.append(trace.to_record())
        if self._ship_task is None or self._ship_task.done():
            self._ship_task = asyncio.get_running_loop().create_task(self._ship())

    async def _ship(self) -> None:
        await asyncio.sleep(SHIP_DELAY_S)
        records, self._outbox = self._outbox, []
        sink = self._sink
        if not records or sink is None:
            return
        try:
            await sink(records)
        except Exception as err:  # the writer is away: these traces are lost, serving is not
            logger.warning("could not ship %d traces to the trace writer: %s", len(records), err)

    async def flush(self) -> None:
        """Ship what is queued now (a replica stopping)."""
        if self._ship_task is not None and not self._ship_task.done():
            await self._ship_task


TRACER = Tracer()


def child_trace(request: InferRequest) -> RequestTrace | None:
    """Start the trace of a request made for a traced one (an ensemble step, a BLS call) that
    reached its model without a trace; the caller finishes it. None otherwise."""
    if request.trace is not None or not request.parent_trace:
        return None
    request.trace = TRACER.start(request.model_name, request.id, parent=request.parent_trace)
    return request.trace
