"""Python's side of rayton's backend host (``rayton_host.c``), through ctypes.

The host library is loaded once per process, globally, so every backend loaded after it
resolves Triton's API there. Objects mirror the backend API's: a :class:`NativeBackend` (one
library), its :class:`NativeModel` (one model version) and :class:`NativeInstance` (one
instance). :meth:`NativeInstance.execute` hands the backend a batch of :class:`NativeRequest`
whose inputs point at the callers' arrays; what the backend sends back, from any thread,
arrives in the request's :class:`CompletionQueue` as :class:`ResponseEvent` and
:class:`ReleaseEvent`. ctypes releases the GIL for every call into the host, so a backend's
``Execute`` runs beside Python threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from repo_adapter.backends.native.build import host_library
from repo_adapter.datatypes import (
    deserialize_bytes_tensor,
    protocol_to_numpy,
    serialize_bytes_tensor,
)
from repo_adapter.errors import InferenceServerError, StatusCode
from repo_adapter.inference_types import ReportedTimes

# TRITONSERVER_DataType's values, in order from 0 (the ABI's numbering).
DATATYPES = (
    "INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
    "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16",
)  # fmt: skip
_DATATYPE_CODES = {name: code for code, name in enumerate(DATATYPES)}
# TRITONSERVER_Error_Code's values, in order from 0.
ERROR_CODES = (
    StatusCode.UNKNOWN,
    StatusCode.INTERNAL,
    StatusCode.NOT_FOUND,
    StatusCode.INVALID_ARG,
    StatusCode.UNAVAILABLE,
    StatusCode.UNSUPPORTED,
    StatusCode.ALREADY_EXISTS,
    StatusCode.CANCELLED,
)
# TRITONSERVER_InstanceGroupKind's values.
INSTANCE_KINDS = {"KIND_AUTO": 0, "KIND_CPU": 1, "KIND_GPU": 2, "KIND_MODEL": 3}
RESPONSE_COMPLETE_FINAL = 1
_EVENTS_PER_POP = 64  # events read per call into the host
_OUTPUTS_PER_CALL = 8  # outputs read per call (more: a second call)
REQUEST_FLAG_SEQUENCE_START, REQUEST_FLAG_SEQUENCE_END = 1, 2

_EVENT_RESPONSE, _EVENT_RELEASE = 1, 2
_p = ctypes.c_void_p


class _Event(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("token", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("response", _p),
        ("error", _p),
        ("next", _p),
    ]


class _OutputView(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("datatype", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("dims_count", ctypes.c_uint32),
        ("buffer", _p),
        ("byte_size", ctypes.c_uint64),
    ]


class _Report(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("token", ctypes.c_uint64),
        ("success", ctypes.c_int),
        ("batch_size", ctypes.c_uint64),
        ("exec_start_ns", ctypes.c_uint64),
        ("compute_start_ns", ctypes.c_uint64),
        ("compute_end_ns", ctypes.c_uint64),
        ("exec_end_ns", ctypes.c_uint64),
    ]


_REPORT_REQUEST = 1
_REPORTS_PER_CALL = 64


_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "TRITONSERVER_ErrorCode": (ctypes.c_int, [_p]),
    "TRITONSERVER_ErrorMessage": (ctypes.c_char_p, [_p]),
    "TRITONSERVER_ErrorDelete": (None, [_p]),
    "rayton_set_verbose_logging": (None, [ctypes.c_int]),
    "rayton_queue_new": (_p, []),
    "rayton_queue_fd": (ctypes.c_int, [_p]),
    "rayton_queue_hold": (None, [_p, ctypes.c_int]),
    "rayton_queue_pop_many": (ctypes.c_uint32, [_p, ctypes.POINTER(_Event), ctypes.c_uint32]),
    "rayton_queue_delete": (None, [_p]),
    "rayton_backend_load": (_p, [ctypes.c_char_p] * 4 + [ctypes.POINTER(_p)]),
    "rayton_backend_unload": (_p, [_p]),
    "rayton_model_new": (
        _p,
        [
            _p,
            ctypes.c_char_p,
            ctypes.c_uint64,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(_p),
        ],
    ),
    "rayton_model_config": (_p, [_p]),
    "rayton_free": (None, [_p]),
    "rayton_model_delete": (_p, [_p]),
    "rayton_instance_new": (
        _p,
        [_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(_p)],
    ),
    "rayton_instance_delete": (_p, [_p]),
    "rayton_instance_take_reports": (
        ctypes.c_uint32,
        [_p, ctypes.POINTER(_Report), ctypes.c_uint32],
    ),
    "rayton_instance_execute": (_p, [_p, ctypes.POINTER(_p), ctypes.c_uint32]),
    "rayton_request_new": (
        _p,
        [_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint32],
    ),
    "rayton_request_add_input": (
        None,
        [
            _p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_uint32,
            _p,
            ctypes.c_uint64,
        ],
    ),
    "rayton_request_add_output": (None, [_p, ctypes.c_char_p]),
    "rayton_request_add_string_parameter": (None, [_p, ctypes.c_char_p, ctypes.c_char_p]),
    "rayton_request_add_int_parameter": (None, [_p, ctypes.c_char_p, ctypes.c_int64]),
    "rayton_request_add_bool_parameter": (None, [_p, ctypes.c_char_p, ctypes.c_int]),
    "rayton_request_add_double_parameter": (None, [_p, ctypes.c_char_p, ctypes.c_double]),
    "rayton_request_delete": (None, [_p]),
    "rayton_response_outputs": (
        ctypes.c_uint32,
        [_p, ctypes.POINTER(_OutputView), ctypes.c_uint32],
    ),
    "TRITONBACKEND_ResponseDelete": (_p, [_p]),
}

_host: ctypes.CDLL | None = None
_host_lock = threading.Lock()


def host() -> ctypes.CDLL:
    """The host library, loaded globally on first use (BuildError when it is not built)."""
    return _host if _host is not None else _load_host()


def _load_host() -> ctypes.CDLL:
    global _host
    with _host_lock:
        if _host is None:
            library = ctypes.CDLL(str(host_library()), mode=ctypes.RTLD_GLOBAL)
            for name, (restype, argtypes) in _SIGNATURES.items():
                function = getattr(library, name)
                function.restype = restype
                function.argtypes = argtypes
            _host = library
        return _host


def take_error(error: int | None) -> InferenceServerError | None:
    """The host's TRITONSERVER_Error as an InferenceServerError (and the error freed)."""
    if not error:
        return None
    library = host()
    code = library.TRITONSERVER_ErrorCode(error)
    message = (library.TRITONSERVER_ErrorMessage(error) or b"").decode(errors="replace")
    library.TRITONSERVER_ErrorDelete(error)
    status = ERROR_CODES[code] if 0 <= code < len(ERROR_CODES) else StatusCode.UNKNOWN
    return InferenceServerError(message, status)


def _raise(error: int | None) -> None:
    failure = take_error(error)
    if failure is not None:
        raise failure


def _text(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


class _HostObject:
    """An object of the host that Python owns: its handle, until it is finalized."""

    kind = ""

    def __init__(self, name: str, handle: int) -> None:
        self.name = name
        self._handle: int | None = handle

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise InferenceServerError(
                f"{self.kind} '{self.name}' was finalized", StatusCode.UNAVAILABLE
            )
        return self._handle

    def _finalize_with(self, delete) -> None:
        """Run the host's finalizer once; the backend's error, if any, is raised."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _raise(delete(handle))


class NativeBackend(_HostObject):
    """One loaded ``libtriton_<name>.so`` (``TRITONBACKEND_Initialize`` ran)."""

    kind = "backend"

    def __init__(self, library: Path, name: str, config_json: str = "{}") -> None:
        self.path = library
        error = _p()
        handle = host().rayton_backend_load(
            _text(str(library)),
            _text(name),
            _text(config_json),
            _text(str(library.parent)),
            ctypes.byref(error),
        )
        _raise(error.value)
        super().__init__(name, handle)

    def unload(self) -> None:
        """``TRITONBACKEND_Finalize`` and the library closed (its error raised)."""
        self._finalize_with(host().rayton_backend_unload)


class NativeModel(_HostObject):
    """One version of a model on a backend (``TRITONBACKEND_ModelInitialize`` ran)."""

    kind = "model"

    def __init__(
        self,
        backend: NativeBackend,
        name: str,
        version: int,
        repository: Path,
        config_json: str,
        auto_complete: bool = False,
    ) -> None:
        self.backend = backend
        error = _p()
        handle = host().rayton_model_new(
            backend.handle,
            _text(name),
            version,
            _text(str(repository)),
            _text(config_json),
            int(auto_complete),
            ctypes.byref(error),
        )
        _raise(error.value)
        super().__init__(name, handle)

    def config_json(self) -> str:
        """The config as the backend left it (``TRITONBACKEND_ModelSetConfig`` included)."""
        library = host()
        pointer = library.rayton_model_config(self.handle)
        try:
            return ctypes.string_at(pointer).decode()
        finally:
            library.rayton_free(pointer)

    def finalize(self) -> None:
        self._finalize_with(host().rayton_model_delete)


@dataclass(frozen=True)
class RequestReport:
    """``TRITONBACKEND_ModelInstanceReportStatistics`` for request ``token``."""

    token: int
    success: bool
    times: ReportedTimes


@dataclass(frozen=True)
class BatchReport:
    """``TRITONBACKEND_ModelInstanceReportBatchStatistics``: a batch of ``batch_size`` rows."""

    batch_size: int
    times: ReportedTimes


class NativeInstance(_HostObject):
    """One instance of a model (``TRITONBACKEND_ModelInstanceInitialize`` ran)."""

    kind = "instance"

    def __init__(
        self, model: NativeModel, name: str, kind: str = "KIND_CPU", device_id: int = 0
    ) -> None:
        self.model = model
        error = _p()
        handle = host().rayton_instance_new(
            model.handle, _text(name), INSTANCE_KINDS[kind], device_id, ctypes.byref(error)
        )
        _raise(error.value)
        super().__init__(name, handle)

    def execute(self, requests: Sequence[NativeRequest]) -> None:
        """``TRITONBACKEND_ModelInstanceExecute`` on ``requests`` (blocks, GIL released).

        Raises the backend's error when it returned one: then it took none of the requests.
        """
        batch = (_p * len(requests))(*(request.handle for request in requests))
        _raise(host().rayton_instance_execute(self.handle, batch, len(requests)))

    def take_reports(self) -> list[RequestReport | BatchReport]:
        """The statistics the backend reported since the last call, oldest first."""
        library = host()
        buffer = (_Report * _REPORTS_PER_CALL)()
        reports: list[RequestReport | BatchReport] = []
        while True:
            count = library.rayton_instance_take_reports(self.handle, buffer, _REPORTS_PER_CALL)
            for raw in buffer[:count]:
                times = ReportedTimes(
                    raw.exec_start_ns, raw.compute_start_ns, raw.compute_end_ns, raw.exec_end_ns
                )
                if raw.kind == _REPORT_REQUEST:
                    reports.append(RequestReport(raw.token, bool(raw.success), times))
                else:
                    reports.append(BatchReport(raw.batch_size, times))
            if count < _REPORTS_PER_CALL:
                return reports

    def finalize(self) -> None:
        self._finalize_with(host().rayton_instance_delete)


@dataclass(frozen=True)
class OutputTensor:
    """One output of a response, copied out of the backend's buffer."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray


@dataclass(frozen=True)
class ResponseEvent:
    """A response the backend sent for request ``token`` (or only its flags: no outputs)."""

    token: int
    final: bool
    outputs: list[OutputTensor] = field(default_factory=list)
    error: InferenceServerError | None = None


@dataclass(frozen=True)
class ReleaseEvent:
    """The backend released request ``token``: its inputs may be freed."""

    token: int


class CompletionQueue:
    """Where a backend's responses and releases for a set of requests arrive, from any thread;
    :attr:`fd` is readable while events wait."""

    def __init__(self) -> None:
        self._handle: int | None = host().rayton_queue_new()
        self.fd: int = host().rayton_queue_fd(self._handle)
        self._events = (_Event * _EVENTS_PER_POP)()  # only the reader's thread pops

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise RuntimeError("completion queue closed")
        return self._handle

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No wake-ups (:attr:`fd` stays quiet) while the block runs: the caller drains the
        queue itself after it, instead of being woken for each event. Leaving the last hold
        with events waiting makes :attr:`fd` readable."""
        host().rayton_queue_hold(self.handle, 1)
        try:
            yield
        finally:
            if self._handle is not None:
                host().rayton_queue_hold(self._handle, -1)

    def pop_all(self) -> list[ResponseEvent | ReleaseEvent]:
        """Every event waiting, oldest first (the queue is empty after)."""
        library, events, popped = host(), self._events, []
        while True:
            count = library.rayton_queue_pop_many(self.handle, events, len(events))
            popped += [_event(library, raw) for raw in events[:count]]
            if count < len(events):
                return popped

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            host().rayton_queue_delete(handle)


def _event(library: ctypes.CDLL, raw: _Event) -> ResponseEvent | ReleaseEvent:
    if raw.kind == _EVENT_RELEASE:
        return ReleaseEvent(raw.token)
    outputs = []
    if raw.response:
        outputs = _outputs(library, raw.response)
        library.TRITONBACKEND_ResponseDelete(raw.response)
    return ResponseEvent(
        raw.token, bool(raw.flags & RESPONSE_COMPLETE_FINAL), outputs, take_error(raw.error)
    )


def _outputs(library: ctypes.CDLL, response: int) -> list[OutputTensor]:
    views = (_OutputView * _OUTPUTS_PER_CALL)()
    count = library.rayton_response_outputs(response, views, len(views))
    if count > len(views):
        views = (_OutputView * count)()
        library.rayton_response_outputs(response, views, count)
    outputs = []
    for view in views[:count]:
        dims = tuple(view.shape[: view.dims_count])
        datatype = view.datatype
        protocol = DATATYPES[datatype] if 0 <= datatype < len(DATATYPES) else "INVALID"
        raw = ctypes.string_at(view.buffer, view.byte_size) if view.byte_size else b""
        array = _array(raw, protocol, dims)
        outputs.append(OutputTensor((view.name or b"").decode(), protocol, dims, array))
    return outputs


def _array(raw: bytes, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """An output buffer as an array of its shape; BYTES as Triton's length-prefixed strings."""
    count = math.prod(shape)
    if datatype == "BYTES":
        return deserialize_bytes_tensor(raw, count).reshape(shape)
    dtype = protocol_to_numpy(datatype)
    expected = count * dtype.itemsize
    if len(raw) < expected:
        raise InferenceServerError(
            f"output buffer holds {len(raw)} bytes, its shape {list(shape)} of {datatype} needs "
            f"{expected}",
            StatusCode.INTERNAL,
        )
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)


class NativeRequest:
    """One request for a backend; its input arrays stay referenced until :meth:`delete`."""

    def __init__(
        self,
        queue: CompletionQueue,
        token: int,
        inputs: Mapping[str, tuple[str, np.ndarray]],
        outputs: Sequence[str] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        parameters: Mapping[str, str | int | bool | float] | None = None,
    ) -> None:
        library = host()
        self.token = token
        string_id = correlation_id if isinstance(correlation_id, str) else None
        self._handle: int | None = library.rayton_request_new(
            queue.handle,
            token,
            _text(request_id),
            0 if string_id is not None else int(correlation_id),
            _text(string_id),
            flags,
        )
        self._buffers: list[object] = []
        for name, (datatype, array) in inputs.items():
            if datatype == "BYTES":
                data = np.frombuffer(serialize_bytes_tensor(array), dtype=np.uint8)
            else:
                data = np.ascontiguousarray(array, dtype=protocol_to_numpy(datatype))
            shape = (ctypes.c_int64 * max(1, array.ndim))(*array.shape)
            self._buffers.append(data)
            library.rayton_request_add_input(
                self._handle,
                _text(name),
                _DATATYPE_CODES[datatype],
                shape,
                array.ndim,
                data.ctypes.data if data.nbytes else None,
                data.nbytes,
            )
        for name in outputs:
            library.rayton_request_add_output(self._handle, _text(name))
        for key, value in (parameters or {}).items():
            if isinstance(value, bool):
                library.rayton_request_add_bool_parameter(self._handle, _text(key), int(value))
            elif isinstance(value, int):
                library.rayton_request_add_int_parameter(self._handle, _text(key), value)
            elif isinstance(value, float):
                library.rayton_request_add_double_parameter(self._handle, _text(key), value)
            else:
                library.rayton_request_add_string_parameter(
                    self._handle, _text(key), _text(str(value))
                )

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise RuntimeError("request deleted")
        return self._handle

    def delete(self) -> None:
        """Free the request (after the backend released it, or when Execute never took it)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            host().rayton_request_delete(handle)
        self._buffers.clear()
