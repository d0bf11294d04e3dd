"""The model a replica serves, replaced in place when the repository changes: a ``ServedModel``.

A reload (new version directory, changed config, a repository ``load`` of a loaded model)
reaches a running replica as a new *generation* of its model. :class:`ModelSlot` loads the new
generation beside the serving one, switches requests to it in one assignment once it loaded,
lets requests already running on the old one finish, then closes the old one. Clients see one
atomic switch and no failed request; no Serve rollout (and no new process) is involved.

A replacement that fails to load leaves the serving generation in place and records the
reason, as Triton keeps the old model when a reload fails. The first load of a replica is
awaited (the replica is not ready before it); later loads run in the background so the replica
keeps serving while they load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from deployments.core.sequence_routing import SequenceRouting
from deployments.core.served_model import (
    ModelMetadata,
    SequenceModel,
    ServedModel,
    SteerableModel,
    StreamingModel,
)
from deployments.observability.statistics import ModelStatistics, VersionMetrics
from repo_adapter.config import ConfigDocument
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.model_state import VersionStates
from repo_adapter.response_stream import StreamedResponse
from repo_adapter.version_traffic import TrafficPolicy

logger = logging.getLogger(__name__)

# How long requests still running on a replaced model may take before it is closed anyway.
DRAIN_TIMEOUT_S = 60.0
_DRAIN_POLL_S = 0.05
_RETIRE_POLL_S = 0.2

BuildModel = Callable[[], ServedModel]

# Loads in one process run one at a time, so each measures only its own memory growth.
_measured_loads: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None


def _tree_rss() -> int:
    """Resident bytes of this process and its children (a python model's stub processes)."""
    import psutil

    me = psutil.Process()
    total = me.memory_info().rss
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
    return total


async def _build(build: BuildModel, measure: bool) -> tuple[ServedModel, int]:
    """``build()`` on a worker thread, and the resident memory it added where ``measure``
    (else 0)."""
    if not measure:
        return await asyncio.to_thread(build), 0
    global _measured_loads
    loop = asyncio.get_running_loop()
    if _measured_loads is None or _measured_loads[0] is not loop:
        _measured_loads = (loop, asyncio.Lock())
    async with _measured_loads[1]:
        before = await asyncio.to_thread(_tree_rss)
        model = await asyncio.to_thread(build)
        after = await asyncio.to_thread(_tree_rss)
    return model, max(after - before, 0)


@dataclass
class SlotStatus:
    """Where a replica stands with its model, as the repository controller reads it.

    ``generation`` is what serves now; ``target`` what was asked for last. ``error`` is why
    ``target`` did not replace ``generation`` (empty while it loads or once it serves).
    """

    generation: str
    target: str
    error: str
    versions: VersionStates
    traffic: dict = field(default_factory=dict)  # the serving model's traffic policy (JSON)
    # For the memory budget (cluster/memory_budget.py): requests running now, the wall time
    # the latest one started (0: none yet), the resident memory its load added to this
    # replica's processes (0: not measured)
    in_flight: int = 0
    last_used: float = 0.0
    footprint_bytes: int = 0


def load_failure(model: ServedModel) -> str:
    """Why a freshly built model must not replace a serving one ("" when it may)."""
    failed = {v: s.reason for v, s in model.state().items() if not s.ready}
    if not failed:
        return ""
    return "; ".join(f"version {v}: {reason}" for v, reason in sorted(failed.items()))


class ModelSlot:
    """Serves the current generation of one model and swaps in new ones without a gap."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._model: ServedModel | None = None
        self._generation = ""
        self._target = ""
        self._error = ""
        self._in_flight: dict[int, int] = {}  # id(model) -> requests running on it
        self._loading: asyncio.Task | None = None
        self._starting: asyncio.Future[None] | None = None  # the first load, while it runs
        self._closed = False
        # A sequence model's replica: runs each sequence where it is held (None: all here)
        self.sequences: SequenceRouting | None = None
        # Replaced generations still running sequences started on them (Triton's reload
        # lets them finish there; new sequences start on the serving generation)
        self._retiring: list[ServedModel] = []
        # The traffic policy the repository set last (None: each model follows its config's)
        self._traffic: TrafficPolicy | None = None
        self._last_used = 0.0  # wall time the latest request started
        self._footprint = 0  # memory the serving generation's load added (measured)

    # ------------------------------------------------------------------ replacement

    async def load(self, generation: str, build: BuildModel, measure: bool = False) -> None:
        """Make ``generation`` (built by ``build``) the served model.

        The first call loads before returning; later calls start the load in the background
        and return at once. Asking for the generation already serving or loading does nothing.
        ``measure``: record the resident memory the load adds (loads measured in one process
        run one at a time). A call while the first load runs waits for it first: one model
        is never built twice at once.
        """
        if self._starting is not None:
            await asyncio.shield(self._starting)
        if generation in (self._target, self._generation) and self._model is not None:
            if generation == self._generation and self._loading is not None:
                self._loading.cancel()  # back to what serves: drop a pending replacement
                self._loading = None
            self._target = generation
            return
        self._target = generation
        self._error = ""
        if self._loading is not None:
            self._loading.cancel()
        if self._model is None:
            self._starting = asyncio.ensure_future(self._load_first(generation, build, measure))
            try:
                await asyncio.shield(self._starting)
            finally:
                self._starting = None
            return
        self._loading = asyncio.create_task(self._replace(generation, build, measure))

    async def _load_first(self, generation: str, build: BuildModel, measure: bool) -> None:
        model, footprint = await _build(build, measure)
        if self._closed:  # removed while it loaded
            await _close(model)
            return
        self._model, self._footprint = self._steered(model), footprint
        self._generation = generation

    async def _replace(self, generation: str, build: BuildModel, measure: bool) -> None:
        try:
            fresh, footprint = await _build(build, measure)
        except Exception as err:  # the builders catch model errors; this is a bug
            logger.exception("model '%s': building generation %s failed", self.name, generation)
            self._error = f"{type(err).__name__}: {err}"
            return
        if self._target != generation or self._closed:  # superseded while loading
            await _close(fresh)
            return
        failure = load_failure(fresh)
        if failure:
            logger.error("model '%s': keeping the serving version: %s", self.name, failure)
            self._error = failure
            await _close(fresh)
            return
        previous, self._model, self._generation = self._model, self._steered(fresh), generation
        self._footprint = footprint
        self._loading = None
        if previous is not None:
            await self._retire(previous)

    async def _retire(self, model: ServedModel) -> None:
        """Close a replaced generation once its requests and sequences are done."""
        if isinstance(model, SequenceModel) and model.running_sequences():
            self._retiring.append(model)
            try:
                while model.running_sequences() and not self._closed:
                    await asyncio.sleep(_RETIRE_POLL_S)  # each idles out at the latest
            finally:
                self._retiring.remove(model)
        await self._drain(model)
        await _close(model)

    async def _drain(self, model: ServedModel) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_TIMEOUT_S
        while self._in_flight.get(id(model), 0) and loop.time() < deadline:
            await asyncio.sleep(_DRAIN_POLL_S)

    async def drain(self) -> None:
        """Wait (up to :data:`DRAIN_TIMEOUT_S`) for the requests running on the model."""
        if self._model is not None:
            await self._drain(self._model)

    async def close(self) -> None:
        self._closed = True
        if self._loading is not None:
            self._loading.cancel()
        if self._model is not None:
            await _close(self._model)
            self._model = None

    def steer(self, policy: TrafficPolicy) -> None:
        """Spread the requests that name no version as ``policy`` says, on the serving model
        now and on every generation that replaces it."""
        self._traffic = policy
        if self._model is not None:
            self._steered(self._model)

    def _steered(self, model: ServedModel) -> ServedModel:
        if self._traffic is not None and isinstance(model, SteerableModel):
            model.steer(self._traffic)
        return model

    def status(self) -> SlotStatus:
        model = self._model
        versions = model.state() if model is not None else {}
        traffic = model.traffic.to_json() if isinstance(model, SteerableModel) else {}
        return SlotStatus(
            self._generation,
            self._target,
            self._error,
            versions,
            traffic,
            sum(self._in_flight.values()),
            self._last_used,
            self._footprint,
        )

    # ------------------------------------------------------------------ ServedModel

    @property
    def serving(self) -> ServedModel | None:
        """The model serving now (None before the first load)."""
        return self._model

    @property
    def model(self) -> ServedModel:
        if self._model is None:
            raise InferenceServerError(
                f"Request for unknown model: '{self.name}' is not ready: no version is loaded",
                StatusCode.UNAVAILABLE,
            )
        return self._model

    @property
    def config(self):
        return self.model.config

    @contextlib.contextmanager
    def _running_on(self, model: ServedModel) -> Iterator[None]:
        """Count a request running on ``model`` (a replaced model drains these)."""
        key = id(model)
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        self._last_used = time.time()
        try:
            yield
        finally:
            remaining = self._in_flight[key] - 1
            if remaining:
                self._in_flight[key] = remaining
            else:
                del self._in_flight[key]

    async def infer(self, request: InferRequest) -> InferResponse:
        if self.sequences is not None:
            return await self.sequences.infer(request, self._infer_here)
        return await self._infer_here(request)

    def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        """The responses to ``request``: a decoupled model's as it sends them, else the one
        response (final)."""
        if self.sequences is not None:
            return self.sequences.infer_stream(request, self._stream_here)
        return self._stream_here(request)

    async def infer_forwarded(self, request: InferRequest, sent_to: str) -> InferResponse:
        """A sequence's request another replica forwarded to replica ``sent_to``."""
        return await self._routing().infer_forwarded(request, sent_to, self._infer_here)

    def stream_forwarded(
        self, request: InferRequest, sent_to: str
    ) -> AsyncIterator[StreamedResponse]:
        """A sequence's streamed request another replica forwarded to replica ``sent_to``."""
        return self._routing().stream_forwarded(request, sent_to, self._stream_here)

    def drop_sequence(self, sequence: str, sent_to: str) -> None:
        """``sequence`` started again on another replica than ``sent_to``."""
        self._routing().drop(sequence, sent_to)

    def _routing(self) -> SequenceRouting:
        if self.sequences is None:  # only a sequence model's replicas forward to each other
            raise InferenceServerError(
                f"model '{self.name}' is not a sequence model", StatusCode.INVALID_ARG
            )
        return self.sequences

    def _model_for(self, request: InferRequest) -> ServedModel:
        """The generation that runs ``request``: one replaced by a reload while the request's
        sequence runs on it, else the serving one."""
        serving = self.model
        if not self._retiring or request.parameters.get("sequence_start"):
            return serving
        if isinstance(serving, SequenceModel) and serving.holds_sequence(request):
            return serving  # started again since the reload
        for model in self._retiring:
            if isinstance(model, SequenceModel) and model.holds_sequence(request):
                return model
        return serving

    async def _infer_here(self, request: InferRequest) -> InferResponse:
        model = self._model_for(request)
        with self._running_on(model):
            return await model.infer(request)

    async def _stream_here(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        model = self._model_for(request)
        with self._running_on(model):
            if isinstance(model, StreamingModel):
                # closed with this stream: the model's request ends when its reader stops
                async with contextlib.aclosing(model.infer_stream(request)) as items:
                    async for item in items:
                        yield item
            elif model.config.model_transaction_policy.decoupled:
                raise InferenceServerError(
                    f"model '{self.name}' is decoupled through its members, which rayton "
                    "does not serve yet",
                    StatusCode.UNSUPPORTED,
                )
            else:
                yield StreamedResponse(await model.infer(request), True)

    def metadata(self, version: str = "") -> ModelMetadata:
        return self.model.metadata(version)

    def model_config(self, version: str = "") -> ConfigDocument:
        return self.model.model_config(version)

    def is_ready(self, version: str = "") -> bool:
        return self._model is not None and self._model.is_ready(version)

    def state(self) -> VersionStates:
        return self._model.state() if self._model is not None else {}

    def statistics(self, version: str = "") -> list[ModelStatistics]:
        return self.model.statistics(version)

    def metrics(self) -> list[VersionMetrics]:
        """The serving generation's metric counters (none while nothing is loaded)."""
        return self._model.metrics() if self._model is not None else []


async def _close(model: ServedModel) -> None:
    close = getattr(model, "close", None)
    if close is None:
        return
    with contextlib.suppress(Exception):
        result = close()
        if asyncio.iscoroutine(result):
            await result
