"""``InferenceRequest``, ``InferenceResponse``, the response sender and BLS ``exec()``.

The same request class serves both directions, as in Triton: the backend hands ``execute`` one
per client request (with a response sender attached), and a model builds its own to call
another model through BLS. BLS requests go to the dispatcher installed with
:func:`repo_adapter.python_backend.runtime.set_bls_dispatcher`; like Triton, ``exec()`` reports
failures as a response with ``has_error()``, it does not raise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from repo_adapter.errors import InferenceServerError, ModelResponseError, StatusCode
from repo_adapter.inference_types import (
    RESERVED_REQUEST_PARAMETERS,
    InferRequest,
    InferResponse,
    InferTensor,
    RequestedOutput,
)
from repo_adapter.python_backend import runtime
from repo_adapter.python_backend.dtypes import (
    as_protocol_array,
    enum_to_protocol,
    protocol_to_enum,
)
from repo_adapter.python_backend.tensor import Tensor
from repo_adapter.python_backend.triton_error import (
    TritonError,
    TritonErrorCode,
    TritonModelException,
    from_status_code,
)
from repo_adapter.response_stream import StreamedResponse

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """``TRITONSERVER_MemoryType``: where a BLS request prefers its outputs."""

    TRITONSERVER_MEMORY_CPU = 0
    TRITONSERVER_MEMORY_CPU_PINNED = 1
    TRITONSERVER_MEMORY_GPU = 2


class PreferredMemory:
    """Preferred output memory of a BLS request (advisory: outputs are always host memory).

    Args:
        preferred_memory_type: A ``TRITONSERVER_MEMORY_*`` constant.
        preferred_device_id: Device index for GPU memory.
    """

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = MemoryType(preferred_memory_type)
        self.preferred_device_id = int(preferred_device_id)

    def __repr__(self) -> str:
        return f"PreferredMemory({self.preferred_memory_type.name}, {self.preferred_device_id})"


class InferenceTrace:
    """Trace context of a request: pass ``request.trace()`` to a BLS ``InferenceRequest`` so
    the BLS call is traced as the request's child (as in Triton)."""

    def __init__(self, context: str | None = None) -> None:
        self._context = context

    def get_context(self) -> str | None:
        """The trace context string (the traced request's key), or None when not traced."""
        return self._context


class InferenceResponse:
    """The response to one request: output tensors, or an error.

    Args:
        output_tensors: The output :class:`Tensor` objects.
        error: A :class:`TritonError` to fail the request with.
        parameters: Response parameters, ``str`` keys and ``bool``/``int``/``str`` values.
    """

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        tensors = [] if output_tensors is None else output_tensors
        if not isinstance(tensors, (list, tuple)):
            raise TritonModelException('"output_tensors" must be a list.')
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"output_tensors must contain pb_utils.Tensor objects, found "
                    f"{type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"error must be a pb_utils.TritonError, found {type(error).__name__}")
        self._output_tensors = list(tensors)
        self._error = error
        self._parameters = _parameters_to_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        """The output tensors."""
        return self._output_tensors

    def has_error(self) -> bool:
        """Whether the response carries an error."""
        return self._error is not None

    def error(self) -> TritonError | None:
        """The error, or None."""
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON object string."""
        return self._parameters


class ResponseIterator:
    """What ``exec(decoupled=True)`` returns: the target's responses as they come, a
    decoupled target's several (the final flag sent alone is an empty last response, as in
    Triton), another target's one. ``async for`` works too (``async_exec`` gives its
    responses once the final one came)."""

    def __init__(self, responses: Iterable[InferenceResponse]) -> None:
        self._source = responses
        self._responses = iter(responses)

    def __iter__(self) -> Iterator[InferenceResponse]:
        return self

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def __aiter__(self) -> ResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        try:
            return next(self._responses)
        except StopIteration:
            raise StopAsyncIteration from None

    def cancel(self) -> None:
        """Stop reading the responses (those not read yet are dropped)."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()


class ResponseDelivery(Protocol):
    """Where a decoupled model's responses go as it sends them (the backend's side)."""

    def deliver(self, response: InferenceResponse | None, final: bool) -> None:
        """One response (None: the final flag alone), in the order they were sent."""

    @property
    def cancelled(self) -> bool:
        """Whether the client stopped reading the responses."""


class _RequestState:
    """Backend-side state of one request passed to ``execute``; ``delivery`` set for a
    decoupled model's request (its responses go there, any number of them)."""

    def __init__(self, delivery: ResponseDelivery | None = None) -> None:
        self.lock = threading.Lock()
        self.response: concurrent.futures.Future[InferenceResponse] = concurrent.futures.Future()
        self.sent = 0
        self.closed = False
        self._cancelled = False
        self.sender_requested = False
        self.release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self.delivery = delivery

    @property
    def cancelled(self) -> bool:
        delivery = self.delivery
        return self._cancelled or (delivery is not None and delivery.cancelled)

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        self._cancelled = value

    def send(self, response: InferenceResponse | None, flags: int) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                f"response must be a pb_utils.InferenceResponse, found {type(response).__name__}"
            )
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException(f"invalid response flags {flags}")
        with self.lock:
            if self.delivery is not None:  # decoupled: any number of responses, then final
                if self.closed:
                    raise TritonModelException(
                        "Unable to send response. Response sender has been closed."
                    )
                self.closed = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
                self.sent += 1
                # Under the lock: responses sent from several threads keep their order.
                self.delivery.deliver(response, self.closed)
                return
            # The checks and messages of Triton's ResponseSender for non-decoupled models.
            if response is not None and self.sent > 0:
                raise TritonModelException(
                    "Non-decoupled model cannot send more than one response."
                )
            if response is None and flags and self.sent == 0:
                raise TritonModelException(
                    "Non-decoupled model cannot send complete final before sending a response."
                )
            if self.closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self.closed = True
            self.sent += 1
            if response is not None and not self.response.cancelled():  # nobody waits any more
                self.response.set_result(response)


class InferenceResponseSender:
    """Sends the response of a request from ``execute`` (or later, from another thread).

    Non-decoupled models may use it instead of returning the response (Triton 24.06+); they
    then return None for that request, or None instead of the list.
    """

    def __init__(self, state: _RequestState) -> None:
        self._state = state

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Send ``response``; ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` closes the sender.

        Raises:
            TritonModelException: for a second response, a final flag before any response, or
                a send after the sender was closed.
        """
        self._state.send(response, flags)

    def is_cancelled(self) -> bool:
        """Whether the client gave up on the request."""
        return self._state.cancelled


class InferenceRequest:
    """An inference request: received by ``execute``, or built by a model for BLS.

    Args:
        model_name: Target model (BLS).
        requested_output_names: Outputs to compute.
        inputs: Input :class:`Tensor` objects.
        request_id: Request ID.
        correlation_id: Sequence ID for stateful targets, ``int`` or ``str``.
        model_version: Target version; -1 for the version policy's choice.
        flags: ``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START``/``_END`` bits.
        timeout: Timeout in microseconds; 0 for none.
        preferred_memory: Where outputs are preferred (advisory).
        trace: ``request.trace()`` of the request this call is made for: traced as its child.
        parameters: Request parameters: ``str`` keys, ``bool``/``int``/``str`` values.

    Raises:
        TritonModelException: for parameters or a correlation ID of the wrong type.
    """

    def __init__(
        self,
        model_name: str,
        requested_output_names: Sequence[str],
        inputs: Sequence[Tensor],
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(model_name, str):
            raise TypeError(f"model_name must be a str, found {type(model_name).__name__}")
        if not all(isinstance(tensor, Tensor) for tensor in inputs):
            raise TypeError("inputs must be a list of pb_utils.Tensor objects")
        if isinstance(requested_output_names, str) or not all(
            isinstance(name, str) for name in requested_output_names
        ):
            raise TypeError("requested_output_names must be a list of str")
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        self._model_name = model_name
        self._requested_output_names = list(requested_output_names)
        self._inputs = list(inputs)
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._preferred_memory = preferred_memory or PreferredMemory(
            MemoryType.TRITONSERVER_MEMORY_CPU, 0
        )
        self._trace = trace or InferenceTrace()
        self._parameters = _parameters_to_json(parameters)
        self._state: _RequestState | None = None
        self._sender: InferenceResponseSender | None = None

    def inputs(self) -> list[Tensor]:
        """The input tensors."""
        return self._inputs

    def request_id(self) -> str:
        """The request ID ("" when the client gave none)."""
        return self._request_id

    def correlation_id(self) -> int | str:
        """The sequence (correlation) ID; 0 when none."""
        return self._correlation_id

    def flags(self) -> int:
        """Sequence flags (``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START``/``_END``)."""
        return self._flags

    def set_flags(self, flags: int) -> None:
        """Replace the sequence flags (BLS requests)."""
        self._flags = int(flags)

    def timeout(self) -> int:
        """The request timeout in microseconds; 0 for none."""
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON object string."""
        return self._parameters

    def requested_output_names(self) -> list[str]:
        """Names of the outputs to return (all model outputs when the client named none)."""
        return self._requested_output_names

    def trace(self) -> InferenceTrace:
        """The request's trace context."""
        return self._trace

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender for this request's response.

        Raises:
            TritonModelException: for a request the model built itself (BLS).
        """
        if self._state is None:
            raise TritonModelException(
                "a response sender is only available for requests passed to execute()"
            )
        if self._sender is None:
            self._state.sender_requested = True
            self._sender = InferenceResponseSender(self._state)
        return self._sender

    def is_cancelled(self) -> bool:
        """Whether the client gave up on the request."""
        return self._state is not None and self._state.cancelled

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` runs the request again in a later batch.

        Return None for a rescheduled request from ``execute``.
        """
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(f"invalid release flags {flags}")
        if self._state is None:
            raise TritonModelException("release flags only apply to requests passed to execute()")
        self._state.release_flags = flags

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on its target model and wait for the response (BLS).

        From a synchronous ``execute`` the call blocks its worker thread while the server's
        event loop runs the request. In ``async def execute`` use :meth:`async_exec`.

        Args:
            decoupled: Return a :class:`ResponseIterator` over the target's responses,
                read as they come (a decoupled target's several).

        Returns:
            The response; failures are a response with ``has_error()``.
        """
        if decoupled:
            return ResponseIterator(self._stream_blocking())
        response = _check_bls_allowed()
        blocking = runtime.get_thread_bls_dispatcher()
        if response is None and blocking is not None:
            response = self._dispatch_with(blocking)
        elif response is None:
            try:
                response = runtime.run_blocking(self._dispatch, "InferenceRequest.exec()")
            except runtime.LoopUnavailableError as err:
                response = _error_response(
                    f"BLS is not available: {err}", TritonErrorCode.UNAVAILABLE
                )
        return response

    def async_exec(self, decoupled: bool = False) -> asyncio.Future:
        """Start this request on its target model; await the result (BLS, async execute).

        Must be called with a running event loop, like Triton's.

        Args:
            decoupled: Resolve to a :class:`ResponseIterator` instead of the response.
        """
        loop = asyncio.get_running_loop()

        async def run() -> InferenceResponse | ResponseIterator:
            if decoupled:
                refused = _check_bls_allowed()
                if refused is not None:
                    return ResponseIterator([refused])
                return ResponseIterator(await runtime.run_async(self._collect_stream))
            return _check_bls_allowed() or await runtime.run_async(self._dispatch)

        return loop.create_task(run())

    async def _dispatch(self) -> InferenceResponse:
        dispatcher = runtime.get_bls_dispatcher()
        if dispatcher is None:
            return _error_response(
                "BLS is not available: no inference dispatcher is installed in this process",
                TritonErrorCode.UNAVAILABLE,
            )
        try:
            request = to_infer_request(self)
        except InferenceServerError as err:
            return _error_response(err.message, from_status_code(err.code))
        try:
            result = await dispatcher(request)
        except Exception as err:
            return _failed_dispatch(err)
        return from_infer_response(result)

    def _stream_blocking(self) -> Iterator[InferenceResponse]:
        """The responses of ``exec(decoupled=True)``, read as they come."""
        refused = _check_bls_allowed()
        if refused is not None:
            yield refused
            return
        try:
            request = to_infer_request(self)
        except InferenceServerError as err:
            yield _error_response(err.message, from_status_code(err.code))
            return
        blocking = runtime.get_thread_bls_stream_dispatcher()
        try:
            if blocking is not None:
                items = blocking(request)
            else:
                dispatcher = runtime.get_bls_stream_dispatcher()
                if dispatcher is None:
                    yield _no_dispatcher()
                    return
                items = runtime.iterate_blocking(
                    lambda: dispatcher(request), "InferenceRequest.exec()"
                )
            for item in items:
                yield _streamed_response(item)
        except runtime.LoopUnavailableError as err:
            yield _error_response(f"BLS is not available: {err}", TritonErrorCode.UNAVAILABLE)
        except Exception as err:
            yield _failed_dispatch(err)

    async def _collect_stream(self) -> list[InferenceResponse]:
        dispatcher = runtime.get_bls_stream_dispatcher()
        if dispatcher is None:
            return [_no_dispatcher()]
        try:
            request = to_infer_request(self)
        except InferenceServerError as err:
            return [_error_response(err.message, from_status_code(err.code))]
        responses = []
        try:
            async for item in dispatcher(request):
                responses.append(_streamed_response(item))
        except Exception as err:
            responses.append(_failed_dispatch(err))
        return responses

    def _dispatch_with(self, blocking: runtime.BlockingBlsDispatcher) -> InferenceResponse:
        try:
            return from_infer_response(blocking(to_infer_request(self)))
        except Exception as err:
            return _failed_dispatch(err)

    def __repr__(self) -> str:
        return (
            f"InferenceRequest(model_name={self._model_name!r}, "
            f"inputs={[t.name() for t in self._inputs]}, request_id={self._request_id!r})"
        )


def _no_dispatcher() -> InferenceResponse:
    return _error_response(
        "BLS is not available: no inference dispatcher is installed in this process",
        TritonErrorCode.UNAVAILABLE,
    )


def _streamed_response(item: StreamedResponse) -> InferenceResponse:
    """One of a target's responses as the model sees it (the final flag alone: an empty
    response)."""
    result = item.result
    if result is None:
        return InferenceResponse()
    if isinstance(result, InferenceServerError):
        return _error_response(result.message, from_status_code(result.code))
    return from_infer_response(result)


def _failed_dispatch(err: Exception) -> InferenceResponse:
    """A BLS request's failure as the error response the model sees."""
    if isinstance(err, InferenceServerError):
        return _error_response(err.message, from_status_code(err.code))
    return _error_response(f"{type(err).__name__}: {err}", TritonErrorCode.INTERNAL)


def _check_bls_allowed() -> InferenceResponse | None:
    """An error response when BLS is called outside ``execute``, as Triton forbids.

    Checked before touching the event loop: ``initialize`` may run while the loop thread is
    blocked loading the model, so waiting on the loop there would deadlock.
    """
    call = runtime.current_call()
    if call is not None and call.phase != "execute":
        return _error_response(
            f"BLS requests are not allowed in {call.phase}(); issue them from execute()",
            TritonErrorCode.UNSUPPORTED,
        )
    return None


def _error_response(message: str, code: int) -> InferenceResponse:
    return InferenceResponse(error=TritonError(message, code))


def _parameters_to_json(parameters: dict[str, Any] | None) -> str:
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


# ---------------------------------------------------------------------------------------------
# Conversions between the API objects and the server's request/response types


def from_infer_request(
    request: InferRequest,
    default_outputs: Sequence[str],
    delivery: ResponseDelivery | None = None,
) -> InferenceRequest:
    """The ``execute``-side view of a client request; input arrays are shared, not copied.

    Args:
        request: The decoded client request.
        default_outputs: Outputs to request when the client named none (all model outputs,
            as Triton core fills them in).
        delivery: Where its responses go, for a decoupled model's request.
    """
    params = request.parameters
    flags = 0
    if params.get("sequence_start"):
        flags |= TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    if params.get("sequence_end"):
        flags |= TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    correlation_id = params.get("sequence_id", 0)
    if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
        correlation_id = 0
    user_params = {k: v for k, v in params.items() if k not in RESERVED_REQUEST_PARAMETERS}
    pb_request = InferenceRequest.__new__(InferenceRequest)
    pb_request._model_name = request.model_name
    pb_request._requested_output_names = [o.name for o in request.outputs] or list(default_outputs)
    pb_request._inputs = [
        Tensor._wrap(t.name, t.data, protocol_to_enum(t.datatype)) for t in request.inputs
    ]
    pb_request._request_id = request.id
    pb_request._correlation_id = correlation_id
    version = request.model_version
    pb_request._model_version = int(version) if version.isdigit() else -1
    pb_request._flags = flags
    pb_request._timeout = request.timeout_us
    pb_request._preferred_memory = PreferredMemory(MemoryType.TRITONSERVER_MEMORY_CPU, 0)
    pb_request._trace = InferenceTrace(request.trace.key if request.trace is not None else None)
    # default=str: the transports may carry parameter types the Python API does not (floats).
    pb_request._parameters = json.dumps(user_params, default=str) if user_params else "{}"
    pb_request._state = _RequestState(delivery)
    pb_request._sender = None
    return pb_request


def request_state(request: InferenceRequest) -> _RequestState:
    """Backend-side state of a request built by :func:`from_infer_request`."""
    assert request._state is not None
    return request._state


def to_infer_request(request: InferenceRequest) -> InferRequest:
    """A BLS request as the server's request type (BYTES inputs become bytes object arrays)."""
    parameters: dict[str, Any] = json.loads(request._parameters)
    if request._correlation_id not in (0, ""):
        parameters["sequence_id"] = request._correlation_id
    if request._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
        parameters["sequence_start"] = True
    if request._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
        parameters["sequence_end"] = True
    if request._timeout:
        parameters["timeout"] = request._timeout
    inputs = []
    for tensor in request._inputs:
        datatype = enum_to_protocol(tensor.triton_dtype())
        inputs.append(
            InferTensor(tensor.name(), datatype, as_protocol_array(tensor._host_array(), datatype))
        )
    return InferRequest(
        model_name=request._model_name,
        inputs=inputs,
        model_version="" if request._model_version < 0 else str(request._model_version),
        id=request._request_id,
        parameters=parameters,
        outputs=[RequestedOutput(name) for name in request._requested_output_names],
        parent_trace=request._trace.get_context() or "",
    )


def from_infer_response(response: InferResponse) -> InferenceResponse:
    """A server response as the model sees a BLS result."""
    tensors = [Tensor._wrap(t.name, t.data, protocol_to_enum(t.datatype)) for t in response.outputs]
    result = InferenceResponse(tensors)
    result._parameters = json.dumps(response.parameters, default=str)
    return result


def error_from_response(response: InferenceResponse) -> ModelResponseError:
    """The server error carried by a response with ``has_error()``."""
    error = response.error()
    assert error is not None
    return ModelResponseError(error.message(), StatusCode[error.code().name])
