"""The trace of one inference request: Triton's timestamps and tensors, as they happen.

A request the server decides to trace carries a :class:`RequestTrace` (``InferRequest.trace``)
from its transport to the backend; each stage stamps it (``HTTP_RECV_START`` ...
``COMPUTE_END`` ... ``HTTP_SEND_END``) on the monotonic clock the statistics use, so a trace and
the statistics agree. A request made for a traced one (an ensemble step, a BLS call with
``trace=request.trace()``) names it in ``InferRequest.parent_trace`` and is traced too.
:meth:`RequestTrace.events` renders Triton's trace-file entries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

TIMESTAMPS = "TIMESTAMPS"
TENSORS = "TENSORS"
QUEUE_INPUT = "TENSOR_QUEUE_INPUT"
BACKEND_OUTPUT = "TENSOR_BACKEND_OUTPUT"


class TraceRecord(TypedDict):
    """A finished trace as plain data, shipped to the trace file's writer or exporter."""

    key: str
    parent_key: str
    model_name: str
    model_version: int
    request_id: str
    stamps: list[tuple[str, int]]
    tensors: list[dict[str, Any]]  # Triton's trace-file tensor entries, written as they are
    epoch_offset_ns: int


@dataclass
class RequestTrace:
    """What one traced request records; ``key`` is unique in the cluster."""

    key: str
    model_name: str
    levels: frozenset[str]
    parent_key: str = ""
    request_id: str = ""
    model_version: int = -1  # set when the model picks the version
    stamps: list[tuple[str, int]] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)

    def stamp(self, name: str, ns: int | None = None) -> None:
        """Record timestamp ``name`` (now, or at ``ns`` on the monotonic clock)."""
        if TIMESTAMPS in self.levels:
            self.stamps.append((name, time.monotonic_ns() if ns is None else ns))

    def tensor(self, activity: str, name: str, datatype: str, data: Any) -> None:
        """Record a tensor (``TENSORS`` level): Triton's comma-joined values and shape."""
        if TENSORS not in self.levels:
            return
        array = np.asarray(data)
        if array.dtype == np.object_:
            values = ",".join(
                v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in array.ravel()
            )
        else:
            values = ",".join(_number(v) for v in array.ravel().tolist())
        self.tensors.append(
            {
                "activity": activity,
                "tensor": {
                    "name": name,
                    "data": values,
                    "shape": ",".join(str(d) for d in array.shape),
                    "dtype": datatype,
                },
            }
        )

    def to_record(self) -> TraceRecord:
        """Plain data, to ship to the trace file's writer."""
        return {
            "key": self.key,
            "parent_key": self.parent_key,
            "model_name": self.model_name,
            "model_version": self.model_version,
            "request_id": self.request_id,
            "stamps": self.stamps,
            "tensors": self.tensors,
            # wall clock = monotonic + this, on this node (what OpenTelemetry's times need)
            "epoch_offset_ns": time.time_ns() - time.monotonic_ns(),
        }


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # Triton writes 1, not 1.0
    return str(value)


# One entry of Triton's trace file (its JSON: a trace's header, timestamps or a tensor).
TraceEvent = dict[str, Any]


def trace_events(record: TraceRecord, trace_id: int, parent_id: int | None) -> list[TraceEvent]:
    """Triton's trace-file entries of one trace (``record`` from :meth:`to_record`)."""
    header: TraceEvent = {
        "id": trace_id,
        "model_name": record["model_name"],
        "model_version": record["model_version"],
    }
    if record["request_id"]:
        header["request_id"] = record["request_id"]
    if parent_id is not None:
        header["parent_id"] = parent_id
    events = [header]
    for name, ns in record["stamps"]:
        events.append({"id": trace_id, "timestamps": [{"name": name, "ns": ns}]})
    events += [{"id": trace_id, **tensor} for tensor in record["tensors"]]
    return events
