"""What rayton's deployments call on each other's replicas: the two typed surfaces.

:class:`ModelReplicaApi` is what every deployment that serves models offers (a dedicated
model, a routed model's router and groups, an ensemble, the shared host): each call names the
model, so one client (:class:`deployments.apps.handles.ModelHandles`) reaches a model the same
way wherever it lives. :class:`ReplicaControlApi` is what the repository controller and the
metrics deployment ask of every replica (:class:`deployments.apps.replica_control.
ReplicaControl` implements it once for all of them).

Callers name a method by its attribute here (``ReplicaControlApi.replica_info``), never by a
string: a renamed method fails at import and in the tests, not at run time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from deployments.core.model_host import HostedSet
from deployments.core.model_slot import SlotStatus
from deployments.core.served_model import ModelMetadata
from deployments.http.messages import HttpReply, HttpRequest
from deployments.metrics.collector import MetricsSnapshot
from deployments.observability.log_settings import LogSettings
from deployments.observability.statistics import ModelStatistics
from deployments.observability.status import ReplicaInfo
from deployments.observability.trace_settings import TracePlan
from repo_adapter.config import ConfigDocument
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.response_stream import StreamedResponse


class ModelReplicaApi(Protocol):
    """The calls a replica serving ``model`` answers (NOT_FOUND for a model it does not serve).

    ``version`` is the request's version string (``""``: the model's policy default).
    """

    async def infer(self, model: str, request: InferRequest) -> InferResponse: ...

    def infer_stream(self, model: str, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        """``request``'s responses as the model sends them (a decoupled model's several;
        BLS ``exec(decoupled=True)``)."""
        ...

    async def infer_wire(self, model: str, message: bytes) -> bytes:
        """A serialized ``ModelInferRequest`` -> its serialized response (gRPC frontend)."""
        ...

    def infer_wire_stream(self, model: str, message: bytes) -> AsyncIterator[bytes]:
        """A serialized ``ModelInferRequest`` of a stream -> its serialized
        ``ModelStreamInferResponse`` messages (a decoupled model's several; gRPC frontend)."""
        ...

    async def handle_http(self, request: HttpRequest) -> HttpReply:
        """An HTTP request under ``/v2/models/<model>`` another replica sent on (one that
        arrived before the proxy routed the model here)."""
        ...

    def metadata(self, model: str, version: str = "") -> ModelMetadata: ...

    def model_config(self, model: str, version: str = "") -> ConfigDocument: ...

    def is_ready(self, model: str, version: str = "") -> bool: ...

    async def statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        """The model's statistics summed over every replica that serves it."""
        ...

    def local_statistics(self, model: str, version: str = "") -> list[ModelStatistics]:
        """This replica's counters only."""
        ...

    def slot_status(self, model: str) -> SlotStatus:
        """This replica's generation, pending load and version states of ``model``."""
        ...


class ReplicaControlApi(Protocol):
    """What the control plane asks of every replica."""

    def apply_log_settings(self, settings: LogSettings) -> None: ...

    def apply_trace_settings(self, plan: TracePlan) -> None: ...

    def replica_info(self) -> ReplicaInfo: ...

    def metrics_snapshot(self) -> MetricsSnapshot: ...

    def forget_regions(self, names: list[str]) -> None:
        """Stop using these shared-memory regions (the client unregistered them)."""
        ...


class SharedHostApi(Protocol):
    """What the repository controller asks of the shared host's replicas besides a model's
    calls."""

    def hosted_statuses(self) -> dict[str, SlotStatus]:
        """Every hosted model's slot status in this replica."""
        ...

    async def host_models(self, hosted: HostedSet) -> None:
        """Serve ``hosted`` from now on: load, reload and remove in place."""
        ...
