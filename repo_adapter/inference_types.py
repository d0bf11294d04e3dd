"""Transport-neutral inference request and response types.

Both the HTTP and the gRPC frontends decode into these and encode from them; model
deployments and backends see nothing else. Tensors are numpy arrays end to end (BYTES
tensors are numpy object arrays of ``bytes``), never Python lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from repo_adapter.request_trace import RequestTrace

if TYPE_CHECKING:
    from repo_adapter.response_stream import ResponseSink

# A JSON object as a client sent it, before it is checked: a request's JSON header, a
# settings change.
JsonObject = dict[str, Any]

# Request parameters Triton's frontend consumes itself rather than handing them to the model as
# parameters. They stay in InferRequest.parameters (priority, timeout, ... are read from there);
# whatever exposes parameters to model code should leave these out.
RESERVED_REQUEST_PARAMETERS = frozenset(
    ("sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output")
)


@dataclass
class InferTensor:
    """A named tensor with its protocol datatype (``"FP32"``, ``"BYTES"``, ...)."""

    name: str
    datatype: str
    data: np.ndarray
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass(frozen=True)
class SharedMemoryTarget:
    """Where a client asked an output to be written: ``byte_size`` bytes at ``offset`` of its
    registered shared-memory region ``region`` (Triton's shared-memory extensions)."""

    region: str
    offset: int
    byte_size: int


@dataclass
class RequestedOutput:
    """An output the client asked for, with its per-output parameters.

    ``binary_data`` is None when the client did not say (the transport decides).
    ``class_count`` > 0 asks for the classification extension. ``shared_memory``: the output
    goes into a region the client registered, not into the response.
    """

    name: str
    binary_data: bool | None = None
    class_count: int = 0
    parameters: dict[str, Any] = field(default_factory=dict)
    shared_memory: SharedMemoryTarget | None = None


@dataclass
class InferRequest:
    """One client inference request, already decoded from its transport."""

    model_name: str
    inputs: list[InferTensor]
    model_version: str = ""
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: list[RequestedOutput] = field(default_factory=list)
    # This request's trace where it is traced (kept in the process that traces it), and the
    # key of the traced request it was made for (an ensemble step, a BLS call): traced too.
    trace: RequestTrace | None = None
    parent_trace: str = ""
    # Run this request's batch off the event loop even when it is short: set by a transport
    # whose server admits one call per loop turn (grpc.aio) when other calls were in flight,
    # which an execution inline on the loop would keep from being admitted.
    offload_execution: bool = False
    # Where a decoupled model sends this request's responses (set by the serving side for a
    # decoupled model only; it stays in the process that reads them).
    responses: ResponseSink | None = None

    def input(self, name: str) -> InferTensor | None:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        return None

    @property
    def priority(self) -> int:
        return int(self.parameters.get("priority", 0) or 0)

    @property
    def timeout_us(self) -> int:
        return int(self.parameters.get("timeout", 0) or 0)


@dataclass(frozen=True)
class ComputeTimes:
    """Nanoseconds one response spent in its model's compute phases (Triton's statistics).

    The serving side attaches them to each response so that an ensemble can report the sums
    of its members' compute times, as Triton's ensemble scheduler does.
    """

    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0

    def __add__(self, other: ComputeTimes) -> ComputeTimes:
        return ComputeTimes(
            self.input_ns + other.input_ns,
            self.infer_ns + other.infer_ns,
            self.output_ns + other.output_ns,
        )


@dataclass(frozen=True)
class ReportedTimes:
    """A backend's own timestamps of an execution (monotonic clock, ns), as a Triton backend
    reports them: execution start, compute start, compute end, execution end."""

    exec_start_ns: int
    compute_start_ns: int
    compute_end_ns: int
    exec_end_ns: int

    @property
    def compute(self) -> ComputeTimes:
        """Input, inference and output phases as Triton derives them from these stamps."""
        return ComputeTimes(
            max(self.compute_start_ns - self.exec_start_ns, 0),
            max(self.compute_end_ns - self.compute_start_ns, 0),
            max(self.exec_end_ns - self.compute_end_ns, 0),
        )


@dataclass(frozen=True)
class BackendReports:
    """What a backend reported for one execution (Triton's backend-reported statistics):
    each batch with its size, and each request's outcome (None: the backend reported nothing
    for it), in the order of the execution's requests."""

    batches: list[tuple[int, ReportedTimes]]
    requests: list[tuple[bool, ReportedTimes] | None]


@dataclass
class InferResponse:
    """The result of one request: outputs in the order they should be returned.

    ``compute`` is server-side bookkeeping (never sent to clients): the compute times of the
    execution that produced the response, when it came through a model's batcher.
    """

    model_name: str
    model_version: str
    outputs: list[InferTensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    compute: ComputeTimes | None = None

    def output(self, name: str) -> InferTensor | None:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        return None
