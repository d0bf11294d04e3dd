"""What a served model offers every transport, and the helpers single models and ensembles share.

:class:`ServedModel` is the whole interface between the transports (HTTP routes, the gRPC
servicer, the Serve deployments) and a model: :class:`~deployments.core.single_model.
SingleModel` and :class:`~deployments.core.ensemble_model.EnsembleModel` implement it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Protocol, TypedDict, runtime_checkable

from tritonclient.grpc import model_config_pb2 as mc

from deployments.core.classification import classify
from deployments.observability.statistics import ModelStatistics, VersionMetrics
from repo_adapter.config import ConfigDocument
from repo_adapter.datatypes import config_to_protocol
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferRequest, InferResponse, InferTensor, RequestedOutput
from repo_adapter.model_state import VersionStates
from repo_adapter.response_stream import StreamedResponse
from repo_adapter.version_traffic import TrafficPolicy


class TensorMetadata(TypedDict):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(TypedDict):
    """Triton's model metadata document."""

    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]


class ServedModel(Protocol):
    """One model (all its served versions) as Triton's protocol sees it.

    ``version`` is the request's version string: ``""`` for the model's policy default.
    Errors are :class:`InferenceServerError` with Triton's codes and messages.
    """

    name: str
    config: mc.ModelConfig

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate, run, and answer with the requested outputs."""
        ...

    def metadata(self, version: str = "") -> ModelMetadata:
        """Triton's model metadata document."""
        ...

    def model_config(self, version: str = "") -> ConfigDocument:
        """The normalised configuration as ``/config`` renders it."""
        ...

    def is_ready(self, version: str = "") -> bool:
        """Whether the model (or that version) can serve."""
        ...

    def state(self) -> VersionStates:
        """Per-version state for the repository index."""
        ...

    def statistics(self, version: str = "") -> list[ModelStatistics]:
        """This process's statistics entries (Triton's statistics extension)."""
        ...

    def metrics(self) -> list[VersionMetrics]:
        """This process's per-version counters of Triton's metric families."""
        ...


@runtime_checkable
class StreamingModel(Protocol):
    """A served model that answers a request with a stream of responses (a decoupled
    model's); the others give one response, which the slot wraps."""

    def infer_stream(self, request: InferRequest) -> AsyncIterator[StreamedResponse]:
        """Validate, run, and yield the responses until the final one."""
        ...


@runtime_checkable
class SteerableModel(Protocol):
    """A served model whose requests that name no version follow a traffic policy
    (:mod:`repo_adapter.version_traffic`)."""

    def steer(self, policy: TrafficPolicy) -> None:
        """Follow ``policy`` from now on."""
        ...

    @property
    def traffic(self) -> TrafficPolicy:
        """The policy followed now."""
        ...


@runtime_checkable
class SequenceModel(Protocol):
    """A served model that keeps sequences (``sequence_batching``): a reload lets the ones
    running finish on it."""

    def holds_sequence(self, request: InferRequest) -> bool:
        """Whether ``request``'s sequence is running in this model."""
        ...

    def running_sequences(self) -> int:
        """How many sequences are running in this model."""
        ...


def model_metadata(config: mc.ModelConfig, versions: list[str]) -> ModelMetadata:
    """Triton's model metadata: shapes get a leading -1 when the model batches."""
    batch_dims = [-1] if config.max_batch_size > 0 else []

    def tensor(t) -> TensorMetadata:
        dims = batch_dims + [int(d) for d in t.dims]
        return {"name": t.name, "datatype": config_to_protocol(t.data_type), "shape": dims}

    return {
        "name": config.name,
        "versions": versions,
        "platform": config.platform or config.backend,
        "inputs": [tensor(t) for t in config.input],
        "outputs": [tensor(t) for t in config.output],
    }


def select_outputs(
    produced: Mapping[str, InferTensor],
    requested: Sequence[RequestedOutput],
    labels: Mapping[str, Sequence[str]],
    batched: bool,
    missing: Callable[[str], InferenceServerError],
) -> list[InferTensor]:
    """The requested outputs in request order, classified where ``class_count`` asks for it."""
    selected = []
    for wanted in requested:
        tensor = produced.get(wanted.name)
        if tensor is None:
            raise missing(wanted.name)
        if wanted.class_count > 0:
            tensor = classify(tensor, wanted.class_count, labels.get(wanted.name), batched)
        selected.append(tensor)
    return selected
