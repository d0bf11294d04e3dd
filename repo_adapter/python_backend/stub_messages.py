"""The messages between a python model's host and its stub process (one dataclass each).

Host to stub: :class:`StartInstance`, :class:`RunBatch`, :class:`CancelBatch`,
:class:`CancelResponses`, :class:`CollectMetrics`, :class:`StopInstance`, and the replies to
the stub's calls (:class:`CallReply`). Stub to host: :class:`InstanceStarted`,
:class:`BatchDone`, a decoupled model's responses (:class:`DecoupledResponse`),
:class:`MetricsCollected`, :class:`InstanceStopped`, the model's calls out of its process
(:class:`BlsCall`, :class:`LoadModelCall`, :class:`UnloadModelCall`, :class:`ModelReadyCall`)
and its log lines (:class:`LogLine`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from repo_adapter.backends.base import Execution, InstanceSpec
from repo_adapter.errors import InferenceServerError
from repo_adapter.inference_types import InferRequest, InferResponse
from repo_adapter.python_backend.metrics import CustomFamily
from repo_adapter.response_stream import StreamedResponse


@dataclass(frozen=True)
class StartInstance:
    """Load the model version and initialize the instance."""

    model_name: str
    version: int
    config_bytes: bytes  # the serialized normalised ModelConfig
    model_dir: str
    instance: InstanceSpec
    log_level: int  # the host's level for model log lines (``rayton.python_model``)
    backend_file: str = ""  # a python-based backend's model.py ("" : the version's own)


@dataclass(frozen=True)
class InstanceStarted:
    """The instance is initialized (``error`` None) or failed to load."""

    error: InferenceServerError | None


@dataclass(frozen=True)
class RunBatch:
    """Execute one batch (requests without their in-process trace)."""

    batch_id: int
    requests: list[InferRequest]
    log_level: int


@dataclass(frozen=True)
class BatchDone:
    """What a batch gave: its execution, or the error that failed it whole."""

    batch_id: int
    outcome: Execution | InferenceServerError


@dataclass(frozen=True)
class CancelBatch:
    """The caller gave up on a batch: ``is_cancelled()`` tells the model."""

    batch_id: int


@dataclass(frozen=True)
class DecoupledResponse:
    """A response a decoupled model sent for request ``index`` of batch ``batch_id`` (None:
    the final flag alone), during ``execute`` or after it."""

    batch_id: int
    index: int
    result: InferResponse | InferenceServerError | None
    final: bool


@dataclass(frozen=True)
class CancelResponses:
    """Nobody reads the responses of request ``index`` of batch ``batch_id`` any more:
    ``is_cancelled()`` tells the model."""

    batch_id: int
    index: int


@dataclass(frozen=True)
class CollectMetrics:
    """Snapshot the model's custom metric families."""

    call_id: int


@dataclass(frozen=True)
class MetricsCollected:
    call_id: int
    families: list[CustomFamily]


@dataclass(frozen=True)
class StopInstance:
    """Call ``finalize()`` and exit."""


@dataclass(frozen=True)
class InstanceStopped:
    """``finalize()`` returned (its error, if any, was logged in the stub)."""


@dataclass(frozen=True)
class BlsCall:
    """A BLS request the model made (``exec()`` / ``async_exec()``); ``stream``: its
    responses are iterated (``decoupled=True``)."""

    call_id: int
    request: InferRequest
    stream: bool = False


@dataclass(frozen=True)
class BlsStreamed:
    """One response of a streamed BLS call made on the batch channel, as it came."""

    call_id: int
    item: StreamedResponse


@dataclass(frozen=True)
class LoadModelCall:
    """``pb_utils.load_model``."""

    call_id: int
    model_name: str
    config: str
    files: dict[str, bytes] | None


@dataclass(frozen=True)
class UnloadModelCall:
    """``pb_utils.unload_model``."""

    call_id: int
    model_name: str
    unload_dependents: bool


@dataclass(frozen=True)
class ModelReadyCall:
    """``pb_utils.is_model_ready``."""

    call_id: int
    model_name: str
    model_version: str


HostCall = BlsCall | LoadModelCall | UnloadModelCall | ModelReadyCall


@dataclass(frozen=True)
class CallReply:
    """The host's answer to one of the stub's calls: a value or the error it raised."""

    call_id: int
    value: InferResponse | list[StreamedResponse] | bool | None = None
    error: InferenceServerError | None = None


@dataclass(frozen=True)
class LogLine:
    """A log record of the model's process, re-emitted by the host's logging."""

    logger_name: str
    level: int
    message: str
    pathname: str
    lineno: int
    exc_text: str | None


def for_stub(request: InferRequest) -> InferRequest:
    """``request`` as its stub sees it: its trace only names the traced request (for the BLS
    calls made for it); the records and the response sink stay with this process's copy."""
    trace = request.trace
    if trace is None and request.responses is None:
        return request
    if trace is not None:
        trace = replace(trace, levels=frozenset(), stamps=[], tensors=[])
    # A decoupled request's sink stays here: the stub sends its responses back by index.
    return replace(request, trace=trace, responses=None)


def plain_error(err: BaseException, fallback: Any) -> InferenceServerError:
    """``err`` as an InferenceServerError (others become ``fallback``'s code with the
    exception's type and text)."""
    if isinstance(err, InferenceServerError):
        return InferenceServerError(err.message, err.code)
    return InferenceServerError(f"{type(err).__name__}: {err}", fallback)
